"""``rlcli tune``: an Optuna study over an algorithm's hyperparameters, with a live table of its trials."""

from __future__ import annotations

import math
import shutil
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rlcli.algos import DEFAULT
from rlcli.cli.app import app
from rlcli.cli.options import AlgoName, Backend, Device
from rlcli.config import MAX_SEED
from rlcli.jobs.interrupts import term_as_interrupt
from rlcli.runs.folders import writable_folder
from rlcli.training.agents import resolve_device

SHOWN_TRIALS = 20  # rows of the live table: the latest trials


class Sampler(str, Enum):
    tpe = "tpe"
    random = "random"
    cmaes = "cmaes"


class Pruner(str, Enum):
    median = "median"
    halving = "halving"
    none = "none"


@app.command(help="Search hyperparameters with Optuna; the best are written in the format of hyperparams/*.yml. "
                  "Example: rlcli tune Hopper-v5 --algo ppo --trials 50 --steps 200000")
def tune(
    env_ids: Annotated[list[str], typer.Argument(metavar="ENV...", help="Environment id(s); several are scored "
                                                 "by their mean normalised return.", show_default=False)],
    algo: AlgoName = None,
    trials: Annotated[int, typer.Option(min=1, help="Trials in the study, counting those of earlier runs.")] = 50,
    steps: Annotated[Optional[int], typer.Option(
        min=1, help="Env steps per training run \\[default: the env's tuned budget].", show_default=False)] = None,
    seeds_per_trial: Annotated[int, typer.Option(min=1, help="Seeds trained and averaged per trial.")] = 1,
    sampler: Annotated[Sampler, typer.Option(help="Sampler.")] = Sampler.tpe,
    pruner: Annotated[Pruner, typer.Option(help="Pruner (halving: successive halving).")] = Pruner.median,
    startup_trials: Annotated[int, typer.Option(min=0, help="Trials sampled at random and never pruned first.")] = 5,
    evaluations: Annotated[int, typer.Option(min=1, help="Evaluations per run, each reported to the pruner.")] = 10,
    eval_episodes: Annotated[int, typer.Option(min=1, help="Episodes per evaluation.")] = 10,
    space: Annotated[Optional[Path], typer.Option(help="YAML search space replacing the built-in one.")] = None,
    storage: Annotated[Optional[str], typer.Option(
        help="Optuna storage URL, e.g. postgresql://user:pw@host/db \\[default: sqlite study.db in the study "
             "directory].", show_default=False)] = None,
    study_name: Annotated[Optional[str], typer.Option(help="Study name \\[default: the directory's name].",
                                                      show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option(help="Study directory \\[default: tunes/ENV__ALGO].",
                                                show_default=False)] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Worker processes running trials at once.")] = 1,
    threads: Annotated[Optional[int], typer.Option(
        min=1, help="Torch threads per worker \\[default: 1 with --jobs > 1, else per algorithm].",
        show_default=False)] = None,
    device: Annotated[Device, typer.Option(help="Torch device.")] = Device.auto,
    backend: Annotated[Backend, typer.Option(help="Env backend.")] = Backend.auto,
    env_module: Annotated[Optional[str], typer.Option(help="Module to import that registers env ids.")] = None,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED,
                                      help="Seed of the sampler and of each trial's first run.")] = 0,
    write: Annotated[bool, typer.Option("--write", help="Put the best entry into hyperparams/ALGO.yml.")] = False,
) -> None:
    from rlcli.tune import results, study
    from rlcli.tune.plan import plan_study

    console = Console(soft_wrap=True, highlight=False)
    if device.value != "auto":
        resolve_device(device.value)  # a GPU named where there is none: refused before the study is made
    spec = plan_study(env_ids, algo or DEFAULT, space_file=space, steps=steps, out=out, storage=storage,
                      study_name=study_name, threads=threads, backend=backend.value, env_module=env_module,
                      trials=trials, seeds_per_trial=seeds_per_trial, sampler=sampler.value, pruner=pruner.value,
                      startup_trials=startup_trials, evaluations=evaluations, eval_episodes=eval_episodes, jobs=jobs,
                      device=device.value, seed=seed)
    made = not spec.study_dir.exists()
    writable_folder(spec.study_dir)
    try:
        tuning = study.open_study(spec)
    except BaseException:  # a storage that cannot be reached: nothing left where there was nothing
        if made:
            shutil.rmtree(spec.study_dir, ignore_errors=True)
        raise
    with term_as_interrupt() as terminated:  # a scheduler's or kill's stop records the trials as Ctrl-C does
        outcome, interrupted = run_with_display(console, spec, tuning)
    summary = results.summarize(spec, tuning, write=write and not interrupted)
    print_summary(console, spec, summary)
    for line in outcome.notes:
        console.print(line, markup=False)
    for line in outcome.failures:
        console.print(f"error: {line}", markup=False)
    if interrupted:
        console.print("Interrupted; the running trials are recorded as interrupted. "
                      "Run the same command again to continue the study.")
        raise typer.Exit(143 if terminated() else 130)
    if outcome.failures:
        raise typer.Exit(1)
    if summary.best is None and summary.failed:
        first = summary.failed[0]
        console.print(f"error: no trial completed; the first failed (trial {first.number}: {first.reason})",
                      markup=False)
        raise typer.Exit(1)


def run_with_display(console: Console, spec: Any, tuning: Any) -> tuple[Any, bool]:
    """Runs the study under a live table of its trials; returns its RunOutcome and whether Ctrl-C stopped it."""
    from rlcli.tune import study
    from rlcli.tune.plan import describe

    done = study.counted_trials(tuning)
    console.print(describe(spec, done))
    if done >= spec.trials:
        console.print(f"The study already holds {done} trials; raise --trials to run more.")
    display = TrialDisplay(console, tuning, search_keys(spec.search_space()))
    try:
        with display.live:
            outcome = study.run(spec, display.refresh)
            display.refresh()
    except KeyboardInterrupt:
        return study.RunOutcome([], []), True
    return outcome, False


def search_keys(search: Any) -> list[str]:
    """The flat hyperparameter names a trial samples, in the space's order."""
    return [target for param in search.params for target in param.targets]


class TrialDisplay:
    """A live table of the latest trials on a terminal; elsewhere a line as each trial ends."""

    def __init__(self, console: Console, study: Any, keys: list[str]) -> None:
        self.console, self.study, self.keys = console, study, keys
        self.terminal = console.is_terminal
        self.printed: set[int] = set()
        self.live = Live(Table(), console=console, auto_refresh=False, transient=False)
        if not self.terminal:
            self.live = _NoLive()  # type: ignore[assignment]
        self.initial = {row.number for row in self._rows() if row.state != "running"}

    def _rows(self) -> list[Any]:
        from rlcli.tune.study import trial_rows

        return trial_rows(self.study)

    def refresh(self) -> None:
        rows = self._rows()
        if self.terminal:
            self.live.update(self.table(rows), refresh=True)
            return
        for row in rows:
            if row.state not in ("running", "waiting") and row.number not in self.printed | self.initial:
                self.printed.add(row.number)
                self.console.print(self.line(row))

    def table(self, rows: list[Any]) -> Table:
        table = Table(title="Trials", title_justify="left", box=None, pad_edge=False)
        for name, justify in (("#", "right"), ("state", "left"), ("value", "right"), ("best", "right"),
                              ("hyperparameters", "left")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for row in rows[-SHOWN_TRIALS:]:
            style = {"complete": "green", "pruned": "yellow", "fail": "red"}.get(row.state, "")
            table.add_row(str(row.number), f"[{style}]{row.state}[/]" if style else row.state, _number(row.value),
                          _number(row.best), row.reason if row.state == "fail" else self.params(row))
        return table

    def line(self, row: Any) -> str:
        detail = row.reason if row.state == "fail" else self.params(row)
        return (f"trial {row.number:>4}  {row.state:<8}  value {_number(row.value):>9}  "
                f"best {_number(row.best):>9}  {detail}")

    def params(self, row: Any) -> str:
        return " ".join(f"{k}={_value(row.hyperparams[k])}" for k in self.keys if k in row.hyperparams)


class _NoLive:
    def __enter__(self) -> _NoLive:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


def print_summary(console: Console, spec: Any, summary: Any) -> None:
    from rlcli.tune.results import entry_lines

    states = ", ".join(f"{n} {state}" for state, n in sorted(summary.counts.items()))
    console.print(f"Trials: {sum(summary.counts.values())} ({states or 'none'})")
    if summary.best is None:
        console.print("No trial completed yet, so there are no best hyperparameters.")
    else:
        what = "mean normalised score" if len(spec.env_ids) > 1 else "mean evaluated return"
        console.print(f"Best: trial {summary.best.number}, {what} {summary.best.value:.2f}; as hyperparams/"
                      f"{spec.algo}.yml entries ({summary.best_yml}):")
        for env_id, entry in results_entries(spec, summary).items():
            console.print("\n".join(entry_lines(env_id, entry)), markup=False)
    if summary.importances:
        console.print("Importances: " + ", ".join(f"{k} {v:.2f}" for k, v in summary.importances.items()))
    for row in summary.failed[-5:]:
        console.print(f"Failed trial {row.number}: {row.reason}", markup=False)
    files = [p.name for p in summary.plots]
    console.print(f"Study directory: {spec.study_dir} (summary.json{', ' if files else ''}{', '.join(files)})")
    if summary.written is not None:
        console.print(f"Wrote the best entries into {summary.written}")


def results_entries(spec: Any, summary: Any) -> dict[str, dict[str, Any]]:
    import yaml

    return yaml.safe_load(summary.best_yml.read_text())


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)
