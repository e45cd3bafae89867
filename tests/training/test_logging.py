"""The metric sinks: what TensorBoard and the CSV file read back."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlcli.training.sinks import CSVSink, TensorBoardSink


def test_tensorboard_reads_every_metric_of_every_step(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    sink.write(512, {"losses/policy": 0.25, "charts/SPS": 40_000.0})
    sink.write(1024, {"losses/policy": -0.5, "charts/SPS": 41_000.0, "eval/mean_return": 15.5})
    sink.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars == {"losses/policy": [(512, 0.25), (1024, -0.5)],
                       "charts/SPS": [(512, 40_000.0), (1024, 41_000.0)],
                       "eval/mean_return": [(1024, 15.5)]}


def test_csv_keeps_the_first_rows_columns_and_the_optional_ones(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    sink = CSVSink(path, optional=("eval/mean_return",))
    sink.write(512, {"losses/policy": 0.25})
    sink.write(1024, {"losses/policy": -0.5, "eval/mean_return": 15.5, "unknown": 1.0})
    sink.close()
    with path.open() as f:
        rows = list(csv.reader(f))
    assert rows == [["step", "losses/policy", "eval/mean_return"], ["512", "0.25", ""], ["1024", "-0.5", "15.5"]]


def handed_over(sink: TensorBoardSink) -> list[tuple[int, float]]:
    """(step, wall time) of each event the sink gives its writer from now on."""
    handed: list[tuple[int, float]] = []
    give = sink._file.add_summary
    sink._file.add_summary = lambda summary, step, wall_time: (handed.append((step, wall_time)),  # type: ignore[method-assign]
                                                                give(summary, step, wall_time))
    return handed


def test_tensorboard_events_wait_for_the_handoff_and_keep_the_time_of_their_write(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    sink.HANDOFF_SECONDS = 3600.0
    handed, windows = handed_over(sink), []
    for step in (1, 2, 3):
        before = time.time()
        sink.write(step, {"charts/SPS": float(step)})
        windows.append((before, time.time()))
        time.sleep(0.01)
    assert handed == []
    sink.close()
    assert [step for step, _ in handed] == [1, 2, 3]
    assert all(start <= stamp <= end for (_, stamp), (start, end) in zip(handed, windows, strict=True))


def test_tensorboard_hands_events_over_once_the_interval_has_passed(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    sink.HANDOFF_SECONDS = 0.0
    handed = handed_over(sink)
    sink.write(1, {"charts/SPS": 1.0})
    sink.write(2, {"charts/SPS": 2.0})
    assert [step for step, _ in handed] == [1, 2]
    sink.close()


def test_a_tensorboard_write_after_close_fails_instead_of_reopening(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    sink.close()
    with pytest.raises(OSError, match="closed"):
        sink.write(1, {"charts/SPS": 1.0})
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
