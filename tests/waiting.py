"""Waiting on a command started by a test, without ever hanging the suite on it."""

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, timeout_s: float, poll_s: float = 0.2) -> None:
    """Polls ``condition`` until it holds. Fails the test with the command's output when the command
    ends first or ``timeout_s`` passes; it is killed then, and whenever the wait itself fails, since
    reading the output of a live one would block."""
    deadline = time.time() + timeout_s
    try:
        while not condition():
            if proc.poll() is not None or time.time() > deadline:
                break
            time.sleep(poll_s)
        else:
            return
    except BaseException:
        _kill(proc)
        raise
    ended = proc.poll() is not None
    if not ended:
        _kill(proc)
    why = f"exited with {proc.returncode}" if ended else f"still waiting after {timeout_s} s"
    try:
        output = proc.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        output = "(unreadable: a process it started still holds its output open)"
    pytest.fail(f"command {why}; its output:\n{output}")


def _kill(proc: subprocess.Popen) -> None:
    """Kills the command, with its process group when it leads one (a command started in its own
    session does); processes that made sessions of their own are the command's to stop."""
    if proc.poll() is not None:
        return
    if os.getpgid(proc.pid) == proc.pid:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
