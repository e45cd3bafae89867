"""``rlcli train``: tuned hyperparameters, a live progress display, evaluation, checkpoints, resume; with
``--nproc N``, or under torchrun, one run trained by several processes (rlcli.algos.world)."""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from rlcli.algos import DEFAULT, resolve, run_config
from rlcli.algos.world import SINGLE, PeerLost, World, check_gpus, envs_per_process, join
from rlcli.benchmark.execute import LOG as BENCHMARK_LOG
from rlcli.benchmark.execute import RECORD as BENCHMARK_RECORD
from rlcli.cli.app import ARGV, app
from rlcli.cli.options import AlgoName, Backend, Device
from rlcli.config import MAX_SEED, RunConfig, deep_merge, parse_overrides
from rlcli.envs import env_group
from rlcli.envs.registry import resolve_env_id
from rlcli.errors import StorageError, UsageError
from rlcli.jobs.interrupts import not_noted, term_as_interrupt
from rlcli.runs.checkpoint import CONFIG
from rlcli.runs.folders import check_own_folder
from rlcli.runs.lock import LOCK, RunLock
from rlcli.runs.rundir import RunDir, load_config, read_meta, shipped
from rlcli.share.names import default_run_dir
from rlcli.training.agents import check_distributed
from rlcli.training.hooks import load_stop_hook
from rlcli.training.launch import LAUNCHED, PEER_LOST_EXIT, launch, without_option
from rlcli.training.selfplay.opponents import FIXED
from rlcli.training.train import EnvFault, TrainingDiverged, TrainingInterrupted, TrainState, run, set_up


class ProgressDisplay:
    """A Rich progress bar on a terminal; a plain line every 10% (and at each evaluation) otherwise."""

    def __init__(self, console: Console, total: int, start: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self.last_logged = start
        self.last_eval: float | None = None
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} steps"),
            TextColumn("{task.fields[sps]:>6,.0f} sps"), TextColumn("return {task.fields[ret]}"),
            TextColumn("eval {task.fields[eval]}"), TimeRemainingColumn(),
            console=console, transient=False, disable=not self.live,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, sps=0.0,
                                           ret="-", eval="-")

    def __call__(self, state: TrainState) -> bool:
        ret = f"{state.recent_return:.1f}" if state.recent_return is not None else "-"
        ev = f"{state.eval_return:.1f}" if state.eval_return is not None else "-"
        self.progress.update(self.task, completed=state.step, sps=state.sps, ret=ret, eval=ev)
        new_eval = state.eval_return is not None and state.eval_return != self.last_eval
        if not self.live and (state.step - self.last_logged >= state.total_steps // 10 or new_eval):
            self.last_logged = state.step
            self.console.print(f"step {state.step:>10,}  sps {state.sps:>7,.0f}  "
                               f"return {ret:>8}  eval {ev:>8}")
        self.last_eval = state.eval_return
        return False


@app.command(help="Train an agent. Example: rlcli train CartPole-v1 -p learning_rate=1e-3; on two processes: "
                       "rlcli train CartPole-v1 --nproc 2")
def train(
    env_id: Annotated[Optional[str], typer.Argument(metavar="ENV", help="Environment id.",
                                                    show_default=False)] = None,
    algo: AlgoName = None,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Random seed.")] = 0,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Env steps (default: tuned).")] = None,
    n_envs: Annotated[Optional[int], typer.Option(min=1, help="Parallel envs (default: tuned).")] = None,
    params: Annotated[Optional[list[str]], typer.Option(
        "--param", "-p", help="Hyperparameter override key=value (repeatable), e.g. -p gamma=0.98.")] = None,
    config_file: Annotated[Optional[Path], typer.Option("--config", help="YAML of hyperparameters.")] = None,
    device: Annotated[Optional[Device], typer.Option(help="Torch device \\[default: auto].",
                                                     show_default=False)] = None,
    backend: Annotated[Optional[Backend], typer.Option(
        help="Env backend; auto takes envpool where it can \\[default: auto].", show_default=False)] = None,
    run_dir: Annotated[Optional[Path], typer.Option(help="Where to write the run.")] = None,
    eval_every: Annotated[Optional[int], typer.Option(min=0, help="Env steps between evaluations.")] = None,
    eval_episodes: Annotated[int, typer.Option(min=1, help="Episodes per evaluation.")] = 10,
    stop_at: Annotated[Optional[str], typer.Option(
        metavar="RETURN|OPPONENT:WIN_RATE", show_default=False,
        help="Stop once an evaluation reaches this return, or (a game) this win rate against an evaluation "
             "opponent, e.g. --stop-at scripted:0.95.")] = None,
    stop_when: Annotated[Optional[str], typer.Option(
        metavar="MODULE:FUNCTION",
        help="Stop when this function, given the training state after each iteration, returns True.")] = None,
    threads: Annotated[Optional[int], typer.Option(
        min=1, help="Torch threads \\[default: per algorithm, see README].", show_default=False)] = None,
    env_threads: Annotated[Optional[int], typer.Option(
        min=1, help="envpool worker threads \\[default: one per env, up to the cores].", show_default=False)] = None,
    env_module: Annotated[Optional[str], typer.Option(help="Module to import that registers env ids.")] = None,
    track: Annotated[bool, typer.Option(help="Log to Weights & Biases.")] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project for --track.")] = "rlcli",
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this directory.")] = None,
    compile_steps: Annotated[Optional[bool], typer.Option(
        "--compile/--no-compile", show_default=False,
        help="torch.compile the acting and update steps (CUDA graphs on a GPU) \\[default: the entry's "
             "compile setting, auto: on a GPU only].")] = None,
    save_buffer: Annotated[bool, typer.Option(
        help="Also checkpoint the replay buffer (off-policy algorithms), and restore it on --resume.")] = False,
    nproc: Annotated[Optional[int], typer.Option(
        min=1, show_default=False,
        help="Processes that train the run together on this machine, through torch's launcher (torchrun); "
             "each steps --n-envs envs \\[default: 1, or as many as a resumed run had].")] = None,
    ctx: typer.Context = typer.Option(None, hidden=True),
) -> None:
    request = Request(env_id, algo, seed, steps, n_envs, params, config_file, backend, run_dir, eval_every,
                      eval_episodes, env_module, resume,
                      Runtime(device and device.value, threads, env_threads, *parse_stop_at(stop_at), stop_when),
                      None if compile_steps is None else ("on" if compile_steps else "off"),
                      tuple(name for name in ("seed", "eval_episodes")
                            if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"))
    project = wandb_project if track else None
    world = join()
    try:
        if world.size > 1:
            if nproc is not None:
                raise UsageError("drop --nproc: torchrun started this run's processes (its --nproc-per-node)")
            train_as_process(world, request, project, save_buffer)
            return
        console = Console(soft_wrap=True, highlight=False)
        processes = nproc if nproc is not None else saved_processes(resume)
        if processes > 1:  # checked here, where a mistake costs no process start-up
            cfg, directory, _ = prepare(request, Console(quiet=True))
            try:
                launch_processes(processes, cfg, directory, resume, list(ctx.meta.get(ARGV, [])))
            except UsageError:  # refused before any process started: a shipped agent's copy goes too
                if resume is not None and directory != resume:
                    shutil.rmtree(directory, ignore_errors=True)
                raise
            return
        cfg, directory, done = prepare(request, console)
        run_with_display(console, cfg, directory, done, project, resume is not None, save_buffer)
    finally:
        world.close()


@dataclass(frozen=True)
class Runtime:
    """The run settings a resume may change; None where the command line left one as it was."""

    device: str | None
    torch_threads: int | None
    env_threads: int | None
    stop_at: float | None
    stop_opponent: str | None  # with stop_at, a win rate against this opponent
    stop_when: str | None

    def updates(self) -> dict[str, Any]:
        """The settings given, as RunConfig fields; a new --stop-at also replaces a saved opponent (a return
        replaces a win rate, and the other way round)."""
        given = {k: v for k, v in asdict(self).items() if v is not None}
        if self.stop_at is not None:
            given["stop_opponent"] = self.stop_opponent
        return given


@dataclass(frozen=True)
class Request:
    """What ``rlcli train`` was asked for, before it is resolved into a RunConfig."""

    env_id: str | None
    algo: str | None
    seed: int
    steps: int | None
    n_envs: int | None
    params: list[str] | None
    config_file: Path | None
    backend: Backend | None
    run_dir: Path | None
    eval_every: int | None
    eval_episodes: int
    env_module: str | None
    resume: Path | None
    runtime: Runtime
    compile: str | None = None  # --compile / --no-compile, which a resume may change too
    given: tuple[str, ...] = ()  # of the options with a default, those the command line gave


def prepare(request: Request, console: Console) -> tuple[RunConfig, Path, int]:
    """(the run's config, its directory, the steps already done): a new run resolved, or a resumed one's
    saved config with the settings that may change."""
    r = request
    if r.resume is not None:
        elsewhere = r.run_dir is not None and r.resume.is_dir() and not shipped(r.resume) \
            and r.run_dir.resolve() != r.resume.resolve()  # a run of one's own continues where it is
        ignored = [name for name, value in (
            ("-p", r.params), ("--config", r.config_file), ("--backend", r.backend), ("--n-envs", r.n_envs),
            ("--env-module", r.env_module), ("--seed", "seed" in r.given), ("--eval-every", r.eval_every is not None),
            ("--eval-episodes", "eval_episodes" in r.given), ("--run-dir", elsewhere)) if value]
        resume = copy_if_shipped(r.resume, r.run_dir)
        try:
            cfg, directory, done = resumed_config(resume, r.env_id, r.algo, ignored, r.runtime,
                                                  {"steps": r.steps, "compile": r.compile}, r.resume)
        except BaseException:
            if resume != r.resume:  # the copy made for this command, refused: gone, so that it can be run again
                shutil.rmtree(resume, ignore_errors=True)
            raise
        if resume != r.resume:
            console.print(f"{r.resume} is a shipped agent and stays as it is: continuing a copy of it in {resume}")
        console.print(f"Resuming {cfg.env.id} ({cfg.algo.algo}) in {resume} at step {done:,}")
        return cfg, directory, done
    if r.env_id is None:
        raise UsageError("missing ENV: give an environment id (e.g. CartPole-v1) or --resume RUN_DIR")
    overrides = deep_merge(parse_overrides(r.params or []), {k: v for k, v in (
        ("steps", r.steps), ("n_envs", r.n_envs), ("compile", r.compile)) if v is not None})
    cfg = resolve(r.algo or DEFAULT, r.env_id, backend=(r.backend or Backend.auto).value, env_module=r.env_module,
                  config_file=r.config_file, overrides=overrides, seed=r.seed,
                  eval_every=r.eval_every, eval_episodes=r.eval_episodes,
                  **{**asdict(r.runtime), "device": r.runtime.device or Device.auto.value})
    if cfg.env.id != r.env_id:
        console.print(f"{r.env_id} resolves to {cfg.env.id}")
    directory = r.run_dir or default_run_dir(cfg.env.id, cfg.algo.algo, r.seed)
    check_new_run(cfg, directory)
    return cfg, directory, 0


def copy_if_shipped(resume: Path, run_dir: Path | None) -> Path:
    """Where a resume writes: ``resume`` itself, or for a zoo agent or a Hub download (which stay as shipped) a
    copy of it in ``run_dir`` or a new directory under runs/."""
    if not resume.is_dir() or not shipped(resume):
        return resume
    cfg = load_config(resume)
    target = run_dir or default_run_dir(cfg.env.id, cfg.algo.algo, cfg.seed)
    if target.exists():
        raise UsageError(f"{target} already exists; choose a new --run-dir for the copy of {resume}")
    shutil.copytree(resume, target, ignore=shutil.ignore_patterns("export"))
    return target


def saved_processes(resume: Path | None) -> int:
    """How many processes a resumed run trained with on one machine (1 for a new run); a UsageError for a run
    trained on several machines, which torchrun resumes as it started it."""
    if resume is None or not resume.is_dir():
        return 1
    meta = read_meta(resume)
    size, nodes = int(meta.get("world_size", 1)), int(meta.get("world", {}).get("nodes", 1))
    if nodes > 1:
        raise UsageError(f"{resume} was trained by {size} processes on {nodes} machines: resume it with torchrun as "
                         f"it was started (... -m rlcli train --resume {resume}), or on this machine with --nproc N")
    return size


def launch_processes(processes: int, cfg: RunConfig, directory: Path, resume: Path | None, argv: list[str]) -> None:
    """Trains the run with ``processes`` processes on this machine, each running this command (``argv``, without
    --nproc, with the run directory it chose); the lead prints as one process would. Says which process
    ended a run that failed, with the checkpoint it leaves."""
    check_distributed(cfg)
    check_gpus(cfg.device, processes)  # before any process starts
    if resume is not None:
        envs_per_process(cfg.algo.n_envs, int(read_meta(resume).get("world_size", 1)), processes)
    args = without_option(argv, "--nproc")
    if resume is None and "--run-dir" not in args and not any(a.startswith("--run-dir=") for a in args):
        args += ["--run-dir", str(directory)]
    elif resume is not None and directory != resume:  # the copy of a shipped agent made here: they continue it
        args = [*without_option(without_option(args, "--resume"), "--run-dir"), "--resume", str(directory)]
    outcome = launch(processes, args)
    if outcome.failure is not None:
        steps = read_meta(directory).get("steps") if directory.is_dir() else None
        left = (f"its last checkpoint (step {steps:,}) stays in {directory}; rlcli train --resume {directory} "
                "continues from it") if steps is not None else "nothing was saved"
        typer.echo(f"error: process {outcome.rank} of {processes} {outcome.failure}; the run stopped, and {left}",
                   err=True)
    if outcome.code:
        raise typer.Exit(outcome.code)


def train_as_process(world: World, request: Request, wandb_project: str | None, save_buffer: bool) -> None:
    """One process of several (started by torchrun, or by --nproc through it): the lead resolves the run and
    hands it to the others, whose machines may not hold its files; the lead alone prints."""
    console = Console(soft_wrap=True, highlight=False, quiet=not world.lead)
    shared: dict[str, Any] | None = None
    error: UsageError | None = None
    if world.lead:
        try:
            cfg, directory, done = prepare(request, console)
            check_distributed(cfg)
            shared = {"cfg": cfg.model_dump(mode="json"), "directory": str(directory), "done": done}
        except UsageError as e:
            error = e
    shared = world.from_lead(shared if error is None else {"error": 2})
    if error is not None:
        raise error  # the lead alone prints it; the others end with its exit code
    if "error" in shared:
        raise typer.Exit(shared["error"])
    cfg, directory = run_config(shared["cfg"]), Path(shared["directory"])
    try:
        run_with_display(console, cfg, directory, shared["done"], wandb_project if world.lead else None,
                         request.resume is not None, save_buffer, world)
    except PeerLost as e:
        if LAUNCHED not in os.environ:  # --nproc's launcher names the process that ended, once
            typer.echo(f"error: process {world.rank}: another process of the run ended ({e}); the run's last "
                       f"checkpoint stays in {directory}", err=True)
        raise typer.Exit(PEER_LOST_EXIT) from None
    except (UsageError, StorageError) as e:
        if world.lead:
            raise
        raise typer.Exit(2 if isinstance(e, UsageError) else 1) from None


def parse_stop_at(text: str | None) -> tuple[float | None, str | None]:
    """``--stop-at``'s (stop_at, stop_opponent): a return, or ``OPPONENT:RATE``, a win rate against that
    opponent."""
    if text is None:
        return None, None
    opponent, _, value = text.rpartition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or (opponent and opponent not in FIXED) or (opponent and not 0 <= number <= 1):
        raise UsageError(f"--stop-at {text}: give a return (e.g. 475) or OPPONENT:WIN_RATE with an opponent of "
                         f"{', '.join(FIXED)} and a rate in [0, 1] (e.g. scripted:0.95)")
    return number, opponent or None


def resume_note(resumed: dict[str, Any]) -> str:
    """What a resume restored: everything, or the weights alone with fresh episodes (and why)."""
    if resumed["exact"]:
        return "It continues exactly: the envs mid-episode, the random generators and the learner are as saved."
    return f"Fresh episodes, as the checkpoint could not continue exactly: {resumed['why']}."


def resumed_config(resume: Path, env_id: str | None, algo: str | None, ignored: list[str],
                   runtime: Runtime, algo_updates: dict[str, Any], origin: Path | None = None
                   ) -> tuple[RunConfig, Path, int]:
    """The config a resumed run continues with: the saved one, with the settings that may change. ``origin``:
    the run the messages name, where ``resume`` is a copy of it (a shipped agent's)."""
    origin = origin or resume
    if not resume.is_dir():
        raise UsageError(f"--resume {resume}: there is no run directory there")
    run = RunDir.open(resume)
    RunLock.acquire(resume).release()  # refused here, before anything is printed, while another trains it
    cfg = run.cfg
    if env_id is not None and resolve_env_id(env_id)[0] != cfg.env.id and env_id != cfg.env.id:
        ignored.insert(0, f"ENV ({env_id}; the run trains {cfg.env.id})")
    if algo is not None and algo != cfg.algo.algo:
        ignored.insert(0, f"--algo ({algo}; the run trains {cfg.algo.algo})")
    if ignored:
        raise UsageError(f"--resume continues the run as configured in {origin / CONFIG}; "
                         f"drop {', '.join(ignored)} (--steps, --device, --threads, --env-threads, "
                         "--stop-at, --stop-when, --compile may change)")
    cfg = cfg.model_copy(update=runtime.updates())
    check_stop_opponent(cfg)
    algo_updates = {k: v for k, v in algo_updates.items() if v is not None}  # --steps, --compile
    if algo_updates:
        cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update=algo_updates)})
    check_steps_left(origin, run.steps, cfg.algo.steps, bool(run.meta.get("finished")),
                     "steps" in algo_updates and algo_updates["steps"] != run.cfg.algo.steps)
    if cfg.stop_when:
        try:
            load_stop_hook(cfg.stop_when)  # a bad hook fails now, not after the envs are built
        except UsageError as e:
            if runtime.stop_when is not None:  # this command's own
                raise
            raise UsageError(f"the run's saved {e}; give --stop-when MODULE:FUNCTION to replace it, or "
                             "--stop-when '' to train on without one") from None
    return cfg, resume, run.steps


def check_steps_left(resume: Path, done: int, budget: int, finished: bool, changed: bool) -> None:
    """A UsageError where a resume has nothing to train: a finished run within its budget (which would only be
    evaluated again), or a new --steps below what the run has trained (its own budget, rounded up to whole
    iterations, may be: a run stopped before its final evaluation resumes to make it)."""
    if changed and budget < done:
        raise UsageError(f"--steps {budget:,} is below the {done:,} steps {resume} has trained; give more to "
                         "train on")
    if finished and budget <= done:
        raise UsageError(f"{resume} has finished: it trained {done:,} steps; give --steps above that to train on "
                         f"(rlcli eval {resume} measures it)")


def whole_iterations(steps: int, learner: Any, world: World) -> str:
    """Where a new run's budget is not whole iterations, what it trains instead, for its first line."""
    per_iteration = getattr(learner, "steps_per_iteration", None)  # a registered learner's may not say
    if world.size > 1 or not per_iteration or steps % per_iteration == 0:
        return ""
    return f"; {math.ceil(steps / per_iteration) * per_iteration:,} in whole iterations of {per_iteration:,}"


def check_stop_opponent(cfg: RunConfig) -> None:
    if cfg.stop_opponent is not None and env_group(cfg.env.id) != "games":
        raise UsageError(f"--stop-at {cfg.stop_opponent}:{cfg.stop_at} stops on a win rate, which only turn-based "
                         f"games have; {cfg.env.id} is not one: give a return (--stop-at {cfg.stop_at})")


def check_new_run(cfg: RunConfig, directory: Path) -> None:
    """What a new run can fail on before its envs are built: the stop hook and the directory (the spaces
    are checked as the agent is built, before anything is written)."""
    if cfg.stop_when:
        load_stop_hook(cfg.stop_when)
    check_stop_opponent(cfg)
    # LOCK alone: a start that failed; a benchmark's record and log: its run, about to start
    check_own_folder(directory, "--run-dir", (CONFIG, LOCK, BENCHMARK_RECORD, BENCHMARK_LOG), "a run's")
    if (directory / CONFIG).exists():
        raise UsageError(f"{directory} already holds a run; resume it with --resume {directory}"
                         " or choose another --run-dir")


def run_with_display(console: Console, cfg: RunConfig, directory: Path, done: int, wandb_project: str | None,
                     resume: bool, save_buffer: bool, world: World = SINGLE) -> None:
    """Trains with the progress display, then prints the evaluated return (or how to resume): this process's
    part of the run, whose lead alone prints."""
    display = ProgressDisplay(console, cfg.algo.steps, done)
    start = time.perf_counter()
    again = "Ctrl-C again stops at once" if world.size == 1 else "Ctrl-C again stops every process at once"
    with term_as_interrupt() if world.size == 1 else not_noted() as terminated:
        _train_and_report(console, cfg, directory, display, start, again, wandb_project, resume, save_buffer, world,
                          terminated)


def _train_and_report(console: Console, cfg: RunConfig, directory: Path, display: ProgressDisplay, start: float,
                      again: str, wandb_project: str | None, resume: bool, save_buffer: bool, world: World,
                      terminated: Callable[[], bool]) -> None:
    try:
        session = set_up(cfg, directory, [display], wandb_project, resume, save_buffer,  # spaces checked here
                         on_hold=lambda: console.print(f"Ctrl-C: finishing this iteration, then saving ({again})"),
                         world=world)
        cfg = session.cfg  # each process's envs fitted to the number of processes
        if resume:
            console.print(resume_note(session.resumes[-1]))
        else:
            each = f"{cfg.algo.n_envs} envs" if world.size == 1 else f"{world.size} processes x {cfg.algo.n_envs} envs"
            console.print(f"Training {cfg.env.id} with {cfg.algo.algo} for {cfg.algo.steps:,} steps "
                          f"({each}{whole_iterations(cfg.algo.steps, session.learner, world)})"
                          f" -> {directory}")
        with display.progress:
            state = run(session)
    except TrainingInterrupted as e:
        how = "it continues exactly" if e.inexact is None else f"episodes start afresh: {e.inexact}"
        if world.size > 1 and e.inexact is None:
            how = f"it continues exactly when resumed with {world.size} processes"
        saved = (f"checkpoint saved in {directory} ({how})" if e.saved else
                 f"the last checkpoint (step {e.state.last_saved:,}) stays in {directory}")
        console.print(f"\nInterrupted at step {e.state.step:,}; {saved}.\n"
                      f"Resume with: rlcli train --resume {directory}")
        raise typer.Exit(143 if terminated() else 130) from None
    except (TrainingDiverged, EnvFault) as e:
        if world.lead:
            typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if not world.lead:
        return
    console.print(
        f"Evaluated return: {state.eval_return:.2f} ± {state.eval_std:.2f} over "
        f"{cfg.eval.episodes} episodes at {state.step:,} steps "
        f"(best {state.best_eval:.2f}); {state.sps:,.0f} steps/s, "
        f"{time.perf_counter() - start:.1f} s.\nSaved to {directory}; "
        f"try: rlcli eval {directory}   rlcli play {directory} --video out.mp4")
