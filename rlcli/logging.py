"""Metric sinks behind one protocol: TensorBoard, CSV and Weights & Biases."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Protocol


class MetricSink(Protocol):
    def write(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(log_dir))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        self._writer.close()


class CSVSink:
    """One row per write. The columns are those of the first row plus ``optional`` ones that appear
    only on some rows (or those of the existing file, on resume); missing values are left empty."""

    def __init__(self, path: Path, optional: tuple[str, ...] = ()) -> None:
        self._path = path
        self._optional = optional
        self._fields: list[str] | None = None
        if path.is_file() and path.stat().st_size:
            with path.open() as f:
                self._fields = next(csv.reader(f), None)
        self._file = path.open("a", newline="")

    def write(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **metrics}
        if self._fields is None:
            self._fields = list(row) + [k for k in self._optional if k not in row]
            csv.writer(self._file).writerow(self._fields)
        csv.DictWriter(self._file, self._fields, extrasaction="ignore").writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class WandbSink:
    def __init__(self, project: str, run_dir: Path, name: str, config: dict[str, Any],
                 resume_id: str | None = None) -> None:
        import wandb

        self._run = wandb.init(project=project, name=name, dir=str(run_dir), config=config,
                               id=resume_id, resume="allow" if resume_id else None)
        self.run_id: str = self._run.id

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()
