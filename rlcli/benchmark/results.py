"""The results table: one row per run, read from the run directories, kept as ``results.csv`` (the table)
and ``results.json`` (the table plus each run's evaluation curve, enough to remake the report without
the run directories, as ``zoo/benchmarks`` keeps it)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rlcli.benchmark.execute import PLAN, RECORD, read_meta, read_record
from rlcli.benchmark.plan import RUNS_DIR
from rlcli.config import Frozen
from rlcli.errors import CheckpointError, UsageError
from rlcli.runs import checkpoint
from rlcli.runs.rundir import eval_history, load_config

RESULTS_CSV, RESULTS_JSON = "results.csv", "results.json"
FORMAT = "rlcli-benchmark-results-v1"
VERSION_KEYS = ("rlcli", "torch", "gymnasium", "envpool", "numpy", "python")


class RunResult(Frozen):
    """One row of the results table. Returns are mean evaluation returns (deterministic policy, the
    game's own score); steps are env steps; times are seconds."""

    algo: str
    env_id: str
    seed: int
    budget: int  # env steps asked for
    status: str  # finished, failed, interrupted, running, pending
    steps: int = 0  # env steps trained
    final_return: float | None = None  # the last evaluation
    final_std: float | None = None  # across that evaluation's episodes
    best_return: float | None = None  # the best evaluation during training
    wall_time_s: float | None = None  # training time over all attempts (meta.json)
    sps: float | None = None  # steps / wall_time_s
    process_s: float | None = None  # wall-clock time of the processes, start-up included
    backend: str | None = None
    versions: dict[str, str] = {}
    git_commit: str | None = None
    error: str | None = None
    run_dir: str = ""
    curve: tuple[tuple[int, float], ...] = ()  # (step, mean evaluation return) of every evaluation


def read_run(run_dir: Path) -> RunResult | None:
    """The row of one run directory, or None when it is no benchmark run."""
    record = read_record(run_dir)
    if record is not None:
        algo, env_id, seed, budget = record.algo, record.env_id, record.seed, record.steps
    else:
        try:
            cfg = load_config(run_dir)
        except CheckpointError:
            return None
        algo, env_id, seed, budget = cfg.algo.algo, cfg.env.id, cfg.seed, cfg.algo.steps
    meta = read_meta(run_dir)
    history = eval_history(run_dir)
    latest = history[-1] if history else {}
    wall = meta.get("wall_time")
    steps = int(meta.get("steps", 0))
    if meta.get("finished"):
        status = "finished"
    else:
        status = record.status if record is not None else "unfinished"
    return RunResult(
        algo=algo, env_id=env_id, seed=seed, budget=budget, status=status, steps=steps,
        final_return=latest.get("mean_return"), final_std=latest.get("std_return"),
        best_return=meta.get("best_eval"), wall_time_s=wall, sps=steps / wall if wall else None,
        process_s=record.process_s if record is not None else None, backend=meta.get("backend"),
        versions={k: str(v) for k, v in (meta.get("versions") or {}).items()}, git_commit=meta.get("git_commit"),
        error=record.error if record is not None and status != "finished" else None,
        run_dir=str(run_dir), curve=tuple((int(h["step"]), float(h["mean_return"])) for h in history))


def collect_results(directory: Path) -> list[RunResult]:
    """Every run under ``directory/runs``, in the order of the last plan (``benchmark.json``), then by
    algorithm, env and seed."""
    runs = directory / RUNS_DIR
    rows = [read_run(d) for d in sorted(runs.iterdir()) if d.is_dir()] if runs.is_dir() else []
    order = _plan_order(directory)
    return sorted((r for r in rows if r is not None),
                  key=lambda r: (order.get((r.algo, r.env_id, r.seed), len(order)), r.algo, r.env_id, r.seed))


def _plan_order(directory: Path) -> dict[tuple[str, str, int], int]:
    try:
        runs = json.loads((directory / PLAN).read_text())["runs"]
        return {(r["algo"], r["env_id"], int(r["seed"])): i for i, r in enumerate(runs)}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def write_results(directory: Path, results: list[RunResult]) -> tuple[Path, Path]:
    """``results.csv`` and ``results.json`` in ``directory``; returns their paths."""
    columns = [name for name in RunResult.model_fields if name not in ("versions", "curve")]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([*columns, *VERSION_KEYS])
    for row in results:
        values = row.model_dump(mode="json")
        writer.writerow([_cell(values[c]) for c in columns] + [row.versions.get(k, "") for k in VERSION_KEYS])
    csv_path, json_path = directory / RESULTS_CSV, directory / RESULTS_JSON
    checkpoint.atomic_write(csv_path, text.getvalue().encode())
    checkpoint.write_json(json_path, {"format": FORMAT, "runs": [r.model_dump(mode="json") for r in results]})
    return csv_path, json_path


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def load_results(directory: Path) -> list[RunResult]:
    """The results of a benchmark directory: read afresh from ``runs/`` where it has them, else from
    its ``results.json`` (a copy kept without the run directories)."""
    if not directory.is_dir():
        raise UsageError(f"no benchmark directory {directory}")
    if (directory / RUNS_DIR).is_dir() and any((d / RECORD).is_file() or (d / checkpoint.CONFIG).is_file()
                                                for d in (directory / RUNS_DIR).iterdir()):
        return collect_results(directory)
    path = directory / RESULTS_JSON
    if not path.is_file():
        raise UsageError(f"{directory} holds no benchmark results (no {RUNS_DIR}/ with runs, no {RESULTS_JSON})")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        return [RunResult.model_validate(row) for row in data["runs"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{path} is not an rlcli results file ({str(e).splitlines()[0]})") from None
