"""Ctrl-C held back while a library call runs that an interrupt would leave half done."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def held(notice: Callable[[], None] | None = None) -> Iterator[None]:
    """Holds SIGINT for the duration and raises it after, through the handler that was in place; a
    second SIGINT while held goes through at once (a user who presses Ctrl-C again means it, and a
    call that hangs, such as a network flush, must still be escapable). ``notice`` is called when the
    first one is held (to say what it waits for).

    A KeyboardInterrupt can land between any two bytecodes, and some library calls do not survive it:
    one landing in ``threading.Condition.notify`` between releasing a waiter and removing it from the
    queue leaves a stale waiter that the next notify wakes in place of the real one, so TensorBoard's
    writer thread sleeps through its shutdown and closing the writer blocks for up to its flush
    interval (120 s); one inside Optuna's storage calls can leave a trial running with no worker to
    finish it. Nests; a no-op off the main thread (only it may set handlers) or with SIGINT ignored."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield
        return
    pending = passed = False

    def hold(signum: int, frame: Any) -> None:
        nonlocal pending, passed
        if isinstance(previous, IgnoredCtrlC) and not previous.terminated:
            return  # Ctrl-C stays ignored (a `kill -INT` too): nothing to finish for, nothing to say
        if not pending:
            pending = True
            if notice is not None:
                notice()
            return
        passed = True  # the previous handler takes over, and may itself change the handler
        signal.signal(signal.SIGINT, previous)
        signal.raise_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        if not passed:
            signal.signal(signal.SIGINT, previous)
            if pending:
                signal.raise_signal(signal.SIGINT)


@contextlib.contextmanager
def noted(notice: Callable[[], None] | None = None) -> Iterator[Callable[[], bool]]:
    """A first SIGINT noted, not raised, for the duration: the function yielded tells whether one came (one a
    ``held`` block inside held comes through here at its end). A later one raises KeyboardInterrupt at once.
    For a process of several training one run, which must stop where the others do: they agree first.
    ``notice`` is called at the first. A no-op off the main thread or with SIGINT ignored."""
    seen = False

    def note(signum: int, frame: Any) -> None:
        nonlocal seen
        if seen:
            raise KeyboardInterrupt
        seen = True
        if notice is not None:
            notice()

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield lambda: False
        return
    signal.signal(signal.SIGINT, note)
    try:
        yield lambda: seen
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def not_noted() -> Iterator[Callable[[], bool]]:
    """``noted``'s stand-in where SIGINT raises as usual: nothing is ever noted."""
    yield lambda: False


class IgnoredCtrlC:
    """SIG_IGN's stand-in for SIGINT while SIGTERM is handled as Ctrl-C in a process started with Ctrl-C
    ignored, so that ``held`` holds a SIGTERM too: a SIGINT that a SIGTERM passed on raises, any other is
    ignored."""

    def __init__(self) -> None:
        self.terminated = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.terminated:
            raise KeyboardInterrupt


@contextlib.contextmanager
def term_as_interrupt() -> Iterator[Callable[[], bool]]:
    """SIGTERM handled as Ctrl-C for the duration (a scheduler's or ``kill``'s stop saves as Ctrl-C does, and a
    second stops at once); yields whether one came. It holds in a process started with SIGINT ignored (a
    shell script's ``&``), where Ctrl-C stays ignored. A no-op off the main thread and in a supervised job
    (``rlcli.jobs.workers.JOB_VARIABLE``)."""
    seen = False
    ctrl_c_ignored = IgnoredCtrlC()

    def forward(signum: int, frame: Any) -> None:
        nonlocal seen
        seen = ctrl_c_ignored.terminated = True
        signal.raise_signal(signal.SIGINT)

    # a job of a supervisor (benchmark, tune) keeps SIGTERM's default: its supervisor turns stops into SIGINT
    # and sends SIGTERM only to end a job that did not stop
    if threading.current_thread() is not threading.main_thread() or os.environ.get("RLCLI_SUPERVISED"):
        yield lambda: False
        return
    previous, previous_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, forward)
    if previous_int == signal.SIG_IGN:
        signal.signal(signal.SIGINT, ctrl_c_ignored)
    try:
        yield lambda: seen
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
