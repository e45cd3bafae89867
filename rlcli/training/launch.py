"""Starting a run's processes on this machine with torch's own elastic launcher (``torch.distributed.run``,
what the ``torchrun`` command runs), from this process, and reading how they ended.

The launcher starts each process in a session of its own, so a Ctrl-C at the terminal reaches the launcher
alone, which passes it on to every process (they agree to stop, and the lead saves one checkpoint) and waits
for them (30 s, then SIGKILL); a second Ctrl-C makes it send SIGTERM. When a process ends with an error, the
launcher stops the others and reports every process that ended: ``Outcome`` names the one that ended first of
its own accord.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any, NamedTuple

from rlcli.algos.threads import available_cores

PEER_LOST_EXIT = 75  # what a process exits with when another one ended first
LAUNCHED = "RLCLI_LAUNCHED"  # set for the processes started here: the launcher names a failed one, they need not
# The rendezvous heartbeat tells other machines that this one lives; on one machine nobody reads it, and its
# thread, holding the rendezvous while it beats, can drop the last reference to it as the launcher ends: the
# rendezvous's finalizer then joins the thread from itself ("cannot join current thread", a traceback at exit).
# Beating once a year, it never beats in a run.
HEARTBEAT_S = 365 * 24 * 3600


class Outcome(NamedTuple):
    """How a launch ended: its exit ``code`` (0, 130 interrupted), and where a process failed, which (``rank``)
    and how (``failure``: "was killed by SIGKILL", "exited with code 3"); None where none did, or where the
    failed one was the lead reporting its own error (exit code 1 or 2)."""

    code: int
    rank: int | None = None
    failure: str | None = None


def without_option(argv: list[str], name: str) -> list[str]:
    """``argv`` without the option ``name`` and its value (``--name N`` or ``--name=N``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(f"{name}="):
            out.append(arg)
    return out


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (unless already set) for the duration: the launcher passes it on."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def launch(nproc: int, argv: list[str]) -> Outcome:
    """Runs ``python -m rlcli ARGV`` as ``nproc`` processes of one run on this machine (torchrun's
    ``--standalone``: a rendezvous on a free local port) and waits for them; returns how they ended."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # its notes on its own progress are not the user's concern (each of its loggers sets its own level)
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    args = parse_args(["--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc), "--max-restarts", "0",
                       "--rdzv-conf", f"keep_alive_interval={HEARTBEAT_S}", "-m", "rlcli", *argv])
    # each process sizes its torch threads to its share of the cores; this caps the libraries' own pools
    threads = str(max(min(available_cores(), 16) // nproc, 1))
    with _environment({LAUNCHED: "1", "OMP_NUM_THREADS": threads}):
        try:
            run(args)
        except SignalException as e:
            return Outcome(130 if e.sigval == signal.SIGINT else 128 + int(e.sigval))
        except ChildFailedError as e:
            return failed(e.failures)
    return Outcome(0)


def failed(failures: dict[int, Any]) -> Outcome:
    """The Outcome of processes that failed (torch's ProcessFailure by rank): the first that ended of its own
    accord, not one the launcher stopped (SIGTERM) or one that ended because another had."""
    def blame(item: tuple[int, Any]) -> tuple[bool, int, int]:
        rank, failure = item
        return failure.exitcode in (PEER_LOST_EXIT, -signal.SIGTERM), failure.timestamp, rank

    rank, failure = min(failures.items(), key=blame)
    code = failure.exitcode
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return Outcome(1, rank, f"was killed by {name}")
    if rank == 0 and code in (1, 2):
        return Outcome(code)  # the lead said what went wrong
    return Outcome(1, rank, f"exited with code {code}")
