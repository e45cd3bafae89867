"""Waiting on a command started by a test, without ever hanging the suite on it."""

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, timeout_s: float, poll_s: float = 0.2) -> None:
    """Polls ``condition`` until it holds. Fails the test with the command's output when the command
    ends first or ``timeout_s`` passes; it is killed then (its process group when it leads one, as a
    command started in its own session does), since reading the output of a live one would block."""
    deadline = time.time() + timeout_s
    while not condition():
        if proc.poll() is not None or time.time() > deadline:
            ended = proc.poll() is not None
            if not ended:
                if os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            why = f"exited with {proc.returncode}" if ended else f"still waiting after {timeout_s} s"
            pytest.fail(f"command {why}; its output:\n{proc.communicate()[0]}")
        time.sleep(poll_s)
