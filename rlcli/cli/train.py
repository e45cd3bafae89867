"""``rlcli train``: tuned hyperparameters, a live progress display, evaluation, checkpoints, resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from rlcli import checkpoint
from rlcli.cli import app
from rlcli.cli.options import Algo, Backend, Device
from rlcli.config import EnvConfig, EvalConfig, deep_merge, load_run_config, parse_overrides
from rlcli.errors import UsageError
from rlcli.hooks import load_stop_hook
from rlcli.runs import default_run_dir
from rlcli.train import TrainingInterrupted, TrainState, check_env_fits
from rlcli.train import train as run_training


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
    algo: Annotated[Optional[Algo], typer.Option("--algo", "-a", help="Algorithm \\[default: ppo].",
                                                  show_default=False)] = None,
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
    stop_at: Annotated[Optional[float], typer.Option(help="Stop once an evaluation reaches this return.")] = None,
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
    done = 0
    if resume is not None:
        ignored = [name for name, value in (("ENV", env_id), ("--algo", algo), ("-p", params),
                                            ("--config", config_file), ("--backend", backend),
                                            ("--n-envs", n_envs), ("--env-module", env_module)) if value]
        if ignored:
            raise UsageError(f"--resume continues the run as configured in {resume / checkpoint.CONFIG}; "
                             f"drop {', '.join(ignored)} (--steps, --device, --threads, --env-threads, "
                             "--stop-at, --stop-when may change)")
        cfg = checkpoint.load_config(resume)
        changes = {k: v for k, v in (("device", device and device.value), ("torch_threads", threads),
                                     ("env_threads", env_threads), ("stop_at", stop_at),
                                     ("stop_when", stop_when)) if v is not None}
        cfg = cfg.model_copy(update=changes)
        if steps is not None:
            cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": steps})})
        if cfg.stop_when:
            load_stop_hook(cfg.stop_when)  # a bad hook fails now, not after the envs are built
        directory = resume
        done = int(checkpoint.load(resume).meta.get("steps", 0))
        console.print(f"Resuming {cfg.env.id} ({cfg.algo.algo}) in {resume} at step {done:,}")
    else:
        if env_id is None:
            raise UsageError("missing ENV: give an environment id (e.g. CartPole-v1) or --resume RUN_DIR")
        from rlcli.envs import env_group, import_env_module
        from rlcli.envs.registry import resolve_backend

        import_env_module(env_module)
        backend_name = (backend or Backend.auto).value
        resolve_backend(env_id, backend_name)  # unknown ids fail here, with close matches
        overrides = parse_overrides(params or [])
        overrides = deep_merge(overrides, {k: v for k, v in (("steps", steps), ("n_envs", n_envs))
                                           if v is not None})
        algo_name = (algo or Algo.ppo).value
        cfg = load_run_config(
            algo_name, EnvConfig(id=env_id, backend=backend_name, env_module=env_module),
            env_group(env_id), config_file=config_file, overrides=overrides, seed=seed,
            device=(device or Device.auto).value, torch_threads=threads, env_threads=env_threads,
            stop_at=stop_at, stop_when=stop_when,
            eval=EvalConfig(every=0, episodes=eval_episodes))
        # about 20 evaluations (and checkpoints) per run unless asked otherwise
        every = eval_every if eval_every is not None else max(cfg.algo.steps // 20, 1)
        cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"every": every})})
        check_env_fits(cfg)
        if cfg.stop_when:
            load_stop_hook(cfg.stop_when)
        directory = run_dir or default_run_dir(env_id, algo_name, seed)
        if (directory / checkpoint.CONFIG).exists():
            raise UsageError(f"{directory} already holds a run; resume it with --resume {directory}"
                             " or choose another --run-dir")
        console.print(f"Training {cfg.env.id} with {cfg.algo.algo} for {cfg.algo.steps:,} steps "
                      f"({cfg.algo.n_envs} envs) -> {directory}")

    display = ProgressDisplay(console, cfg.algo.steps, done)
    start = time.perf_counter()
    try:
        with display.progress:
            state = run_training(cfg, directory, [display], wandb_project if track else None,
                                 resume=resume is not None, save_buffer=save_buffer)
    except TrainingInterrupted as e:
        console.print(f"\nInterrupted at step {e.state.step:,}; checkpoint saved in {directory}.\n"
                      f"Resume with: rlcli train --resume {directory}")
        raise typer.Exit(130) from None
    console.print(
        f"Evaluated return: {state.eval_return:.2f} ± {state.eval_std:.2f} over "
        f"{cfg.eval.episodes} episodes at {state.step:,} steps "
        f"(best {state.best_eval:.2f}); {state.sps:,.0f} steps/s, "
        f"{time.perf_counter() - start:.1f} s.\nSaved to {directory}; "
        f"try: rlcli eval {directory}   rlcli play {directory} --video out.mp4")

