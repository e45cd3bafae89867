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

from rlcli.config import EnvConfig, EvalConfig, Frozen, deep_merge, hyperparams_for, load_run_config
from rlcli.errors import UsageError
from rlcli.tune.space import SearchSpace, flatten

SAMPLERS = ("tpe", "random", "cmaes")
PRUNERS = ("median", "halving", "none")
HEARTBEAT_S = 20  # seconds between a running trial's heartbeats in the storage
GRACE_S = 90  # a running trial without a heartbeat for this long is recorded as interrupted
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
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
    safe = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "_", e) for e in env_ids)
    return root / f"{safe}__{algo}"


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


def objective(trial: Any, spec: TuneSpec, space: SearchSpace, on_report: Callable[[], None] | None = None) -> float:
    """Samples hyperparameters, trains every env x seed of the trial and returns the mean final evaluated
    return (mean normalised score with several envs). Raises optuna.TrialPruned, TrialFailed, or
    KeyboardInterrupt (Ctrl-C)."""
    import optuna

    from rlcli.envs.registry import env_group
    from rlcli.train import TrainingInterrupted, TrainState, train

    overrides = space.sample(trial, base_hyperparams(spec, spec.env_ids[0]))
    trial.set_user_attr("hyperparams", overrides)
    every = max(spec.steps // spec.evaluations, 1)
    seeds = [spec.seed + i for i in range(spec.seeds_per_trial)]
    units = [(env_id, seed) for env_id in spec.env_ids for seed in seeds]
    scores, returns = [], {}
    last_reported = -1
    for unit, (env_id, seed) in enumerate(units):
        try:
            cfg = load_run_config(
                spec.algo, EnvConfig(id=env_id, backend=spec.backend, env_module=spec.env_module), env_group(env_id),
                overrides=deep_merge(overrides, {"steps": spec.steps}), seed=seed, device=spec.device,
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

        run_dir = spec.study_dir / "trials" / f"{trial.number:04d}" / f"{_safe(env_id)}__s{seed}"
        try:
            state = train(cfg, run_dir, [report])
        except (optuna.TrialPruned, TrialFailed):
            raise
        except TrainingInterrupted:
            raise KeyboardInterrupt from None
        except Exception as e:  # a crash of one trial's training must not end the study
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise TrialFailed(f"{type(e).__name__}: {detail} ({env_id}, seed {seed})") from None
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
    from rlcli.benchmark.scores import normalization_for

    norm = normalization_for(env_id)
    assert norm is not None  # check_normalisable() ran before the study started
    return (float(mean_return) - norm.random) / (norm.reference - norm.random)


def check_normalisable(env_ids: tuple[str, ...]) -> None:
    """Several envs are scored by normalised return; each needs random and reference returns."""
    if len(env_ids) < 2:
        return
    from rlcli.benchmark.scores import normalization_for, normalizations

    missing = [e for e in env_ids if normalization_for(e) is None]
    if missing:
        raise UsageError(f"tuning several envs scores them by normalised return, and {', '.join(missing)} "
                         f"has no random/reference return in rlcli/data/normalization.csv; envs that have "
                         f"one: {', '.join(sorted(normalizations()))}")


def _safe(env_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", env_id)


def _canonical(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, sort_keys=True, default=str))


# ---------------------------------------------------------------------------------------------------
# Workers


def run_worker(spec: TuneSpec, worker: int = 0, on_change: Callable[[], None] | None = None) -> list[int]:
    """Runs trials until the study holds ``spec.trials`` (counting other workers' trials); returns the
    numbers of the trials this worker ran. Ctrl-C records the running trial as interrupted and re-raises."""
    import optuna
    from optuna.trial import TrialState

    storage = open_storage(spec.storage)
    study = open_study(spec, storage, worker)
    space = spec.search_space()
    ran: list[int] = []
    while True:
        _fail_lost_trials(study, storage)
        with _claim_lock(spec, storage):
            if counted_trials(study) >= spec.trials:
                return ran
            trial = study.ask()
            trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        ran.append(trial.number)
        if on_change is not None:
            on_change()
        with _heartbeat(storage, trial._trial_id):
            try:
                value = objective(trial, spec, space, on_change)
            except optuna.TrialPruned:
                study.tell(trial, state=TrialState.PRUNED)
            except TrialFailed as e:
                trial.set_user_attr("fail_reason", str(e))
                study.tell(trial, state=TrialState.FAIL)
            except KeyboardInterrupt:
                trial.set_user_attr("fail_reason", "interrupted")
                trial.set_user_attr("interrupted", True)
                study.tell(trial, state=TrialState.FAIL)
                raise
            else:
                study.tell(trial, value)
        if on_change is not None:
            on_change()


def run(spec: TuneSpec, on_change: Callable[[], None] | None = None, poll_s: float = 1.0) -> list[str]:
    """Runs the study with ``spec.jobs`` worker processes (in this process when 1); ``on_change`` is
    called as trials start, report and end (every ``poll_s`` seconds with worker processes). Returns a
    line per worker process that failed (its log's last line); Ctrl-C stops the workers, each recording
    its running trial as interrupted, and re-raises KeyboardInterrupt."""
    if spec.jobs == 1:
        run_worker(spec, 0, on_change)
        return []
    logs = spec.study_dir / "workers"
    logs.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")  # fork would copy torch's thread pools and locks
    processes = [context.Process(target=_worker_main, args=(spec.model_dump_json(), i, str(logs / f"worker-{i}.log")),
                                 name=f"rlcli-tune-worker-{i}") for i in range(spec.jobs)]
    for process in processes:
        process.start()
    try:
        while any(p.is_alive() for p in processes):
            if on_change is not None:
                on_change()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGINT)
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        raise
    for process in processes:
        process.join()
    failed = [(i, p.exitcode, logs / f"worker-{i}.log") for i, p in enumerate(processes) if p.exitcode != 0]
    return [f"worker {i} exited with {code}: {_last_line(log)} (log: {log})" for i, code, log in failed]


def _worker_main(spec_json: str, worker: int, log_path: str) -> None:
    """Entry point of a worker process: thread pools capped, output to its log file."""
    spec = TuneSpec.model_validate_json(spec_json)
    for name in THREAD_VARIABLES:
        os.environ[name] = str(spec.threads or 1)
    log = open(log_path, "a", buffering=1)  # noqa: SIM115  (open for the process's lifetime)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        ran = run_worker(spec, worker)
        print(f"worker {worker} ran trials {ran}")
    except KeyboardInterrupt:
        print(f"worker {worker} interrupted")
    except UsageError as e:
        print(f"error: {e}")
        sys.exit(2)


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
        if worker_host == host and pid.isdigit() and not _alive(int(pid)):
            storage.set_trial_user_attr(t._trial_id, "fail_reason", f"its worker (process {pid}) ended")
            storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            with contextlib.suppress(Exception):  # another worker may have recorded it first
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
