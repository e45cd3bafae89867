"""The test session's layout on the cores: pyproject's addopts start one pytest-xdist worker a core (at most 4),
and each worker keeps to its own share of the cores. rlcli sizes torch's and envpool's threads to the cores a
process may use (rlcli/algos/threads.py), so a pinned worker trains as a one-core machine would; unpinned, two
workers would each start a pool of spinning OpenMP threads on the same two cores, 5-7x slower. Subprocesses
(the CLI, distributed ranks) inherit the worker's cores.

Workers take one test module at a time as they free up (``--dist loadfile``: a module's fixtures are built
once), the modules marked ``long`` first, so that their tails end together instead of one worker starting a
long module when the rest are done."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The modules of minutes, in one place, with about how many seconds each takes on the 2-core CI machine: marked
# ``long`` (``pytest -m "not long"`` leaves them out) and handed out first, the longest first. The learning tests
# that would not fit CI's budget at all (connect four, 8 minutes) are skipped unless RLCLI_LONG_TESTS is set.
LONG = {
    "training/selfplay/test_games_learning.py": 190,  # tic-tac-toe self-play against random and minimax
    "scripts/test_bench_peers.py": 210,  # every bench_peers section in its smoke mode
    "benchmark/test_benchmark.py": 100,  # grids of runs, their report, Ctrl-C and resume
    "test_learning.py": 220,  # CartPole (PPO, DQN, PQN), Pendulum (SAC, TD3), CartPoleNoVel to their scores
    "algos/test_distributed.py": 110,  # two processes: one update, learning, Ctrl-C, a lost process
}


def _pin_worker() -> None:
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return
    cores, index, workers = sorted(os.sched_getaffinity(0)), int(worker.removeprefix("gw")), int(count)
    if len(cores) < workers:  # fewer cores than workers (e.g. under taskset): they share what there is
        return
    share = len(cores) // workers
    os.sched_setaffinity(0, cores[index * share:(index + 1) * share])


_pin_worker()
# a session started in the background of a non-interactive shell inherits SIGINT ignored, and so would every
# training subprocess: the Ctrl-C tests then test nothing. Interrupts are what they test, so restore them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long(seconds): a module of minutes (about SECONDS on the 2-core CI "
                            "machine); handed out before the others, the longest first")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``LONG`` modules marked and put first, the longest first, so that no worker starts one when the rest
    are done."""

    def seconds(item: pytest.Item) -> float:
        return LONG.get(item.path.relative_to(TESTS).as_posix(), 0)

    for item in items:
        if seconds(item):
            item.add_marker(pytest.mark.long(seconds=seconds(item)))
    items.sort(key=lambda item: -seconds(item))  # stable: otherwise collection order
