"""``rlcli train``: tuned hyperparameters, a live progress display, evaluation, checkpoints, resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from rlcli.algos import DEFAULT, resolve
from rlcli.checkpoint import CONFIG
from rlcli.cli.app import app
from rlcli.cli.options import AlgoName, Backend, Device
from rlcli.config import RunConfig, deep_merge, parse_overrides
from rlcli.envs import env_group, import_env_module
from rlcli.envs.registry import resolve_env_id
from rlcli.errors import UsageError
from rlcli.hooks import load_stop_hook
from rlcli.rundir import RunDir
from rlcli.runs import default_run_dir
from rlcli.selfplay.opponents import FIXED
from rlcli.train import TrainingDiverged, TrainingInterrupted, TrainState, run, set_up


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


@app.command(help="Train an agent. Example: rlcli train CartPole-v1 -p learning_rate=1e-3")
def train(
    env_id: Annotated[Optional[str], typer.Argument(metavar="ENV", help="Environment id.",
                                                    show_default=False)] = None,
    algo: AlgoName = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
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
    save_buffer: Annotated[bool, typer.Option(
        help="Also checkpoint the replay buffer (off-policy algorithms), and restore it on --resume.")] = False,
) -> None:
    console = Console(soft_wrap=True, highlight=False)
    runtime = {"device": device and device.value, "torch_threads": threads, "env_threads": env_threads,
               **parse_stop_at(stop_at), "stop_when": stop_when}
    if resume is not None:
        ignored = [name for name, value in (("-p", params), ("--config", config_file), ("--backend", backend),
                                            ("--n-envs", n_envs), ("--env-module", env_module)) if value]
        cfg, directory, done = resumed_config(resume, env_id, algo, ignored, runtime, steps)
        console.print(f"Resuming {cfg.env.id} ({cfg.algo.algo}) in {resume} at step {done:,}")
    else:
        if env_id is None:
            raise UsageError("missing ENV: give an environment id (e.g. CartPole-v1) or --resume RUN_DIR")
        import_env_module(env_module)
        env_id, note = resolve_env_id(env_id)
        if note:
            console.print(note)
        overrides = deep_merge(parse_overrides(params or []), {k: v for k, v in (("steps", steps), ("n_envs", n_envs))
                                                               if v is not None})
        cfg = resolve(algo or DEFAULT, env_id, backend=(backend or Backend.auto).value, env_module=env_module,
                      config_file=config_file, overrides=overrides, seed=seed,
                      eval_every=eval_every, eval_episodes=eval_episodes,
                      **{**runtime, "device": runtime["device"] or Device.auto.value})
        directory = run_dir or default_run_dir(env_id, cfg.algo.algo, seed)
        check_new_run(cfg, directory)
        done = 0
    run_with_display(console, cfg, directory, done, wandb_project if track else None, resume is not None,
                     save_buffer)


def parse_stop_at(text: str | None) -> dict[str, Any]:
    """``--stop-at``'s run settings: a return, or ``OPPONENT:RATE``, a win rate against that opponent."""
    if text is None:
        return {"stop_at": None}
    opponent, _, value = text.rpartition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or (opponent and opponent not in FIXED) or (opponent and not 0 <= number <= 1):
        raise UsageError(f"--stop-at {text}: give a return (e.g. 475) or OPPONENT:WIN_RATE with an opponent of "
                         f"{', '.join(FIXED)} and a rate in [0, 1] (e.g. scripted:0.95)")
    return {"stop_at": number, "stop_opponent": opponent or None}


def resume_note(resumed: dict[str, Any]) -> str:
    """What a resume restored: everything, or the weights alone with fresh episodes (and why)."""
    if resumed["exact"]:
        return "It continues exactly: the envs mid-episode, the random generators and the learner are as saved."
    return f"Fresh episodes, as the checkpoint could not continue exactly: {resumed['why']}."


def resumed_config(resume: Path, env_id: str | None, algo: str | None, ignored: list[str],
                   runtime: dict[str, Any], steps: int | None) -> tuple[RunConfig, Path, int]:
    """The config a resumed run continues with: the saved one, with the settings that may change."""
    if not resume.is_dir():
        raise UsageError(f"--resume {resume}: there is no run directory there")
    run = RunDir.open(resume)
    cfg = run.cfg
    if env_id is not None and resolve_env_id(env_id)[0] != cfg.env.id and env_id != cfg.env.id:
        ignored.insert(0, f"ENV ({env_id}; the run trains {cfg.env.id})")
    if algo is not None and algo != cfg.algo.algo:
        ignored.insert(0, f"--algo ({algo}; the run trains {cfg.algo.algo})")
    if ignored:
        raise UsageError(f"--resume continues the run as configured in {resume / CONFIG}; "
                         f"drop {', '.join(ignored)} (--steps, --device, --threads, --env-threads, "
                         "--stop-at, --stop-when may change)")
    update = {k: v for k, v in runtime.items() if v is not None}
    if runtime.get("stop_at") is not None:  # a return replaces a saved win rate, and the other way round
        update["stop_opponent"] = runtime.get("stop_opponent")
    cfg = cfg.model_copy(update=update)
    check_stop_opponent(cfg)
    if steps is not None:
        cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": steps})})
    if cfg.stop_when:
        load_stop_hook(cfg.stop_when)  # a bad hook fails now, not after the envs are built
    return cfg, resume, run.steps


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
    if (directory / CONFIG).exists():
        raise UsageError(f"{directory} already holds a run; resume it with --resume {directory}"
                         " or choose another --run-dir")


def run_with_display(console: Console, cfg: RunConfig, directory: Path, done: int, wandb_project: str | None,
                     resume: bool, save_buffer: bool) -> None:
    """Trains with the progress display, then prints the evaluated return (or how to resume)."""
    display = ProgressDisplay(console, cfg.algo.steps, done)
    start = time.perf_counter()
    try:
        session = set_up(cfg, directory, [display], wandb_project, resume, save_buffer,  # spaces checked here
                         on_hold=lambda: console.print("Ctrl-C: finishing this iteration, then saving "
                                                       "(Ctrl-C again stops at once)"))
        if resume:
            console.print(resume_note(session.resumes[-1]))
        else:
            console.print(f"Training {cfg.env.id} with {cfg.algo.algo} for {cfg.algo.steps:,} steps "
                          f"({cfg.algo.n_envs} envs) -> {directory}")
        with display.progress:
            state = run(session)
    except TrainingInterrupted as e:
        how = "it continues exactly" if e.inexact is None else f"episodes start afresh: {e.inexact}"
        console.print(f"\nInterrupted at step {e.state.step:,}; checkpoint saved in {directory} ({how}).\n"
                      f"Resume with: rlcli train --resume {directory}")
        raise typer.Exit(130) from None
    except TrainingDiverged as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    console.print(
        f"Evaluated return: {state.eval_return:.2f} ± {state.eval_std:.2f} over "
        f"{cfg.eval.episodes} episodes at {state.step:,} steps "
        f"(best {state.best_eval:.2f}); {state.sps:,.0f} steps/s, "
        f"{time.perf_counter() - start:.1f} s.\nSaved to {directory}; "
        f"try: rlcli eval {directory}   rlcli play {directory} --video out.mp4")
