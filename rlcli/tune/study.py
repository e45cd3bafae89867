"""Tuning studies: the study in its storage (created, or continued with the same settings), its sampler and
pruner, and the workers that run its trials, in this process or as processes of the shared supervisor.

A study lives in an Optuna storage: an SQLite file in the study directory by default, or any database URL
(``--storage postgresql://...``), in which case several ``rlcli tune`` processes on several machines work on
one study. Every worker claims a trial only while the study has fewer than ``trials`` (counting those
running elsewhere), under a lock (a file lock for SQLite, an advisory lock for PostgreSQL), so that
workers that finish at the same moment do not overshoot the target. Re-running the same command continues
the study: the target is the study's total, and trials whose worker died are recorded as interrupted and
not counted.

A trial trains one run per env and seed (``seeds_per_trial``) in ``STUDY_DIR/trials/NNNN/`` (see
``rlcli.tune.objective``). A trial that diverges (non-finite losses or returns) or crashes is recorded as
failed with its reason in the ``fail_reason`` user attribute, and the study goes on.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from rlcli.config import flatten
from rlcli.errors import UsageError
from rlcli.jobs import interrupts, workers
from rlcli.tune.objective import TrialFailed, objective
from rlcli.tune.spec import PRUNERS, SAMPLERS, TuneSpec
from rlcli.tune.storage import (
    GRACE_S,
    StorageLost,
    claim_lock,
    describe_error,
    fail_lost_trials,
    heartbeat,
    open_storage,
    redact,
)

NOTE = "note: "  # a worker log line that the command line shows
PATIENCE_S = 30  # seconds a stopping worker gets to record its trial before the next signal
WORKER_MODULE = "rlcli.tune.worker"  # a worker process's entry point (python -m)


class TrialRow(NamedTuple):
    """A trial as the display and summary show it."""

    number: int
    state: str  # running, complete, pruned, fail, waiting
    value: float | None  # the objective, or the last reported evaluation of a pruned/running trial
    best: float | None  # best objective of the complete trials up to this one
    hyperparams: dict[str, Any]  # flat: {"network.hidden": [64, 64], ...}
    reason: str | None  # why it failed or was pruned
    step: int | None  # the last reported evaluation index


class RunOutcome(NamedTuple):
    """What ``run`` hands back to the command line."""

    notes: list[str]  # lines worth showing, such as a trial another worker recorded while it ran
    failures: list[str]  # a line per worker process that failed (its log's last line)


# ---------------------------------------------------------------------------------------------------
# Study


def open_study(spec: TuneSpec, storage: Any = None, worker: int = 0) -> Any:
    """The spec's study, created or continued; a UsageError when the stored study was run with other
    settings (its trials' values would not compare with the new ones)."""
    import optuna

    storage = storage if storage is not None else open_storage(spec.storage)
    study = optuna.create_study(storage=storage, study_name=spec.study_name, direction="maximize",
                                sampler=make_sampler(spec, worker), pruner=make_pruner(spec), load_if_exists=True)
    held = len(study.get_trials(deepcopy=False))
    if held:
        study.sampler = make_sampler(spec, worker, held)
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


def make_sampler(spec: TuneSpec, worker: int = 0, held: int = 0) -> Any:
    """The spec's sampler; each worker gets its own seed so that parallel workers do not draw the
    same random startup trials, and a study continued when it held ``held`` trials another still, so that
    it does not draw its first run's parameters again."""
    import optuna

    seed = (spec.seed + 1000 * worker + 1_000_003 * held) % 2**32
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


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


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


# ---------------------------------------------------------------------------------------------------
# Workers


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
        fail_lost_trials(study, storage)
        trial = None
        try:
            with interrupts.held(), claim_lock(spec.storage, spec.study_name, storage):
                if counted_trials(study) >= spec.trials:
                    return ran
                trial = study.ask()
                trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
            ran.append(trial.number)
            if on_change is not None:
                on_change()
            with heartbeat(storage, trial._trial_id):
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


def run(spec: TuneSpec, on_change: Callable[[], None] | None = None, poll_s: float = 1.0) -> RunOutcome:
    """Runs the study with ``spec.jobs`` worker processes (in this process when 1); ``on_change`` is
    called as trials start, report and end (every ``poll_s`` seconds with worker processes). Ctrl-C
    stops the workers, each recording its running trial as interrupted, and re-raises KeyboardInterrupt
    (workers.Stopped with worker processes)."""
    if spec.jobs == 1:
        notes: list[str] = []
        run_worker(spec, 0, on_change, notes.append)
        return RunOutcome(notes, [])
    directory = spec.study_dir / "workers"
    # the spec travels on stdin, not the command line, which other users of the machine can read (a
    # storage URL may hold a password); stdin then stays open as the worker's sign that this process lives
    jobs = [workers.Job(f"worker {i}", (sys.executable, "-m", WORKER_MODULE, str(i)), spec.threads or 1,
                        directory / f"worker-{i}.log", stdin=spec.model_dump_json().encode() + b"\n")
            for i in range(spec.jobs)]
    ended = workers.supervise(jobs, spec.jobs, on_tick=on_change, tick_s=poll_s, patience_s=PATIENCE_S)
    notes = [line.removeprefix(NOTE) for end in ended for line in end.output.splitlines() if line.startswith(NOTE)]
    failures = [f"{end.job.name} exited with {end.returncode}: {end.last_line or '(empty log)'} (log: {end.job.log})"
                if end.returncode is not None else f"{end.job.name} could not start: {end.error}"
                for end in ended if end.returncode != 0]
    return RunOutcome(notes, failures)
