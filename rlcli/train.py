"""Training: builds env and agent from a RunConfig, runs the loop, evaluates, checkpoints, resumes.

Callbacks receive a ``TrainState`` after every update and may ask to stop; the progress display, the
user's stop condition and (later) tuning's pruner all plug in here.
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlcli import checkpoint, interrupts
from rlcli.algos import ALGORITHMS, Agent
from rlcli.config import RunConfig
from rlcli.envs import VecEnv, import_env_module, make_vec_env
from rlcli.evaluation import evaluate
from rlcli.hooks import load_stop_hook
from rlcli.logging import CSVSink, MetricSink, TensorBoardSink, WandbSink
from rlcli.loops import PPOLearner, SACLearner

EVAL_ENVS = 8  # `rlcli eval` and publish: the setting every published evaluation of a run was made with
# periodic evaluation during training: the default 10 episodes run side by side in one round, as long as
# the longest episode rather than two of them
PERIODIC_EVAL_ENVS = 16
LEARNERS = {"ppo": PPOLearner, "sac": SACLearner}
OPTIONAL_COLUMNS = ("charts/episode_return", "charts/episode_length", "eval/mean_return", "eval/std_return")


@dataclass
class TrainState:
    """What callbacks see after each update. Steps are env steps summed over all envs."""

    run_dir: Path
    step: int
    total_steps: int
    iteration: int = 0
    sps: float = 0.0
    wall_time: float = 0.0  # seconds, this process
    recent_return: float | None = None  # mean of the last 100 finished training episodes
    eval_return: float | None = None
    eval_std: float | None = None
    best_eval: float | None = None
    episodes: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


Callback = Callable[[TrainState], bool]  # returns True to stop training


class TrainingInterrupted(Exception):
    """Ctrl-C during training; a checkpoint was saved in ``run_dir``."""

    def __init__(self, state: TrainState) -> None:
        super().__init__(f"interrupted at step {state.step}")
        self.state = state


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from rlcli.errors import UsageError

        raise UsageError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
    return torch.device(name)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose_threads(cfg: RunConfig) -> tuple[int, int]:
    """(acting, updating) torch intra-op threads. An explicit ``torch_threads`` sets both; otherwise
    SAC, which steps one env and is bound by its update, takes every core for both, and so does PPO
    with a CNN, whose acting is a convolution stack over every env's frames (Pong: 0.73 -> 0.54 s of
    acting a rollout on 2 cores). PPO with an MLP acts with one thread, leaving the cores to the env
    backend's threads (two would spin beside them: Hopper's rollout went from 251 to 398 ms), and
    updates with every core."""
    if cfg.torch_threads is not None:
        return cfg.torch_threads, cfg.torch_threads
    cores = min(available_cores(), 16)
    if cfg.algo.algo == "sac" or (cfg.algo.network.trunk == "cnn" and cfg.device != "cuda"):
        return cores, cores
    return 1, cores


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_agent(cfg: RunConfig, env: VecEnv, device: torch.device) -> Agent:
    algo = ALGORITHMS[cfg.algo.algo]
    return algo(cfg.algo, env.single_observation_space, env.single_action_space, env.num_envs, device)


def make_env(cfg: RunConfig, num_envs: int, seed: int, render_mode: str | None = None) -> VecEnv:
    import_env_module(cfg.env.env_module)
    return make_vec_env(cfg.env.id, num_envs, seed, cfg.env.backend, dict(cfg.algo.env_kwargs),
                        render_mode=render_mode, threads=cfg.env_threads)


def check_env_fits(cfg: RunConfig) -> None:
    """Raises a UsageError when the algorithm cannot act in the environment (e.g. SAC on Discrete)."""
    env = make_env(cfg, 1, cfg.seed)
    try:
        ALGORITHMS[cfg.algo.algo].check_spaces(env.single_observation_space, env.single_action_space)
    finally:
        env.close()


def agent_from_run(run: checkpoint.LoadedRun, env: VecEnv, device: torch.device) -> Agent:
    """An agent with a saved run's weights and normalisation statistics."""
    agent = build_agent(run.cfg, env, device)
    try:
        agent.load_state_dict(run.model)
    except RuntimeError as e:
        raise checkpoint.CheckpointError(
            f"{run.run_dir}: weights do not fit the configured network ({str(e).splitlines()[0]})"
        ) from None
    return agent


def train(cfg: RunConfig, run_dir: Path, callbacks: Sequence[Callback] = (),
          wandb_project: str | None = None, resume: bool = False, save_buffer: bool = False) -> TrainState:
    """Trains until ``cfg.algo.steps`` env steps; returns the final state (with its evaluation).
    ``save_buffer`` also checkpoints an off-policy replay buffer; a resume restores it when the run
    was saved with it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    meta: dict = {}
    if resume:
        meta = checkpoint.load(run_dir).meta
    start_step = int(meta.get("steps", 0))
    save_buffer = save_buffer or bool(meta.get("save_buffer", False))
    seed_everything(cfg.seed + start_step)
    acting_threads, update_threads = choose_threads(cfg)
    torch.set_num_threads(acting_threads)

    env = make_env(cfg, cfg.algo.n_envs, cfg.seed + start_step)
    eval_env = make_env(cfg, min(PERIODIC_EVAL_ENVS, cfg.eval.episodes), cfg.seed + 1_000_003)
    agent = build_agent(cfg, env, device)
    if resume:
        agent.load_state_dict(checkpoint.load_tensors(run_dir / checkpoint.MODEL, start_step))
        if (run_dir / checkpoint.OPTIMIZER).is_file():
            checkpoint.load_optimizer_tensors(
                agent.optimizers(), checkpoint.load_tensors(run_dir / checkpoint.OPTIMIZER, start_step))
        agent.load_extra_state(meta.get("agent", {}))

    state = TrainState(run_dir=run_dir, step=start_step, total_steps=cfg.algo.steps,
                       iteration=int(meta.get("iterations", 0)), best_eval=meta.get("best_eval"),
                       episodes=int(meta.get("episodes", 0)))
    sinks: list[MetricSink] = [TensorBoardSink(run_dir / "tb"), CSVSink(run_dir / "metrics.csv", OPTIONAL_COLUMNS)]
    if wandb_project:
        wandb = WandbSink(wandb_project, run_dir, run_dir.name, cfg.model_dump(mode="json"),
                          resume_id=meta.get("wandb_id"))
        meta["wandb_id"] = wandb.run_id
        sinks.append(wandb)
    prior_wall = float(meta.get("wall_time", 0.0))

    def save(final: bool = False) -> None:
        if save_buffer:
            checkpoint.save_tensors(run_dir / checkpoint.REPLAY, learner.buffer_tensors(), state.step)
        checkpoint.save(run_dir, cfg, agent.state_dict(),
                        checkpoint.optimizer_tensors(agent.optimizers()), {
                            "algo": cfg.algo.algo, "env_id": cfg.env.id, "seed": cfg.seed,
                            "steps": state.step, "iterations": state.iteration,
                            "episodes": state.episodes, "agent": agent.extra_state(),
                            "best_eval": state.best_eval, "wall_time": prior_wall + state.wall_time,
                            "finished": final, "backend": env.backend, "save_buffer": save_buffer,
                            **({"wandb_id": meta["wandb_id"]} if "wandb_id" in meta else {})})

    last_eval_step = -1

    def run_eval() -> dict[str, float]:
        nonlocal last_eval_step
        last_eval_step = state.step
        result = evaluate(agent, eval_env, cfg.eval.episodes, cfg.eval.deterministic)
        state.eval_return, state.eval_std = result.mean, result.std
        history = checkpoint.eval_history(run_dir)
        history.append({"step": state.step, **result.as_dict()})
        checkpoint.write_json(run_dir / checkpoint.EVAL, {"latest": history[-1], "history": history})
        if state.best_eval is None or result.mean >= state.best_eval:
            state.best_eval = result.mean
            checkpoint.save_tensors(run_dir / checkpoint.BEST_DIR / checkpoint.MODEL,
                                    agent.state_dict())
        return {"eval/mean_return": result.mean, "eval/std_return": result.std}

    learner = LEARNERS[cfg.algo.algo](env, agent, cfg.algo.steps, update_threads)
    if resume and save_buffer and (run_dir / checkpoint.REPLAY).is_file():
        learner.load_buffer_tensors(checkpoint.load_tensors(run_dir / checkpoint.REPLAY, start_step))
    if cfg.stop_when:
        callbacks = [*callbacks, load_stop_hook(cfg.stop_when)]
    recent: deque[float] = deque(maxlen=100)
    next_eval = _next_multiple(state.step, cfg.eval.every)
    t0 = time.perf_counter()
    stop = False
    try:
        # subnormal floats flushed to zero while training (process-wide, so undone in `finally`): Adam's
        # second moments and small activations drift into that range as training goes on, and each
        # subnormal operand costs the CPU a microcode assist (SAC Hopper: 115.6 -> 128.5 env steps/s)
        torch.set_flush_denormal(True)
        while state.step < cfg.algo.steps and not stop:
            steps, metrics = learner.iterate(state.step)
            state.step += steps
            state.iteration += 1
            state.wall_time = time.perf_counter() - t0
            state.sps = (state.step - start_step) / max(state.wall_time, 1e-9)
            returns, lengths = learner.episodes.drain()
            recent.extend(returns)
            state.episodes += len(returns)
            metrics["charts/SPS"] = state.sps
            if recent:
                state.recent_return = float(np.mean(recent))
                metrics["charts/episode_return"] = state.recent_return
            if lengths:
                metrics["charts/episode_length"] = float(np.mean(lengths))
            evaluated = bool(next_eval) and state.step >= next_eval or state.step >= cfg.algo.steps
            if evaluated:
                next_eval = _next_multiple(state.step, cfg.eval.every)
                metrics.update(run_eval())
            state.metrics = metrics
            # the writers' queues, the checkpoint and a tuning study's storage; see interrupts.held
            with interrupts.held():
                for sink in sinks:
                    sink.write(state.step, metrics)
                if evaluated:
                    save()
                    if cfg.stop_at is not None and state.eval_return >= cfg.stop_at:  # type: ignore[operator]
                        stop = True
                for callback in callbacks:
                    stop = bool(callback(state)) or stop
        if last_eval_step != state.step:  # stopped early by a callback, or resumed at the end
            metrics = run_eval()
            with interrupts.held():
                for sink in sinks:
                    sink.write(state.step, metrics)
        saved = False
        try:
            with interrupts.held():
                save(final=True)
                saved = True
        except KeyboardInterrupt:
            if not saved:  # a second Ctrl-C cut the save short
                raise
        return state  # finished and saved: a Ctrl-C during the save has nothing left to interrupt
    except KeyboardInterrupt:
        state.wall_time = time.perf_counter() - t0
        save()
        raise TrainingInterrupted(state) from None
    finally:
        torch.set_flush_denormal(False)
        try:
            with interrupts.held():
                for sink in sinks:
                    sink.close()
        finally:  # a second Ctrl-C in a slow close (a W&B upload) still closes the envs
            env.close()
            eval_env.close()


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every if every else 0
