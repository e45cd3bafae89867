"""The metric sinks: what TensorBoard and the CSV file read back."""

from __future__ import annotations

import csv
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlcli.logging import CSVSink, TensorBoardSink


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
