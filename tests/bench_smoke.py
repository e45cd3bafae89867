"""scripts/bench_peers.py's smoke run (``--quick``), started once per test session.

The run is about two and a half minutes of worker processes that mostly use one core each, so the
session starts it as soon as the tests are collected and runs it beside the others; tests/conftest.py
puts its tests last, where they read its report (its figures are meaningless by design, so sharing the
machine costs it nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600  # from the start of the run
_run: tuple[subprocess.Popen, Path] | None = None


def start() -> tuple[subprocess.Popen, Path]:
    """The running (or finished) smoke run and the folder its JSON and markdown go to; started on first call."""
    global _run
    if _run is None:
        out = Path(tempfile.mkdtemp(prefix="rlcli-bench-"))
        # a session of its own, so that a timeout also ends the worker processes the script started
        proc = subprocess.Popen(
            [sys.executable, "scripts/bench_peers.py", "--quick", "--repeats", "1", "--cartpole-repeats", "1",
             "--json", str(out / "bench.json"), "--markdown", str(out / "bench.md")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        _run = (proc, out)
    return _run


def stop() -> None:
    """Ends a smoke run still going (a session cut short by -x or Ctrl-C)."""
    if _run is not None and _run[0].poll() is None:
        os.killpg(_run[0].pid, signal.SIGKILL)
        _run[0].communicate()
