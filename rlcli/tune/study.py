"""Tuning studies: the objective (real training runs with a pruning callback), the storage that holds the
study, and the worker processes that share it.

A study lives in an Optuna storage: an SQLite file in the study directory by default, or any database URL
(``--storage postgresql://...``), in which case several ``rlcli tune`` processes on several machines work on
one study. Every worker claims a trial only while the study has fewer than ``trials`` (counting those
running elsewhere), under a lock (a file lock for SQLite, an advisory lock for PostgreSQL), so that
workers that finish at the same moment do not overshoot the target. Re-running the same command continues
the study: the target is the study's total, and trials whose worker died are recorded as interrupted and
not counted.

A trial trains one run per env and seed (``seeds_per_trial``) in ``STUDY_DIR/trials/NNNN/``; each periodic
evaluation is reported to the pruner. A trial that diverges (non-finite losses or returns) or crashes is
recorded as failed with its reason in the ``fail_reason`` user attribute, and the study goes on.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import multiprocessing
import os
import re
import signal
import socket
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import Field

from rlcli import interrupts
from rlcli.config import EnvConfig, EvalConfig, Frozen, deep_merge, hyperparams_for, load_run_config
from rlcli.errors import UsageError
from rlcli.processes import alive
from rlcli.runs import safe_name
from rlcli.tune.space import SearchSpace, flatten

SAMPLERS = ("tpe", "random", "cmaes")
PRUNERS = ("median", "halving", "none")
HEARTBEAT_S = 20  # seconds between a running trial's heartbeats in the storage
GRACE_S = 90  # a running trial without a heartbeat for this long is recorded as interrupted
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
NOTE = "note: "  # a worker log line that the command line shows
OVERRIDES_BY_ENV = "hyperparams_by_env"  # a trial's user attribute when several envs are tuned
# settings that change what a trial's value means; a study continues only with the same ones
RESULT_SETTINGS = ("env_ids", "algo", "steps", "seeds_per_trial", "evaluations", "eval_episodes", "backend",
                   "seed", "space")


class TuneSpec(Frozen):
    """Everything a tuning worker needs; sent as JSON to worker processes."""

    env_ids: tuple[str, ...]
    algo: Literal["ppo", "sac"] = "ppo"
    trials: Annotated[int, Field(gt=0)] = 50  # the study's total, over every run of the command
    steps: Annotated[int, Field(gt=0)] = 100_000  # env steps per training run
    seeds_per_trial: Annotated[int, Field(gt=0)] = 1
    sampler: Literal["tpe", "random", "cmaes"] = "tpe"
    pruner: Literal["median", "halving", "none"] = "median"
    startup_trials: Annotated[int, Field(ge=0)] = 5  # sampled at random and never pruned
    evaluations: Annotated[int, Field(gt=0)] = 10  # periodic evaluations per run, each reported to the pruner
    eval_episodes: Annotated[int, Field(gt=0)] = 10
    study_dir: Path
    study_name: str
    storage: str
    space: dict[str, Any]
    space_source: str = "built-in"
    jobs: Annotated[int, Field(gt=0)] = 1
    threads: Annotated[int, Field(gt=0)] | None = None  # torch (and envpool) threads per worker
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "envpool", "gymnasium"] = "auto"
    env_module: str | None = None
    seed: int = 0

    def search_space(self) -> SearchSpace:
        return SearchSpace(self.algo, self.space, self.space_source)

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(mode="json").items() if k in RESULT_SETTINGS}


class TrialRow(NamedTuple):
    """A trial as the display and summary show it."""

    number: int
    state: str  # running, complete, pruned, fail, waiting
    value: float | None  # the objective, or the last reported evaluation of a pruned/running trial
    best: float | None  # best objective of the complete trials up to this one
    hyperparams: dict[str, Any]  # flat: {"network.hidden": [64, 64], ...}
    reason: str | None  # why it failed or was pruned
    step: int | None  # the last reported evaluation index


class TrialFailed(Exception):
    """A trial that diverged or crashed; the message is its recorded reason."""


def default_study_dir(env_ids: tuple[str, ...], algo: str, root: Path = Path("tunes")) -> Path:
    """``tunes/ENV__ALGO`` (several envs joined by ``+``; ids like ``ALE/Pong-v5`` made path-safe)."""
    return root / f"{'+'.join(safe_name(e) for e in env_ids)}__{algo}"


def redact(url: str) -> str:
    """A storage URL without its password."""
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url)


# ---------------------------------------------------------------------------------------------------
# Storage and study


def open_storage(url: str) -> Any:
    """An Optuna RDB storage for ``url`` with heartbeats, or a UsageError naming what was wrong."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    quiet_optuna()
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # several local workers write to one file: wait for its lock instead of failing at once
        engine_kwargs = {"connect_args": {"timeout": 60}}
    elif url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"connect_timeout": 10}}
    try:
        return optuna.storages.RDBStorage(_with_driver(url), engine_kwargs=engine_kwargs,
                                          heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)
    except (SQLAlchemyError, ImportError, ValueError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"cannot open the study storage {redact(url)} ({detail}); give a reachable database "
                         "URL such as sqlite:///study.db or postgresql://user:password@host:5432/db") from None


def _with_driver(url: str) -> str:
    """``postgresql://`` names no driver, and SQLAlchemy's default for it changed (psycopg2 up to 2.0,
    psycopg 3 from 2.1); name the one that is installed (the ``tune`` extra brings psycopg2-binary)."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    for module, driver in (("psycopg2", "psycopg2"), ("psycopg", "psycopg")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{driver}://" + url[len("postgresql://"):]
    return url


def open_study(spec: TuneSpec, storage: Any = None, worker: int = 0) -> Any:
    """The spec's study, created or continued; a UsageError when the stored study was run with other
    settings (its trials' values would not compare with the new ones)."""
    import optuna

    storage = storage if storage is not None else open_storage(spec.storage)
    study = optuna.create_study(storage=storage, study_name=spec.study_name, direction="maximize",
                                sampler=make_sampler(spec, worker), pruner=make_pruner(spec), load_if_exists=True)
    stored = study.user_attrs.get("rlcli")
    settings = spec.settings()
    if stored is None:
        study.set_user_attr("rlcli", settings)
    elif _canonical(stored) != _canonical(settings):
        changed = ", ".join(f"{k} {stored.get(k)!r} -> {v!r}" for k, v in settings.items()
                            if _canonical(stored.get(k)) != _canonical(v))
        raise UsageError(f"study '{spec.study_name}' in {redact(spec.storage)} was run with other settings "
                         f"({changed}); keep them to continue it, or choose another --study-name / --out")
    return study


def make_sampler(spec: TuneSpec, worker: int = 0) -> Any:
    """The spec's sampler; each worker gets its own seed so that parallel workers do not draw the
    same random startup trials."""
    import optuna

    seed = spec.seed + 1000 * worker
    if spec.sampler == "tpe":
        # constant_liar: a running trial counts as a poor result, so parallel workers spread out
        return optuna.samplers.TPESampler(n_startup_trials=spec.startup_trials, seed=seed, constant_liar=True)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "cmaes":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # categorical choices are outside CMA-ES; they are drawn at random, without a warning per trial
            return optuna.samplers.CmaEsSampler(n_startup_trials=spec.startup_trials, seed=seed,
                                                warn_independent_sampling=False)
    raise UsageError(f"unknown sampler '{spec.sampler}'; choose one of: {', '.join(SAMPLERS)}")


def make_pruner(spec: TuneSpec) -> Any:
    """Pruners compare trials at the same evaluation index (see ``report_step``)."""
    import optuna

    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials,
                                           n_warmup_steps=spec.evaluations // 3)
    if spec.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    raise UsageError(f"unknown pruner '{spec.pruner}'; choose one of: {', '.join(PRUNERS)}")


def quiet_optuna() -> None:
    """Optuna's per-trial log lines and experimental-feature warnings would garble the display."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # workers run trials with ask/tell (to claim them under a lock) and keep the heartbeat themselves
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


# ---------------------------------------------------------------------------------------------------
# Trials


def trial_rows(study: Any) -> list[TrialRow]:
    """Every trial of the study in number order, with the best complete value so far."""
    from optuna.trial import TrialState

    rows, best = [], None
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        value = t.value if t.state == TrialState.COMPLETE else None
        step = max(t.intermediate_values) if t.intermediate_values else None
        if value is None and step is not None:
            value = t.intermediate_values[step]
        if t.state == TrialState.COMPLETE and value is not None and (best is None or value > best):
            best = value
        reason = t.user_attrs.get("fail_reason") or t.user_attrs.get("prune_reason")
        if t.state == TrialState.FAIL and reason is None:
            reason = f"its worker sent no heartbeat for {GRACE_S} s"
        rows.append(TrialRow(t.number, t.state.name.lower(), value, best, flatten(t.user_attrs.get("hyperparams", {})),
                             reason, step))
    return rows


def counted_trials(study: Any) -> int:
    """Trials that count towards the target: all but those interrupted (Ctrl-C, a dead worker)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if not _interrupted(t))


def _interrupted(trial: Any) -> bool:
    """Ctrl-C and dead local workers set ``interrupted``; a trial failed for lack of heartbeats (Optuna
    does that) has no ``fail_reason``, which every failure recorded by a worker has."""
    from optuna.trial import TrialState

    return bool(trial.user_attrs.get("interrupted")) or (
        trial.state == TrialState.FAIL and "fail_reason" not in trial.user_attrs)


def base_hyperparams(spec: TuneSpec, env_id: str) -> dict[str, Any]:
    """The env's merged hyperparameters (default <- group <- env entry) that a trial's sample overrides."""
    from rlcli.envs.registry import env_group

    return hyperparams_for(spec.algo, env_id, env_group(env_id))


def report_step(unit: int, spec: TuneSpec, step: int, every: int) -> int:
    """The pruner's step for an evaluation at env step ``step`` of the ``unit``-th run of a trial: the
    index of the evaluation multiple reached, so that trials with different rollout sizes compare at
    the same point of training (and runs of several seeds or envs follow one another)."""
    return unit * (spec.evaluations + 1) + min(step // every, spec.evaluations)


def trial_overrides(trial: Any, spec: TuneSpec, space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Per env id: the overrides of its hyperparameters that ``trial`` samples. The drawn values are the
    same for every env (a trial answers a name it has drawn with that draw); what derives from an env's
    own entry can differ: the minibatch size, when the space splits a rollout shape it does not sample."""
    return {env_id: space.sample(trial, base_hyperparams(spec, env_id)) for env_id in spec.env_ids}


def stored_overrides(user_attrs: dict[str, Any], env_ids: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per env id: the overrides a finished trial trained with, from its user attributes."""
    by_env = user_attrs.get(OVERRIDES_BY_ENV) or {}
    return {env_id: by_env.get(env_id, user_attrs.get("hyperparams", {})) for env_id in env_ids}


def objective(trial: Any, spec: TuneSpec, space: SearchSpace, on_report: Callable[[], None] | None = None) -> float:
    """Samples hyperparameters, trains every env x seed of the trial and returns the mean final evaluated
    return (mean normalised score with several envs). Raises optuna.TrialPruned, TrialFailed,
    optuna.exceptions.UpdateFinishedTrialError (another worker recorded the trial as interrupted while it
    ran), or KeyboardInterrupt (Ctrl-C)."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    from rlcli.envs.registry import env_group
    from rlcli.train import TrainingInterrupted, TrainState, train

    by_env = trial_overrides(trial, spec, space)
    trial.set_user_attr("hyperparams", by_env[spec.env_ids[0]])  # what the display and summary show
    if len(by_env) > 1:
        trial.set_user_attr(OVERRIDES_BY_ENV, by_env)
    every = max(spec.steps // spec.evaluations, 1)
    seeds = [spec.seed + i for i in range(spec.seeds_per_trial)]
    units = [(env_id, seed) for env_id in spec.env_ids for seed in seeds]
    scores, returns = [], {}
    last_reported = -1
    for unit, (env_id, seed) in enumerate(units):
        try:
            cfg = load_run_config(
                spec.algo, EnvConfig(id=env_id, backend=spec.backend, env_module=spec.env_module), env_group(env_id),
                overrides=deep_merge(by_env[env_id], {"steps": spec.steps}), seed=seed, device=spec.device,
                torch_threads=spec.threads, env_threads=spec.threads,
                eval=EvalConfig(every=every, episodes=spec.eval_episodes))
        except UsageError as e:
            raise TrialFailed(f"invalid configuration: {e}") from None

        def report(state: TrainState, env_id: str = env_id, seed: int = seed, unit: int = unit) -> bool:
            nonlocal last_reported
            for key, value in state.metrics.items():
                if key.startswith("losses/") and not math.isfinite(value):
                    raise TrialFailed(f"diverged: {key} is {value} at step {state.step:,} ({env_id}, seed {seed})")
            if "eval/mean_return" not in state.metrics:
                return False
            score = _score(env_id, state.metrics["eval/mean_return"], len(spec.env_ids) > 1)
            if not math.isfinite(score):
                raise TrialFailed(f"diverged: evaluated return is {score} at step {state.step:,} ({env_id})")
            index = report_step(unit, spec, state.step, every)
            if index > last_reported:  # the final evaluation can fall on the last periodic one's index
                last_reported = index
                trial.report(score, index)
                if on_report is not None:
                    on_report()
                if trial.should_prune():
                    reason = f"{score:.4g} at step {state.step:,} ({env_id}, seed {seed})"
                    trial.set_user_attr("prune_reason", reason)
                    raise optuna.TrialPruned(reason)
            return False

        run_dir = spec.study_dir / "trials" / f"{trial.number:04d}" / f"{safe_name(env_id)}__s{seed}"
        try:
            state = train(cfg, run_dir, [report])
        except (optuna.TrialPruned, TrialFailed, UpdateFinishedTrialError):
            raise
        except TrainingInterrupted:
            raise KeyboardInterrupt from None
        except Exception as e:  # a crash of one trial's training, or a failed report, must not end the study
            raise TrialFailed(f"{describe_error(e)} ({env_id}, seed {seed})") from None
        final = _score(env_id, state.eval_return, len(spec.env_ids) > 1)
        if not math.isfinite(final):
            raise TrialFailed(f"diverged: final evaluated return is {state.eval_return} ({env_id}, seed {seed})")
        returns[f"{env_id}/s{seed}"] = state.eval_return
        scores.append(final)
        trial.set_user_attr("returns", returns)
    return float(sum(scores) / len(scores))


def _score(env_id: str, mean_return: float | None, normalise: bool) -> float:
    if mean_return is None:
        return math.nan
    if not normalise:
        return float(mean_return)
    from rlcli.scores import normalization_for

    norm = normalization_for(env_id)
    assert norm is not None  # check_normalisable() ran before the study started
    return (float(mean_return) - norm.random) / (norm.reference - norm.random)


def check_normalisable(env_ids: tuple[str, ...]) -> None:
    """Several envs are scored by normalised return; each needs random and reference returns."""
    if len(env_ids) < 2:
        return
    from rlcli.scores import normalization_for, normalizations

    missing = [e for e in env_ids if normalization_for(e) is None]
    if missing:
        raise UsageError(f"tuning several envs scores them by normalised return, and {', '.join(missing)} "
                         f"has no random/reference return in rlcli/data/normalization.csv; envs that have "
                         f"one: {', '.join(sorted(normalizations()))}")


def _canonical(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, sort_keys=True, default=str))


# ---------------------------------------------------------------------------------------------------
# Workers


class RunOutcome(NamedTuple):
    """What ``run`` hands back to the command line."""

    notes: list[str]  # lines worth showing, such as a trial another worker recorded while it ran
    failures: list[str]  # a line per worker process that failed (its log's last line)


def run_worker(spec: TuneSpec, worker: int = 0, on_change: Callable[[], None] | None = None,
               note: Callable[[str], None] | None = None) -> list[int]:
    """Runs trials until the study holds ``spec.trials`` (counting other workers' trials); returns the
    numbers of the trials this worker ran. ``note`` receives a line about a trial that another worker
    recorded as interrupted while it ran here (its result is dropped). Ctrl-C records the running trial
    as interrupted and re-raises; a storage that fails while a trial is recorded is a StorageLost."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = open_storage(spec.storage)
    study = open_study(spec, storage, worker)
    space = spec.search_space()
    ran: list[int] = []
    while True:
        _fail_lost_trials(study, storage)
        trial = None
        try:
            with interrupts.held(), _claim_lock(spec, storage):
                if counted_trials(study) >= spec.trials:
                    return ran
                trial = study.ask()
                trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
            ran.append(trial.number)
            if on_change is not None:
                on_change()
            with _heartbeat(storage, trial._trial_id):
                value = objective(trial, spec, space, on_change)
            outcome: tuple[TrialState, float | None, dict[str, Any]] | None = (TrialState.COMPLETE, value, {})
        except optuna.TrialPruned:
            outcome = (TrialState.PRUNED, None, {})
        except TrialFailed as e:
            outcome = (TrialState.FAIL, None, {"fail_reason": str(e)})
        except UpdateFinishedTrialError:  # from report() or set_user_attr() while it trained
            outcome = None
        except KeyboardInterrupt:
            if trial is not None:
                _record(spec, study, trial, TrialState.FAIL, None, {"fail_reason": "interrupted", "interrupted": True},
                        note)
            raise
        if outcome is None:
            _note_taken(trial, note)
        else:
            _record(spec, study, trial, *outcome, note)
        if on_change is not None:
            on_change()


class StorageLost(UsageError):
    """The study's storage failed while a trial was being recorded."""


def _record(spec: TuneSpec, study: Any, trial: Any, state: Any, value: float | None, attrs: dict[str, Any],
            note: Callable[[str], None] | None) -> None:
    """Records the trial's end; a trial that another worker already recorded (its heartbeats stopped
    reaching the storage for GRACE_S seconds) keeps that record, and ``note`` hears of it. Raises
    StorageLost when the storage fails."""
    from optuna.exceptions import StorageInternalError, UpdateFinishedTrialError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with interrupts.held():
            for key, attr in attrs.items():
                trial.set_user_attr(key, attr)
            finished = study.tell(trial, value, state=state, skip_if_finished=True)
    except UpdateFinishedTrialError:
        _note_taken(trial, note)
        return
    except (SQLAlchemyError, StorageInternalError) as e:
        raise StorageLost(f"could not record trial {trial.number} in the study storage {redact(spec.storage)} "
                          f"({describe_error(e)}); running the command again records it as interrupted and "
                          "continues the study") from None
    if finished.state != state:
        _note_taken(trial, note)


def _note_taken(trial: Any, note: Callable[[str], None] | None) -> None:
    if note is not None:
        note(f"trial {trial.number} was recorded as interrupted by another worker while it ran here (its "
             f"heartbeats had not reached the storage for {GRACE_S} s); its result is dropped, and another "
             "trial takes its place")


def describe_error(error: BaseException) -> str:
    """``Type: first line of the message``, of the database's error where Optuna wraps one."""
    from optuna.exceptions import StorageInternalError

    if isinstance(error, StorageInternalError) and error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def run(spec: TuneSpec, on_change: Callable[[], None] | None = None, poll_s: float = 1.0) -> RunOutcome:
    """Runs the study with ``spec.jobs`` worker processes (in this process when 1); ``on_change`` is
    called as trials start, report and end (every ``poll_s`` seconds with worker processes). Ctrl-C
    stops the workers, each recording its running trial as interrupted, and re-raises KeyboardInterrupt."""
    if spec.jobs == 1:
        notes: list[str] = []
        run_worker(spec, 0, on_change, notes.append)
        return RunOutcome(notes, [])
    logs = [spec.study_dir / "workers" / f"worker-{i}.log" for i in range(spec.jobs)]
    logs[0].parent.mkdir(parents=True, exist_ok=True)
    offsets = [log.stat().st_size if log.is_file() else 0 for log in logs]  # logs are appended to by each run
    context = multiprocessing.get_context("spawn")  # fork would copy torch's thread pools and locks
    stop = context.Event()
    processes = [context.Process(target=_worker_main, args=(spec.model_dump_json(), i, str(log), stop),
                                 name=f"rlcli-tune-worker-{i}") for i, log in enumerate(logs)]
    threads = str(spec.threads or 1)
    # the spawned interpreter re-imports the main module (and with it torch) before any worker code runs,
    # so the thread caps must be in the environment it starts with
    with _environment(dict.fromkeys(THREAD_VARIABLES, threads)), _sigint_ignored_while_starting():
        for process in processes:
            process.start()
    try:
        while any(p.is_alive() for p in processes):
            if on_change is not None:
                on_change()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        stop.set()  # for a worker still starting, which would not see the signal
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGINT)
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        raise
    for process in processes:
        process.join()
    notes = [line.removeprefix(NOTE) for log, offset in zip(logs, offsets, strict=True)
             for line in _lines_after(log, offset) if line.startswith(NOTE)]
    failures = [f"worker {i} exited with {p.exitcode}: {_last_line(log)} (log: {log})"
                for i, (p, log) in enumerate(zip(processes, logs, strict=True)) if p.exitcode != 0]
    return RunOutcome(notes, failures)


def _worker_main(spec_json: str, worker: int, log_path: str, stop: Any) -> None:
    """Entry point of a worker process: its own session, so that the terminal's Ctrl-C (sent to the
    whole foreground process group) does not reach it and the interrupt the parent forwards is its only
    one; output to its log file."""
    spec = TuneSpec.model_validate_json(spec_json)
    # started with SIGINT ignored and blocked (see _sigint_ignored_while_starting); setting SIG_IGN
    # again drops one that arrived while starting
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    log = open(log_path, "a", buffering=1)  # noqa: SIM115  (open for the process's lifetime)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    log.write(f"worker {worker} started (process {os.getpid()})\n")
    try:
        signal.signal(signal.SIGINT, _interrupt_once)
        if stop.is_set():  # Ctrl-C came while this process started, when it could not see the signal
            raise KeyboardInterrupt
        _stop_when_parent_ends()
        ran = run_worker(spec, worker, note=lambda line: log.write(f"{NOTE}{line}\n"))
        log.write(f"worker {worker} ran trials {ran}\n")
    except KeyboardInterrupt:
        log.write(f"worker {worker} interrupted\n")
    except UsageError as e:
        log.write(f"error: {e}\n")
        sys.exit(2)


def _interrupt_once(signum: int, frame: Any) -> None:
    """A worker's SIGINT handler: the first raises KeyboardInterrupt, later ones are ignored, since
    they would land in the checkpoint save or the storage write that the first one started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stop_when_parent_ends() -> None:
    """In its own session a worker would outlive a parent killed or hung up on; it interrupts itself
    then, recording its running trial as interrupted."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="rlcli-tune-parent-watch", daemon=True).start()


@contextlib.contextmanager
def _sigint_ignored_while_starting() -> Iterator[None]:
    """Worker processes start with SIGINT ignored (the disposition survives exec, and Python keeps an
    ignored SIGINT ignored), so that a Ctrl-C while they start cannot break their start-up; blocked
    here as well, so that this process receives such a Ctrl-C once they have started."""
    if threading.current_thread() is not threading.main_thread():  # handlers are set from the main thread only
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in os.environ (which new processes inherit) for the duration."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _lines_after(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"


@contextlib.contextmanager
def _claim_lock(spec: TuneSpec, storage: Any) -> Iterator[None]:
    """Makes counting the study's trials and creating a new one atomic across workers."""
    url = spec.storage
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///"):] + ".lock")
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    elif url.startswith("postgresql"):
        from sqlalchemy import text

        key = zlib.crc32(f"rlcli-tune:{spec.study_name}".encode())
        with storage.engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
    else:  # other databases: two workers finishing at the same moment may overshoot by a trial
        yield


@contextlib.contextmanager
def _heartbeat(storage: Any, trial_id: int) -> Iterator[None]:
    """Records the trial's heartbeat every HEARTBEAT_S seconds while it runs, so that other workers can
    tell a trial whose machine died from one still running."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is harmless; the next one may succeed
                storage.record_heartbeat(trial_id)
            if stop.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, name="rlcli-tune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _fail_lost_trials(study: Any, storage: Any) -> None:
    """Records as interrupted the running trials whose worker is gone: on this host, a dead process
    (at once); elsewhere, a trial whose heartbeat stopped GRACE_S seconds ago."""
    import optuna
    from optuna.trial import TrialState

    optuna.storages.fail_stale_trials(study)
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker_host, _, pid = str(t.user_attrs.get("worker", "")).partition(":")
        if worker_host == host and pid.isdigit() and not alive(int(pid)):
            storage.set_trial_user_attr(t._trial_id, "fail_reason", f"its worker (process {pid}) ended")
            storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            with contextlib.suppress(Exception):  # another worker may have recorded it first
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)


