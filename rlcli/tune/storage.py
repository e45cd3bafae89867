"""Where a study is kept: an Optuna RDB storage (SQLite by default, any database URL for several machines),
the lock that makes claiming a trial atomic across workers, the heartbeats of running trials, and the
clean-up of trials whose worker is gone."""

from __future__ import annotations

import contextlib
import fcntl
import re
import socket
import threading
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlcli.errors import UsageError
from rlcli.jobs.processes import alive

HEARTBEAT_S = 20  # seconds between a running trial's heartbeats in the storage
GRACE_S = 90  # a running trial without a heartbeat for this long is recorded as interrupted


class StorageLost(UsageError):
    """The study's storage failed while a trial was being recorded."""


def redact(url: str) -> str:
    """A storage URL without its password."""
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url)


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


def quiet_optuna() -> None:
    """Optuna's per-trial log lines and experimental-feature warnings would garble the display."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # workers run trials with ask/tell (to claim them under a lock) and keep the heartbeat themselves
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def describe_error(error: BaseException) -> str:
    """``Type: first line of the message``, of the database's error where Optuna wraps one."""
    from optuna.exceptions import StorageInternalError

    if isinstance(error, StorageInternalError) and error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


@contextlib.contextmanager
def claim_lock(url: str, study_name: str, storage: Any) -> Iterator[None]:
    """Makes counting the study's trials and creating a new one atomic across workers."""
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

        key = zlib.crc32(f"rlcli-tune:{study_name}".encode())
        with storage.engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
    else:  # other databases: two workers finishing at the same moment may overshoot by a trial
        yield


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int) -> Iterator[None]:
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


def fail_lost_trials(study: Any, storage: Any) -> None:
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

