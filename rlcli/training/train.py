"""Training, in named phases: set up, iterate, evaluate when due, checkpoint, finish.

Callbacks receive a ``TrainState`` after every iteration and may ask to stop; the progress display, the
user's stop condition and tuning's pruner all plug in here.

A first Ctrl-C lets the training iteration it lands in (rollout and update) finish, and the checkpoint it
then saves continues exactly on resume (``rlcli.training.resume``); a second one stops at once, with the weights as
they are and fresh episodes on resume, as does a Ctrl-C that lands in an evaluation, which is dropped and
done again on resume.

Several processes (``rlcli.algos.world``) train one run in step: each steps its own envs and learns from its
rollout with the others (see rlcli.algos.ppo); the lead (rank 0) alone logs, evaluates and writes the run
directory, gathering what the others must save. A Ctrl-C there is noted rather than raised, the processes
agree after each iteration whether any was interrupted, and all stop together with one checkpoint; it
continues exactly, each process from its own part, when resumed with as many processes.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcli.algos import spec_for
from rlcli.algos.base import Agent, Learner
from rlcli.algos.threads import ThreadPlan, Threads, flush_subnormals
from rlcli.algos.world import SINGLE, World, envs_per_process
from rlcli.config import RunConfig
from rlcli.envs import VecEnv
from rlcli.envs.faults import NonFiniteEnvOutput
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.errors import UsageError
from rlcli.jobs import interrupts
from rlcli.runs.checkpoint import load_optimizer_tensors, optimizer_tensors
from rlcli.runs.lock import LOCK, RunLock
from rlcli.runs.rundir import RunDir
from rlcli.training import resume
from rlcli.training.agents import build_agent, build_learner, cores_each, load_model, make_env, thread_plan
from rlcli.training.evaluation import evaluate_run
from rlcli.training.hooks import load_stop_hook
from rlcli.training.load import LoadAwareThreads
from rlcli.training.selfplay.attach import POOL_FILE, attach_opponents, selfplay_columns
from rlcli.training.selfplay.pool import OpponentPool
from rlcli.training.sinks import CSVSink, MetricSink, TensorBoardSink, WandbSink

# periodic evaluation during training: the default 10 episodes run side by side in one round, as long as
# the longest episode rather than two of them
PERIODIC_EVAL_ENVS = 16
RANK_SEED_STRIDE = 104_729  # a process's generators are seeded this far apart from the previous rank's
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
    eval_metrics: dict[str, float] = field(default_factory=dict)  # the latest evaluation's other figures
    episodes: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    last_saved: int = 0  # the step of the run's last checkpoint


Callback = Callable[[TrainState], bool]  # returns True to stop training


class TrainingInterrupted(Exception):
    """Ctrl-C during training; a checkpoint was saved in ``run_dir``, which resumes exactly unless
    ``inexact`` says why not. ``saved`` False: a process of several stopped at once, alone, and the run's
    last checkpoint (``state.last_saved``) stays as it was."""

    def __init__(self, state: TrainState, inexact: str | None = None, saved: bool = True) -> None:
        super().__init__(f"interrupted at step {state.step}")
        self.state, self.inexact, self.saved = state, inexact, saved


class _AllInterrupted(Exception):
    """The processes of a run agreed, between two iterations, that one of them was interrupted."""


class TrainingDiverged(Exception):
    """A loss, gradient norm or weight became NaN or infinite; the run's last checkpoint is the last
    finite one, and the run can resume from it."""

    def __init__(self, state: TrainState, quantity: str) -> None:
        super().__init__(f"training diverged at step {state.step:,}: {quantity} is not finite; the last "
                         f"finite checkpoint (step {state.last_saved:,}) is kept in {state.run_dir} (rlcli eval "
                         f"{state.run_dir} measures it). A resume repeats the same steps exactly: train a new run with "
                         "other settings, such as a smaller learning rate")
        self.state, self.quantity = state, quantity


class EnvFault(Exception):
    """The env returned a NaN or an infinity (``what``, at ``step``): the env's fault, not training's; the run's
    last checkpoint stays as it was."""

    def __init__(self, state: TrainState, env_id: str, fault: NonFiniteEnvOutput) -> None:
        super().__init__(f"the environment {env_id} returned a non-finite {fault.what} at step {fault.step:,}; "
                         f"training stopped, and its last checkpoint (step {state.last_saved:,}) is kept in "
                         f"{state.run_dir}. Check the env's step() and reset(): a resume meets the same value")
        self.state, self.what, self.step = state, fault.what, fault.step


def seed_everything(seed: int) -> None:
    seed %= 2**32  # numpy's range; a run's seed plus its steps may pass it
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Pending:
    """An iteration learnt but not yet concluded (evaluated, logged, checkpointed): where a first Ctrl-C
    stops a run, and where its resume picks up."""

    metrics: dict[str, float]
    evaluate: bool  # an evaluation is due and has not run
    checkpoint: bool  # the iteration ends with a checkpoint (an evaluation was due)
    generators: Snapshot | None = None  # the random generators before the evaluation, which may draw from them

    def as_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "evaluate": self.evaluate, "checkpoint": self.checkpoint}


@dataclass
class Session:
    """What one training process holds: the run, its envs, agent, learner, sinks and progress."""

    cfg: RunConfig
    run: RunDir
    env: VecEnv
    eval_env: VecEnv | None  # the lead's alone
    agent: Agent
    learner: Learner
    sinks: list[MetricSink]
    callbacks: list[Callback]
    state: TrainState
    save_buffer: bool
    prior_wall: float
    pool: OpponentPool | None = None  # a turn-based game's self-play opponents
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=100))
    last_eval_step: int = -1
    started: float = field(default_factory=time.perf_counter)
    pending: Pending | None = None
    mid_iteration: bool = False  # in a training iteration, where a checkpoint cannot continue exactly
    resumes: list[dict[str, Any]] = field(default_factory=list)  # each resume of the run: its step, whether exact
    on_hold: Callable[[], None] | None = None  # told when a first Ctrl-C waits for the iteration to finish
    world: World = SINGLE  # the processes training this run together
    interrupted: Callable[[], bool] = lambda: False  # whether a Ctrl-C reached this process (of several)
    lock: RunLock | None = None  # the lead's hold on the run directory
    threads: Threads = ThreadPlan(1, 1)  # the learner's plan: the default one fitted to the load, or --threads'


def train(cfg: RunConfig, run_dir: Path, callbacks: Sequence[Callback] = (),
          wandb_project: str | None = None, resume: bool = False, save_buffer: bool = False,
          world: World = SINGLE) -> TrainState:
    """Trains until ``cfg.algo.steps`` env steps (over all of ``world``'s processes); returns the final state
    (with its evaluation). ``save_buffer`` also checkpoints an off-policy replay buffer; a resume restores it
    when the run was saved with it. Raises TrainingInterrupted on Ctrl-C (a checkpoint saved) and
    TrainingDiverged when the numbers stop being finite."""
    return run(set_up(cfg, run_dir, callbacks, wandb_project, resume, save_buffer, world=world))


def run(session: Session) -> TrainState:
    """Iterates, evaluates and checkpoints a set-up session to its end; closes it whatever happens."""
    # several processes note a Ctrl-C and stop where they agree to (``agree``); one raises it where it lands
    try:
        with session.world.ctrl_c(session.on_hold) as interrupted:
            session.interrupted = interrupted
            try:
                iterate(session)
                finish(session)
            except _AllInterrupted:
                session.state.wall_time = time.perf_counter() - session.started
                raise TrainingInterrupted(session.state, checkpoint(session)) from None
            except KeyboardInterrupt:
                session.state.wall_time = time.perf_counter() - session.started
                if session.world.size > 1:  # a second Ctrl-C, this process's alone: no other joins a save
                    raise TrainingInterrupted(session.state, "stopped at once", saved=False) from None
                inexact = checkpoint(session, live=not session.mid_iteration)
                raise TrainingInterrupted(session.state, inexact) from None
        return session.state
    finally:
        close(session)


def set_up(cfg: RunConfig, run_dir: Path, callbacks: Sequence[Callback], wandb_project: str | None,
           resume: bool, save_buffer: bool, on_hold: Callable[[], None] | None = None,
           world: World = SINGLE) -> Session:
    """Seeds, envs, agent (with a resumed run's weights, optimiser and schedule), learner and sinks, this
    process's of ``world``'s. The order is part of the seeding: it fixes which random numbers each draws.
    ``on_hold`` is called when a first Ctrl-C waits for the iteration it landed in to finish. The lead
    holds the run directory's lock from here to the end of ``run``: a second writer is refused."""
    fresh = not run_dir.exists()
    lock = world.on_lead(RunLock.acquire, run_dir)
    try:
        session = _set_up(cfg, run_dir, callbacks, wandb_project, resume, save_buffer, on_hold, world)
    except BaseException:
        if lock is not None:
            lock.release()
            if fresh and [p.name for p in run_dir.iterdir()] == [LOCK]:  # nothing else written: as it was
                (run_dir / LOCK).unlink()
                run_dir.rmdir()
        raise
    session.lock = lock
    return session


def _set_up(cfg: RunConfig, run_dir: Path, callbacks: Sequence[Callback], wandb_project: str | None,
            resume: bool, save_buffer: bool, on_hold: Callable[[], None] | None, world: World) -> Session:
    run = open_run(cfg, run_dir, resume, world)
    cfg, meta, start = run.cfg, run.meta, run.steps
    # before the envs and agent, whose threads copy the CPU's flag from this one
    flush_subnormals(cfg.algo.flush_denormal)
    save_buffer = save_buffer or bool(meta.get("save_buffer", False))
    seed_everything(cfg.seed + start + RANK_SEED_STRIDE * world.rank)
    planned = thread_plan(cfg, world.local_size)
    plan: Threads = planned if cfg.torch_threads is not None else LoadAwareThreads(planned)
    torch.set_num_threads(planned.acting)
    # rank r's envs are those a single process of every rank's envs would seed r * n_envs further on
    env = make_env(cfg, cfg.algo.n_envs, cfg.seed + start + world.rank * cfg.algo.n_envs,
                   threads=world.env_threads(cores_each(world.local_size)), device=world.device(cfg.device))
    eval_env = world.on_lead(make_env, cfg, min(PERIODIC_EVAL_ENVS, cfg.eval.episodes), cfg.seed + 1_000_003)
    sinks: list[MetricSink] = []
    try:
        session = assemble(run, env, eval_env, sinks, plan, callbacks, wandb_project, resume, save_buffer, world)
        session.on_hold = on_hold
        return session
    except BaseException:  # spaces the algorithm cannot act in, a broken checkpoint, a full disk, Ctrl-C
        try:
            for sink in sinks:
                sink.close()
        finally:
            env.close()
            if eval_env is not None:
                eval_env.close()
        raise


@contextlib.contextmanager
def buffers_that_fit(cfg: RunConfig) -> Iterator[None]:
    """A UsageError where the rollout or replay storage is larger than the memory this machine can give."""
    try:
        yield
    except (MemoryError, RuntimeError) as e:
        if not isinstance(e, MemoryError | torch.cuda.OutOfMemoryError) and "can't allocate memory" not in str(e):
            raise
        size = "buffer_size" if "buffer_size" in type(cfg.algo).model_fields else "n_envs x n_steps"
        asked = re.search(r"allocate (\d+) bytes", str(e))
        one = f" (one of its arrays alone asked for {int(asked[1]) / 2**30:,.1f} GiB)" if asked else ""
        raise UsageError(f"the run's {'replay' if size == 'buffer_size' else 'rollout'} storage does not fit in "
                         f"memory{one}; give a smaller {size}") from None


def open_run(cfg: RunConfig, run_dir: Path, resume: bool, world: World) -> RunDir:
    """The run directory a session trains in: new, or resumed (its meta read by the lead and handed to the
    others, whose machines may not see the directory), with ``cfg``, each process's envs fitted to the
    number of processes where that changed (the run's global batch stays as saved)."""
    if not resume:
        return RunDir(run_dir, cfg)
    run = world.on_lead(RunDir.open, run_dir, writer=True)
    meta = world.from_lead(None if run is None else run.meta)
    run = run or RunDir(run_dir, cfg, meta)
    n_envs = envs_per_process(cfg.algo.n_envs, int(meta.get("world_size", 1)), world.size)
    run.cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"n_envs": n_envs})})
    return run


def assemble(run: RunDir, env: VecEnv, eval_env: VecEnv | None, sinks: list[MetricSink], plan: Threads,
             callbacks: Sequence[Callback], wandb_project: str | None, resume: bool, save_buffer: bool,
             world: World = SINGLE) -> Session:
    """The agent (with a resumed run's weights, optimiser and schedule), learner and sinks (added to ``sinks``
    as they open: the lead's alone) of a session, and a new run's step-0 checkpoint."""
    cfg, meta, start, run_dir = run.cfg, run.meta, run.steps, run.path
    agent = build_agent(cfg, env, world.device(cfg.device), world)
    if resume:
        world.on_lead(load_saved, agent, run)
        agent.load_extra_state(meta.get("agent", {}))
    share_agent(agent, world)
    state = TrainState(run_dir=run_dir, step=start, total_steps=cfg.algo.steps,
                       iteration=int(meta.get("iterations", 0)), best_eval=meta.get("best_eval"),
                       episodes=int(meta.get("episodes", 0)), last_saved=start)
    saved_pool = run.tensors(POOL_FILE) if resume else None
    pool = attach_opponents(cfg, env, agent, start, None if saved_pool is None else (saved_pool, meta["selfplay"]))
    with buffers_that_fit(cfg):
        learner = build_learner(cfg, env, agent, plan)  # resets the envs: the opponents are seated first
    replay = run.replay() if resume and save_buffer else None
    if replay is not None:
        learner.load_buffer_tensors(replay)
    hooks = []
    if world.lead:  # it alone writes metrics and decides to stop
        open_sinks(run, sinks, env, wandb_project)
        hooks = [load_stop_hook(cfg.stop_when)] if cfg.stop_when else []
    session = Session(cfg, run, env, eval_env, agent, learner, sinks, [*callbacks, *hooks], state, save_buffer,
                      float(meta.get("wall_time", 0.0)), pool, world=world, threads=plan)
    if resume:
        continue_from_checkpoint(session)
    else:
        checkpoint(session)  # step 0: a run that diverges or is cut short before its first save can resume
    return session


def load_saved(agent: Agent, run: RunDir) -> None:
    """A resumed run's weights and optimiser state, from its directory, into ``agent``."""
    load_model(agent, run.model(resuming=True), run.path)
    optimizer = run.optimizer()
    if optimizer is not None:
        load_optimizer_tensors(agent.optimizers(), optimizer)


def open_sinks(run: RunDir, sinks: list[MetricSink], env: VecEnv, wandb_project: str | None) -> None:
    """The run's metric writers (TensorBoard, CSV, W&B), added to ``sinks`` as each opens."""
    cfg, run_dir, meta = run.cfg, run.path, run.meta
    run_dir.mkdir(parents=True, exist_ok=True)
    sinks.append(TensorBoardSink(run_dir / "tb"))
    sinks.append(CSVSink(run_dir / "metrics.csv", OPTIONAL_COLUMNS + spec_for(cfg.algo.algo).optional_metrics
                         + selfplay_columns(env, cfg)))
    if wandb_project:
        wandb = WandbSink(wandb_project, run_dir, run_dir.name, cfg.model_dump(mode="json"),
                          resume_id=meta.get("wandb_id"))
        meta["wandb_id"] = wandb.run_id
        sinks.append(wandb)


def share_agent(agent: Agent, world: World) -> None:
    """The lead's weights, normalisation statistics and optimiser state, on every process: all start alike."""
    shared = world.lead_to_others(lambda: ({k: v.cpu() for k, v in agent.state_dict().items()},
                                           {k: v.cpu() for k, v in optimizer_tensors(agent.optimizers()).items()}))
    if shared is not None:
        agent.load_state_dict(shared[0])
        load_optimizer_tensors(agent.optimizers(), shared[1])


def continue_from_checkpoint(session: Session) -> None:
    """A resumed run's envs, learner, random generators and bookkeeping as its checkpoint left them, where it
    saved them (each process its own part); else fresh episodes, as set up. Which it was joins the run's
    ``resumes``."""
    run, state, world = session.run, session.state, session.world
    live, why = resume.saved_live_state(run, world)
    pending = None
    if live is not None:
        try:
            training = resume.restore(live, session.env, session.learner)
        except EnvStateUnreadable as e:
            why = str(e)
        else:
            session.recent.extend(training["recent"])
            pending = training["pending"]
    # the lead's pending iteration, which every process concludes with it
    reasons, pending = world.to_lead(why), world.from_lead(pending)
    why = next((f"process {rank}: {reason}" if rank else reason for rank, reason in enumerate(reasons or [])
                if reason), None)
    if pending is not None:
        session.pending = Pending(**pending)
        if session.pending.checkpoint:
            session.last_eval_step = state.step  # evaluated there, or about to be (conclude)
            state.eval_return = session.pending.metrics.get("eval/mean_return")
            state.eval_std = session.pending.metrics.get("eval/std_return")
    session.resumes = [*run.meta.get("resumes", []), {"step": state.step, "exact": why is None,
                                                      **({"why": why} if why else {})}]


def iterate(session: Session) -> None:
    """Training iterations until the budget is spent or a callback, ``stop_at`` or a stop hook says stop;
    a resumed run first concludes the iteration its checkpoint was saved in."""
    cfg, state = session.cfg, session.state
    start = state.step
    stop = agree(session, conclude(session)) if session.pending is not None else False
    while state.step < cfg.algo.steps and not stop:
        # a first Ctrl-C lets the iteration finish, so that its checkpoint continues exactly (several
        # processes note it instead, and tell it on in ``agree``)
        with session.world.iteration_held(session.on_hold):
            learn(session, start)
        stop = agree(session, conclude(session))


def agree(session: Session, stop: bool) -> bool:
    """Whether to stop, as the lead decided; _AllInterrupted where a Ctrl-C reached any of several processes."""
    stop, interrupted = session.world.flags(stop, session.interrupted())
    if interrupted:
        raise _AllInterrupted
    return stop


def learn(session: Session, start: int) -> None:
    """One training iteration (rollout and update), left pending for ``conclude``; ``start`` is the step this
    process began at (for steps per second)."""
    cfg, state = session.cfg, session.state
    session.mid_iteration = True
    before = state.step
    acting = session.threads.acting
    if torch.get_num_threads() != acting:
        torch.set_num_threads(acting)
    try:
        steps, metrics = session.learner.iterate(state.step)
    except NonFiniteEnvOutput as e:
        raise EnvFault(state, cfg.env.id, e) from None
    state.step += steps * session.world.size
    state.iteration += 1
    check_finite(session, metrics)
    if session.pool is not None:
        if state.iteration % cfg.env.multiagent.selfplay.snapshot_every == 0:
            session.pool.add(state.step)
        metrics.update(session.pool.metrics())
    state.wall_time = time.perf_counter() - session.started
    state.sps = (state.step - start) / max(state.wall_time, 1e-9)
    metrics.update(episode_metrics(session))
    metrics["charts/SPS"] = state.sps
    metrics["charts/torch_threads"] = float(session.threads.updating)
    # due once the steps pass a multiple of eval.every, and at the end
    due = bool(cfg.eval.every) and state.step >= _next_multiple(before, cfg.eval.every) or state.step >= cfg.algo.steps
    session.pending = Pending(metrics, due, due, resume.random_state() if due else None)
    session.mid_iteration = False


def conclude(session: Session) -> bool:
    """The pending iteration's evaluation (when due), metrics, checkpoint (after an evaluation) and callbacks;
    returns whether to stop."""
    cfg, state, pending = session.cfg, session.state, session.pending
    assert pending is not None
    if pending.evaluate and session.eval_env is not None:  # the lead's
        run_eval(session)
    state.metrics = pending.metrics
    stop = False
    # the writers' queues, the checkpoint and a tuning study's storage; see interrupts.held
    with interrupts.held():
        write_metrics(session, pending.metrics)
        session.pending = None
        if pending.checkpoint:
            checkpoint(session)
            stop = reached_stop_at(cfg, state)
        for callback in session.callbacks:
            stop = bool(callback(state)) or stop
    return stop


def reached_stop_at(cfg: RunConfig, state: TrainState) -> bool:
    """Whether the latest evaluation reached ``stop_at``: its return, or with ``stop_opponent`` the win rate
    against that opponent."""
    if cfg.stop_at is None:
        return False
    if cfg.stop_opponent is not None:
        return state.eval_metrics.get(f"{cfg.stop_opponent}/win", -math.inf) >= cfg.stop_at
    return state.eval_return is not None and state.eval_return >= cfg.stop_at


def episode_metrics(session: Session) -> dict[str, float]:
    """The training episodes finished this iteration (by every process: the lead's alone are counted), into
    the state and as metrics."""
    state = session.state
    finished = session.world.to_lead(session.learner.drain_episodes()) or []
    returns, lengths = [r for ended in finished for r in ended[0]], [n for ended in finished for n in ended[1]]
    session.recent.extend(returns)
    state.episodes += len(returns)
    metrics = {}
    if session.recent:
        state.recent_return = float(np.mean(session.recent))
        metrics["charts/episode_return"] = state.recent_return
    if lengths:
        metrics["charts/episode_length"] = float(np.mean(lengths))
    return metrics


def check_finite(session: Session, metrics: dict[str, float]) -> None:
    """Raises TrainingDiverged naming the first metric (a loss, a gradient norm) that is NaN or infinite."""
    for name, value in metrics.items():
        if not math.isfinite(value):
            raise TrainingDiverged(session.state, name)


def run_eval(session: Session) -> dict[str, float]:
    """Evaluates the agent, records it in the run's history and keeps the best model; returns metrics."""
    cfg, state, run = session.cfg, session.state, session.run
    model = finite_model(session)
    session.last_eval_step = state.step
    assert session.eval_env is not None, "the lead evaluates"
    result, rates = evaluate_run(session.agent, session.eval_env, cfg, cfg.seed + 1_000_003)
    metrics = {"eval/mean_return": result.mean, "eval/std_return": result.std,
               **{f"eval/{name}": value for name, value in rates.items()}}
    # the history, the best model, the figure it is best by and the pending iteration change together
    with interrupts.held():
        state.eval_return, state.eval_std, state.eval_metrics = result.mean, result.std, rates
        run.record_eval({"step": state.step, **result.as_dict(), **({"rates": rates} if rates else {})})
        if state.best_eval is None or result.mean >= state.best_eval:
            run.save_best(model)
            state.best_eval = result.mean
        if session.pending is not None:
            session.pending.metrics.update(metrics)
            session.pending.evaluate, session.pending.generators = False, None
    return metrics


def checkpoint(session: Session, final: bool = False, live: bool = True) -> str | None:
    """Saves the whole run at the current step; weights that are not finite are never saved. ``live``: between
    two iterations, where the envs' and learner's state is saved too. Returns why a resume from it would
    not continue exactly, or None where it would. Every process of several calls it: the lead saves, with
    each one's live state."""
    state, agent, cfg, world = session.state, session.agent, session.cfg, session.world
    model = finite_model(session)
    snapshot, inexact = live_snapshot(session) if live else (
        None, "it was saved in the middle of an iteration (a second Ctrl-C)")
    snapshot, inexact = resume.gather_live_state(world, snapshot, inexact)
    if not world.lead:
        state.last_saved = state.step
        return inexact
    meta: dict[str, Any] = {
        "algo": cfg.algo.algo, "env_id": cfg.env.id, "seed": cfg.seed, "steps": state.step,
        "iterations": state.iteration, "episodes": state.episodes, "agent": agent.extra_state(),
        "best_eval": state.best_eval, "wall_time": session.prior_wall + state.wall_time, "finished": final,
        "backend": session.env.backend, "save_buffer": session.save_buffer, **world.describe(cfg.algo.n_envs),
        "resume": {"exact": snapshot is not None, **({"why": inexact} if inexact else {})},
        **({"resumes": session.resumes} if session.resumes else {}),
        **({"wandb_id": session.run.meta["wandb_id"]} if "wandb_id" in session.run.meta else {})}
    replay = session.learner.buffer_tensors() if session.save_buffer else None
    extra = {}
    if session.pool is not None:
        extra[POOL_FILE], meta["selfplay"] = session.pool.state()
    session.run.save(model, optimizer_tensors(agent.optimizers()), meta, replay, snapshot, extra)
    state.last_saved = state.step
    return inexact


def live_snapshot(session: Session) -> tuple[Snapshot | None, str | None]:
    """What continues the run exactly from here, or why it cannot be saved (see rlcli.training.resume)."""
    pending = session.pending
    generators = pending.generators if pending is not None and pending.generators is not None else resume.random_state()
    training = {"recent": list(session.recent), "pending": None if pending is None else pending.as_json()}
    return resume.capture(session.env, session.learner, training, generators, session.save_buffer)


def finite_model(session: Session) -> dict[str, torch.Tensor]:
    """The agent's model tensors; TrainingDiverged naming the first that holds a NaN or an infinity."""
    model = session.agent.state_dict()
    for name, tensor in model.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise TrainingDiverged(session.state, f"weight {name}")
    return model


def finish(session: Session) -> None:
    """The final evaluation (unless the last iteration made it) and the final checkpoint. A Ctrl-C
    during the save waits for it; a second one cuts it short."""
    # stopped early by a callback, or resumed at the end
    if session.last_eval_step != session.state.step and session.eval_env is not None:  # the lead's
        metrics = run_eval(session)
        with interrupts.held():
            write_metrics(session, metrics)
    saved = False
    try:
        with interrupts.held():
            checkpoint(session, final=True)
            saved = True
    except KeyboardInterrupt:
        if not saved:
            raise


def write_metrics(session: Session, metrics: dict[str, float]) -> None:
    for sink in session.sinks:
        sink.write(session.state.step, metrics)


def close(session: Session) -> None:
    """Closes the sinks, then the envs, whatever happens to the sinks (a second Ctrl-C in a slow W&B upload)."""
    try:
        with interrupts.held():
            for sink in session.sinks:
                sink.close()
    finally:
        session.env.close()
        if session.eval_env is not None:
            session.eval_env.close()
        if session.lock is not None:
            session.lock.release()


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every if every else 0
