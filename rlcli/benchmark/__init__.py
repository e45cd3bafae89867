"""Benchmarks: the cross product of algorithms, environments and seeds, run as separate ``rlcli train``
processes (locally or on Ray), gathered into a results table and a report.

``BENCH/`` holds ``benchmark.json`` (the last plan), ``runs/ENV__ALGO__sSEED/`` (one run directory
each, with ``train.log`` and ``benchmark-run.json``), ``results.csv`` / ``results.json`` (one row per
run) and ``report.md`` with ``figures/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rlcli.benchmark.execute import BenchmarkInterrupted, RunRecord, RunStatus, execute, run_statuses
from rlcli.benchmark.plan import (
    BenchmarkPlan,
    RunSpec,
    TrainOptions,
    default_workers,
    load_suites,
    plan_benchmark,
    run_memory_gib,
)
from rlcli.benchmark.report import BOOTSTRAP_REPS, compare, write_report
from rlcli.benchmark.results import RunResult, collect_results, load_results, write_results
from rlcli.runs.folders import writable_folder

__all__ = ["BenchmarkInterrupted", "BenchmarkPlan", "Report", "RunRecord", "RunResult", "RunSpec", "RunStatus",
           "TrainOptions", "compare", "default_workers", "execute", "load_results", "load_suites",
           "make_report", "plan_benchmark", "run_benchmark", "run_memory_gib", "run_statuses"]


class Report(NamedTuple):
    results: list[RunResult]
    results_csv: Path
    results_json: Path
    report: Path


def make_report(directory: Path, out: Path | None = None, reps: int = BOOTSTRAP_REPS) -> Report:
    """Reads the results of ``directory`` (its run directories, else its results.json) and writes the
    results table and the report into ``out`` (default: ``directory``)."""
    results = load_results(directory)
    out = out or directory
    writable_folder(out)
    results_csv, results_json = write_results(out, results)
    return Report(results, results_csv, results_json, write_report(results, out, reps))


def run_benchmark(plan: BenchmarkPlan, workers: int, ray_address: str | None = None, gpus_per_run: float = 0.0,
                  on_finish: Callable[[RunSpec, RunRecord], None] | None = None,
                  reps: int = BOOTSTRAP_REPS, notify: Callable[[str], None] | None = None
                  ) -> tuple[list[RunRecord], Report]:
    """Executes the plan, then writes the results table and the report of every run in its directory.
    On Ctrl-C the table and report are written for what has finished, and BenchmarkInterrupted raised."""
    try:
        records = execute(plan, workers, ray_address, gpus_per_run, on_finish, notify)
    except BenchmarkInterrupted:
        if collect_results(plan.directory):
            make_report(plan.directory, reps=reps)
        raise
    return records, make_report(plan.directory, reps=reps)
