"""The load other processes put on a run's cores, and the threads a default run then trains on."""

import os
import subprocess
import sys
import time

import pytest

from rlcli.algos.threads import ThreadPlan
from rlcli.training import load
from rlcli.training.load import CoreLoad, LoadAwareThreads, busy_ticks, cores_left

STAT = """cpu  100 1 50 900 7 3 2 11 0 0
cpu0 40 1 20 400 3 1 1 5 0 0
cpu1 60 0 30 500 4 2 1 6 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_ticks_sum_user_nice_system_irq_softirq_of_the_cores_named():
    assert busy_ticks(STAT, {0}) == 40 + 1 + 20 + 1 + 1
    assert busy_ticks(STAT, {1}) == 60 + 0 + 30 + 2 + 1
    assert busy_ticks(STAT, {0, 1}) == 63 + 93  # the per-core lines, never the "cpu" total as well
    assert busy_ticks(STAT, {5}) == 0


def test_a_core_counts_as_taken_from_half_a_core_of_others_use_and_one_always_remains():
    assert cores_left(2, 0.0) == 2
    assert cores_left(2, 0.49) == 2
    assert cores_left(2, 0.5) == 1
    assert cores_left(2, 1.2) == 1
    assert cores_left(2, 2.0) == 1
    assert cores_left(8, 2.6) == 5


def test_the_plan_is_capped_to_the_cores_left_and_returns_when_they_free(monkeypatch, tmp_path):
    stat, clock, own = tmp_path / "stat", [0.0], [0.0]
    ticks = [0]

    def write() -> None:  # two cores; every busy tick on core 0
        zeros = " 0" * 9
        stat.write_text(f"cpu  {ticks[0]}{zeros}\ncpu0 {ticks[0]}{zeros}\ncpu1 0{zeros}\n")

    write()
    monkeypatch.setattr(load, "STAT", str(stat))
    monkeypatch.setattr(load, "TICKS", 100)
    monkeypatch.setattr(load.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(load.os, "times", lambda: (own[0], 0.0, 0.0, 0.0, 0.0))
    monkeypatch.setattr(load.os, "sched_getaffinity", lambda pid: {0, 1})
    threads = LoadAwareThreads(ThreadPlan(2, 2))
    assert (threads.acting, threads.updating) == (2, 2)  # no window closed yet: the plan itself
    # one second in which the cores were busy 1.8 s, 0.9 s of it this process's: others held 0.9 of a core
    clock[0], ticks[0], own[0] = 1.0, 180, 0.9
    write()
    assert threads.updating == 1 and threads.acting == 1
    assert threads.load is not None and threads.load.others == pytest.approx(0.9)
    # a reading within MIN_WINDOW keeps the decision, whatever it would read
    clock[0], ticks[0], own[0] = 1.2, 180, 1.1
    write()
    assert threads.updating == 1
    # the next second: busy 1.0 s, all of it this process's
    clock[0], ticks[0], own[0] = 2.2, 280, 2.1
    write()
    assert (threads.updating, threads.acting) == (2, 2)
    # a plan below the cores left is kept as it is, and whether collecting overlaps the env is the plan's
    one = LoadAwareThreads(ThreadPlan(1, 2))
    clock[0], ticks[0], own[0] = 3.2, 380, 3.1
    write()
    assert (one.acting, one.updating, one.overlaps_env) == (1, 2, True)
    assert threads.overlaps_env is False


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's per-core counters")
def test_a_busy_process_on_the_same_cores_reads_as_others_load():
    reading = CoreLoad(set(os.sched_getaffinity(0)))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # inherits this process's cores
    try:
        time.sleep(0.3)  # its start-up
        reading.read()
        time.sleep(1.0)
        assert reading.read()
    finally:
        busy.kill()
        busy.wait()
    # one spinning process: about a core's worth, less what the kernel gave anything else in that second
    assert 0.6 <= reading.others <= len(reading.cores) + 0.1, reading.others
