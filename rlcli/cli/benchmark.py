"""``rlcli benchmark``: algorithms x environments x seeds as separate training processes, a results table
and a report; ``benchmark report DIR`` remakes the report, ``benchmark compare A B`` sets two side by side."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from rlcli.algos import DEFAULT, REGISTRY
from rlcli.benchmark import (
    BenchmarkInterrupted,
    RunRecord,
    RunSpec,
    TrainOptions,
    compare,
    default_workers,
    load_results,
    make_report,
    plan_benchmark,
    progress,
    run_benchmark,
    run_memory_gib,
    run_statuses,
)
from rlcli.cli.app import app
from rlcli.cli.options import Backend, Device
from rlcli.errors import UsageError
from rlcli.runs.folders import writable_folder

MULTI_VALUE = ("--envs", "-e", "--algo", "-a", "--seeds", "-s")
DEFAULT_SEEDS = [0, 1, 2]


def spread_values(args: list[str]) -> list[str]:
    """``--envs a b --seeds 1 2`` -> ``--envs a --envs b --seeds 1 --seeds 2``: the multi-value options
    take every following argument up to the next option (negative numbers are values)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        option, eq, first = arg.partition("=")
        if arg == "--" or (not arg.startswith("-") and not out):  # a subcommand, or the end of options
            return out + args[i:]
        if option not in MULTI_VALUE:
            out.append(arg)
            i += 1
            continue
        values = [first] if eq else []
        i += 1
        while i < len(args) and not _is_option(args[i]):
            values.append(args[i])
            i += 1
        if not values:
            raise UsageError(f"{option} needs at least one value")
        out += [part for value in values for part in (option, value)]
    return out


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and re.fullmatch(r"-\d+", arg) is None


class _BenchmarkCommands(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            raise UsageError(f"no benchmark command '{args[0]}' (report, compare); environments go after --envs, "
                             f"e.g. rlcli benchmark --envs {args[0]}")
        return super().parse_args(ctx, spread_values(args))


benchmark_app = typer.Typer(
    cls=_BenchmarkCommands, no_args_is_help=True, add_completion=False,
    help="Run algorithms x environments x seeds and report. Example: "
         "rlcli benchmark --envs classic Hopper-v5 --seeds 1 2 3 --algo ppo")
app.add_typer(benchmark_app, name="benchmark")


def _say(text: str) -> None:
    typer.echo(text)


@benchmark_app.callback(invoke_without_command=True)
def benchmark(
    ctx: typer.Context,
    envs: Annotated[Optional[list[str]], typer.Option(
        "--envs", "-e", metavar="ENV_OR_SUITE...",
        help="Env ids and suites (classic, mujoco, atari), several after one --envs.", show_default=False)] = None,
    algos: Annotated[Optional[list[str]], typer.Option(
        "--algo", "-a", metavar="ALGO...", help=f"Algorithms: {', '.join(REGISTRY)} \\[default: {DEFAULT}].",
        show_default=False)] = None,
    seeds: Annotated[Optional[list[int]], typer.Option(
        "--seeds", "-s", metavar="SEED...", help="Seeds \\[default: 0 1 2].", show_default=False)] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Budget of every run in env steps "
                                                 "\\[default: each env's tuned budget].", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(
        min=1, help="Runs at once \\[default: cores / threads, at most one per 2 GiB of memory, or per the "
                  "largest figure a suite of the envs states (playground: 10 GiB)].",
        show_default=False)] = None,
    threads: Annotated[int, typer.Option(min=1, help="Torch/OpenMP threads per run (per process of one).")] = 1,
    nproc: Annotated[int, typer.Option(
        min=1, help="Processes that train each run together (rlcli train --nproc; PPO): a Ray task asks for "
                    "nproc x threads CPUs, and nproc GPUs with --device cuda.")] = 1,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Benchmark directory \\[default: benchmarks/ALGOS__ENVS__STEPS].",
        show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the runs and what would happen to each.")] = False,
    ray: Annotated[Optional[str], typer.Option(
        metavar="ADDRESS", help="Run on the Ray cluster at ADDRESS (auto, local, ray://host:10001); "
        "needs pip install 'rlcli\\[ray]'.")] = None,
    gpus_per_run: Annotated[Optional[float], typer.Option(
        min=0, help="GPUs a Ray task asks for \\[default: --nproc with --device cuda, else 0].",
        show_default=False)] = None,
    params: Annotated[Optional[list[str]], typer.Option(
        "--param", "-p", help="Hyperparameter override for every run, key=value (repeatable).")] = None,
    backend: Annotated[Backend, typer.Option(help="Env backend.")] = Backend.auto,
    device: Annotated[Device, typer.Option(help="Torch device of each run.")] = Device.auto,
    env_module: Annotated[Optional[str], typer.Option(help="Module to import that registers env ids.")] = None,
    eval_episodes: Annotated[int, typer.Option(min=1, help="Episodes per evaluation.")] = 10,
    eval_every: Annotated[Optional[int], typer.Option(
        min=0, help="Env steps between evaluations \\[default: budget / 20].", show_default=False)] = None,
    save_buffer: Annotated[bool, typer.Option(
        help="Off-policy runs also checkpoint their replay buffer, so that a stopped benchmark resumes them "
             "with their data (rlcli train --save-buffer).")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    options = TrainOptions(params=tuple(params or ()), backend=backend.value, device=device.value, threads=threads,
                           env_module=env_module, eval_episodes=eval_episodes, eval_every=eval_every, nproc=nproc,
                           save_buffer=save_buffer)
    algo_names = list(algos) if algos else [DEFAULT]
    plan = plan_benchmark(algo_names, envs or [], seeds if seeds else DEFAULT_SEEDS, options, steps, out)
    statuses = run_statuses(plan)
    left = [s.run.env_id for s in statuses if s.action != "done"] or [r.env_id for r in plan.runs]  # done: no memory
    n_workers = workers or default_workers(options.cpus, options.nproc * run_memory_gib(left))  # envs in each process
    for line in progress.headline(plan, algo_names, statuses, n_workers, ray):
        _say(line)
    if dry_run:
        for line in progress.dry_run(statuses):
            _say(line)
        return
    total = sum(s.action != "done" for s in statuses)
    finished = [0]
    start = time.perf_counter()

    def on_finish(run: RunSpec, record: RunRecord) -> None:
        finished[0] += 1
        _say(progress.run_ended(plan, run, record, finished[0], total))

    gpus = gpus_per_run if gpus_per_run is not None else (float(nproc) if device == Device.cuda else 0.0)
    try:
        records, report = run_benchmark(plan, n_workers, ray, gpus, on_finish, notify=_say)
    except BenchmarkInterrupted:
        _say(f"\nInterrupted. Re-run the same command to resume; finished runs are kept ({plan.directory}).")
        raise typer.Exit(130) from None
    unfinished = [r for r in records if r.status != "finished"]
    stopped = sum(r.status == "interrupted" for r in unfinished)
    counts = f"{len(records) - len(unfinished)} finished, " + (f"{stopped} interrupted (re-run to continue them), "
                                                               if stopped else "")
    _say(f"{counts}{len(unfinished) - stopped} failed in {time.perf_counter() - start:.1f} s. "
         f"Results: {report.results_csv}  Report: {report.report}")
    if unfinished:
        raise typer.Exit(1)


@benchmark_app.command("report", help="Remake the results table and report of a benchmark directory. "
                       "Example: rlcli benchmark report benchmarks/ppo__classic__tuned")
def report_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A benchmark directory (or a copy of its "
                                              "results.json, as in zoo/benchmarks).", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the table and report here \\[default: DIR].", show_default=False)] = None,
) -> None:
    report = make_report(directory, out)
    _say(f"{len(report.results)} runs. Results: {report.results_csv}  Report: {report.report}")


@benchmark_app.command("compare", help="Set two benchmarks side by side: final returns, probability of "
                       "improvement and IQM difference with intervals. Example: rlcli benchmark compare "
                       "benchmarks/new zoo/benchmarks/0.1.0")
def compare_command(
    dir_a: Annotated[Path, typer.Argument(metavar="DIR_A", help="Benchmark A.", show_default=False)],
    dir_b: Annotated[Path, typer.Argument(metavar="DIR_B", help="Benchmark B.", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Also write the comparison to this Markdown file.", show_default=False)] = None,
) -> None:
    text = compare(load_results(dir_a), load_results(dir_b), str(dir_a), str(dir_b))
    if out is not None:
        writable_folder(out.parent)
        out.write_text(text + "\n")
    _say(text)
