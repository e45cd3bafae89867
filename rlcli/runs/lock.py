"""One writer per run directory: an advisory lock that a training process holds for as long as it runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlcli.errors import UsageError
from rlcli.runs.folders import writable_folder

try:
    import fcntl
except ImportError:  # pragma: no cover -- not on Linux or macOS: no lock
    fcntl = None  # type: ignore[assignment]

LOCK = "train.lock"  # beside the checkpoint files it guards; it stays, naming the last holder


class RunLock:
    """The lock on a run directory, held through an open file: the system lets it go when the process ends,
    however it ends, so a killed run's lock is taken over by the next writer (its file names the last
    holder's pid, for the message a second writer gets)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        """The lock on ``run_dir`` (made if missing); a UsageError naming the holder's pid where another
        process trains the run."""
        if fcntl is None:
            return cls(None)
        writable_folder(run_dir, "--run-dir")
        fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        if not _take(fd):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"{run_dir} is being trained by process {holder}; wait for it to end or stop it "
                             "(two writers would overwrite each other's checkpoints)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

    @staticmethod
    def held(run_dir: Path) -> bool:
        """Whether a process trains ``run_dir`` now (asked without writing anything there)."""
        if fcntl is None or not (run_dir / LOCK).is_file():
            return False
        try:
            fd = os.open(run_dir / LOCK, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # lets a shared lock taken here go
        return False

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the file lets the lock go
            self.fd = None


def _take(fd: int) -> bool:
    """Takes the exclusive lock, trying for a quarter of a second: ``RunLock.held`` holds a shared one for an
    instant while another process asks whether the run is being trained."""
    assert fcntl is not None
    for wait in (0.05, 0.2, 0.0):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            time.sleep(wait)
    return False
