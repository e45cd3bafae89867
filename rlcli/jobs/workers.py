"""One supervisor for the processes that ``rlcli tune`` and ``rlcli benchmark`` start: each job a command line
with a cap on its threads and a file for its output; Ctrl-C passed on to the jobs with escalation; each
job's output of this attempt (and its last line) handed back when it ends.

A job runs in a session of its own, so that a Ctrl-C at the terminal (sent to the whole foreground process
group) reaches only the supervising process, which passes one SIGINT on to each running job: it saves what
it must and exits. Each further Ctrl-C while they stop escalates, to SIGTERM, then SIGKILL. SIGTERM and
SIGHUP (a closed terminal or SSH session) stop the jobs as Ctrl-C does, instead of leaving them training on.

Jobs are command lines only, a Python function included (``python -m module``): a process started by
exec is in its own session, with its thread caps in its environment and its output in its file, from its
first instruction, where one spawned by multiprocessing imports the parent's main module before it can
do any of that, and needed its SIGINT ignored, a stop flag and a patched ``os.environ`` to get through.

The other side, for a job's own process: ``interrupt_once`` and ``interrupt_when_parent_ends``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from rlcli.jobs import interrupts

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# what a running job is sent at the first, second and later Ctrl-C
ESCALATION = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
POLL_S = 0.1  # seconds between looks at the running jobs


class Job(NamedTuple):
    """A command line to run in a process of its own."""

    name: str  # how the caller knows it again
    command: tuple[str, ...]
    threads: int  # cap of each OpenMP / MKL / OpenBLAS pool (torch sizes its own from OMP_NUM_THREADS)
    log: Path | None = None  # its output is appended here; None: to a temporary file
    header: str = ""  # written into the log just before it starts
    # written to its stdin, which then stays open as long as the supervisor lives (see interrupt_when_parent_ends);
    # None: stdin is /dev/null
    stdin: bytes | None = None


class Ended(NamedTuple):
    """How a job ended."""

    job: Job
    returncode: int | None  # negative: killed by that signal; None: it could not start (see ``error``)
    output: str  # what it wrote in this attempt (the log's earlier attempts left out)
    seconds: float  # wall-clock, process start-up included
    stopping: bool  # it ended while the supervisor was stopping the jobs
    error: str | None = None  # why it could not start

    @property
    def last_line(self) -> str | None:
        return last_line(self.output)


class Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP during ``supervise``, raised once every running job has ended;
    ``ended`` holds the jobs that ended, in that order, the stopped ones included."""

    def __init__(self, ended: list[Ended]) -> None:
        super().__init__()
        self.ended = ended


class StopLevel:
    """How far a supervisor that cannot signal a job itself (a Ray driver) has got in stopping it, for the
    job's side to poll (``run_until_stopped``): 0 run on, 1 SIGINT (save and stop), 2 SIGTERM, 3 SIGKILL."""

    def __init__(self) -> None:
        self.level = 0

    def raise_to(self, level: int) -> None:
        self.level = max(self.level, level)

    def get(self) -> int:
        return self.level


def last_line(output: str) -> str | None:
    """The last non-blank line of a process's output (a traceback's exception, or rlcli's ``error:``)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:500] if lines else None


JOB_VARIABLE = "RLCLI_SUPERVISED"


def job_environment(threads: int) -> dict[str, str]:
    """This process's environment with thread pools capped at ``threads`` and unbuffered output."""
    env = dict(os.environ)
    env.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    env["PYTHONUNBUFFERED"] = "1"
    env[JOB_VARIABLE] = "1"  # the job leaves SIGTERM's default: the supervisor sends it to end a stuck job
    return env


# ---------------------------------------------------------------------------------------------------
# The supervisor's side


class _Running(NamedTuple):
    job: Job
    process: subprocess.Popen
    output: IO[bytes]
    offset: int  # where this attempt's output starts in ``output``
    start: float


def _start(job: Job, own_session: bool = True, preexec: Callable[[], None] | None = None) -> _Running:
    if job.log is not None:
        job.log.parent.mkdir(parents=True, exist_ok=True)
    output = open(job.log, "a+b") if job.log is not None else tempfile.TemporaryFile()  # noqa: SIM115  (closed in _finish)
    try:
        output.write(job.header.encode())
        output.flush()
        offset = output.tell()
        start = time.monotonic()
        process = subprocess.Popen(job.command, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL if job.stdin is None else subprocess.PIPE,
                                   env=job_environment(job.threads), start_new_session=own_session,
                                   preexec_fn=preexec)
    except BaseException:
        output.close()
        raise
    if process.stdin is not None:
        with contextlib.suppress(BrokenPipeError):  # it ended at once; its output says why
            process.stdin.write(job.stdin or b"")
            process.stdin.flush()
    return _Running(job, process, output, offset, start)


def _finish(running: _Running, stopping: bool) -> Ended:
    returncode = running.process.wait()
    if running.process.stdin is not None:
        with contextlib.suppress(OSError):
            running.process.stdin.close()
    with running.output:
        running.output.seek(running.offset)
        output = running.output.read().decode(errors="replace")
    return Ended(running.job, returncode, output, time.monotonic() - running.start, stopping)


def supervise(jobs: Iterable[Job], at_once: int, on_start: Callable[[Job, int], None] | None = None,
              on_end: Callable[[Ended], None] | None = None, on_tick: Callable[[], None] | None = None,
              tick_s: float = 1.0, on_stop: Callable[[signal.Signals, int], None] | None = None,
              patience_s: float | None = None) -> list[Ended]:
    """Runs ``jobs``, ``at_once`` at a time, each taken from the iterable when a slot is free; returns how
    each ended, in that order. A job that cannot start ends with its error, and the others run on.
    Called in this thread: ``on_start(job, pid)``, ``on_end(ended)`` (with Ctrl-C held until it returns),
    ``on_tick()`` every ``tick_s`` seconds, ``on_stop(signal, running)`` as the running jobs are sent a
    stop signal. On Ctrl-C, SIGTERM or SIGHUP no job starts any more, the running ones get SIGINT, each
    further Ctrl-C (or, with ``patience_s``, that many seconds) escalates; Stopped is raised once they
    have all ended."""
    pending = iter(jobs)
    running: list[_Running] = []
    ended: list[Ended] = []

    def end(done: Ended) -> None:
        ended.append(done)
        if on_end is not None:
            with interrupts.held():
                on_end(done)

    with stop_signals_interrupt():
        try:
            exhausted, next_tick = False, time.monotonic()
            while not exhausted or running:
                while not exhausted and len(running) < at_once:
                    with interrupts.held():  # a job half started (or half recorded as started) would escape a stop
                        job = next(pending, None)
                        if job is None:
                            exhausted = True
                            break
                        try:
                            running.append(_start(job))
                        except Exception as e:  # an OSError starting the process, a full disk: this job fails, not all
                            end(Ended(job, None, "", 0.0, False, f"{type(e).__name__}: {e}"))
                            continue
                        if on_start is not None:
                            on_start(job, running[-1].process.pid)
                for done in [r for r in running if r.process.poll() is not None]:
                    running.remove(done)
                    end(_finish(done, stopping=False))
                if on_tick is not None and time.monotonic() >= next_tick:
                    on_tick()
                    next_tick = time.monotonic() + tick_s
                time.sleep(POLL_S if running else 0)
        except KeyboardInterrupt:
            _stop(running, end, on_stop, patience_s)
            raise Stopped(ended) from None
        except BaseException:  # a callback's error must not leave the jobs running unsupervised
            _stop(running, end, on_stop, patience_s)
            raise
    return ended


def _stop(running: list[_Running], end: Callable[[Ended], None],
          on_stop: Callable[[signal.Signals, int], None] | None, patience_s: float | None) -> None:
    """Sends the running jobs SIGINT and waits for them; each further KeyboardInterrupt, or ``patience_s``
    seconds without an end, sends the next signal of ESCALATION."""
    level = 0

    def send() -> None:
        for r in running:
            with contextlib.suppress(ProcessLookupError):
                r.process.send_signal(ESCALATION[level])
        if on_stop is not None:
            on_stop(ESCALATION[level], len(running))

    send()
    since = time.monotonic()
    while running:
        try:
            for done in [r for r in running if r.process.poll() is not None]:
                running.remove(done)
                end(_finish(done, stopping=True))
            if running and patience_s is not None and time.monotonic() - since > patience_s:
                raise KeyboardInterrupt
            time.sleep(POLL_S)
        except KeyboardInterrupt:
            level = min(level + 1, len(ESCALATION) - 1)
            send()
            since = time.monotonic()


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP passed on as SIGINT for the duration, so that they stop the jobs as Ctrl-C does
    (and, like it, wait while a job's end is recorded). SIGINT, where it was ignored (a job started with
    ``&`` from a script), is handled again: the jobs inherit its disposition and must be able to receive
    the SIGINT that stops them with a checkpoint. Only the main thread may set signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def as_interrupt(signum: int, frame: object) -> None:
        signal.raise_signal(signal.SIGINT)

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, *STOP_SIGNALS)}
    for signum in STOP_SIGNALS:
        signal.signal(signum, as_interrupt)
    if previous[signal.SIGINT] == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_until_stopped(job: Job, stop_level: Callable[[], int], poll_s: float = 0.5) -> Ended:
    """Runs ``job`` to its end where its supervisor cannot signal it (in a Ray task), sending it the
    signal of each new ``stop_level()`` (see StopLevel)."""
    running = _start(job, own_session=False, preexec=_hear_sigint_and_end_with_parent)
    sent = 0
    while running.process.poll() is None:
        level = min(stop_level(), len(ESCALATION))
        if level > sent:
            running.process.send_signal(ESCALATION[level - 1])
            sent = level
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.process.wait(timeout=poll_s)
    return _finish(running, stopping=sent > 0)


def _hear_sigint_and_end_with_parent() -> None:  # pragma: no cover  (runs in the child between fork and exec)
    """The job must be able to receive the SIGINT that stops it with a checkpoint: Ray's workers block
    SIGINT, and a blocked or ignored signal stays so across exec. On Linux it also gets SIGTERM when the
    thread that started it ends (a killed Ray worker would otherwise leave it running alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------------
# The job's side


def interrupt_once() -> None:
    """From now on the first SIGINT raises KeyboardInterrupt and later ones are ignored, since they would
    land in the checkpoint save or the storage write that the first one started."""
    signal.signal(signal.SIGINT, _interrupt_once)


def _interrupt_once(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def interrupt_when_parent_ends() -> None:
    """For a job given ``stdin`` data, once it has read it: a SIGINT to itself when the supervisor's end of
    that pipe closes, since in a session of its own it would run on alone after its supervisor was killed
    or hung up on. Reads the file descriptor itself: a daemon thread blocked inside ``sys.stdin`` could
    hold its lock while the interpreter shuts down."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 65536):
                pass
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="rlcli-parent-watch", daemon=True).start()
