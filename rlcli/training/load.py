"""The cores other processes keep busy, and the thread plan that leaves them theirs.

Torch's OpenMP threads wait for one another at every parallel region, spinning. Where another process holds
one of the cores, the thread on it runs only in that process's gaps and every region waits for it: CartPole
DQN's 256-wide update on two threads beside two busy processes made 9 env steps/s where one thread made 434.
So a run on rlcli's default threads reads, at most every half second as it acts and updates, how much of its
cores the rest of the machine used since the last reading (Linux's per-core counters, less this process's own
CPU time) and trains on the cores left, at least one. ``--threads N`` fixes the count instead.
"""

from __future__ import annotations

import os
import time

from rlcli.algos.threads import ThreadPlan

STAT = "/proc/stat"
MIN_WINDOW = 0.5  # seconds: readings closer together than this keep the last decision
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_ticks(text: str, cores: set[int]) -> int:
    """Clock ticks spent busy (user, nice, system, irq, softirq: not idle, iowait or steal) on ``cores``,
    summed from the per-core lines of a /proc/stat text."""
    total = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in rest.split()[:7])
        total += user + nice + system + irq + softirq
    return total


def cores_left(cores: int, others_busy: float) -> int:
    """The cores a process may use where others kept ``others_busy`` cores' worth busy: a core counts as
    taken from half a core's use up, and one always remains."""
    return max(1, cores - int(others_busy + 0.5))


class CoreLoad:
    """Readings of how busy other processes keep this process's cores."""

    def __init__(self, cores: set[int]) -> None:
        self.cores = cores
        self._last: tuple[float, int, float] | None = None
        self.others = 0.0  # cores' worth others used over the last window
        self.read()

    def read(self) -> bool:
        """Takes a reading; returns whether it closed a window (at least ``MIN_WINDOW`` since the last). Within
        a window it reads the clock alone: learners ask at every gradient step."""
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < MIN_WINDOW:
            return False
        try:
            with open(STAT) as f:
                ticks = busy_ticks(f.read(), self.cores)
        except OSError:
            return False
        own = sum(os.times()[:2])
        if self._last is not None:
            then, before, own_before = self._last
            busy = (ticks - before) / TICKS - (own - own_before)
            self.others = max(busy, 0.0) / (now - then)
        self._last = (now, ticks, own)
        return True


class LoadAwareThreads:
    """The algorithm's thread plan capped to the cores other processes left, as a learner's ``Threads``: each
    count read re-reads the load once ``MIN_WINDOW`` has passed, so a long iteration (an off-policy one of
    gradient steps) follows it too. Whether collecting overlaps the env's threads stays the plan's."""

    def __init__(self, plan: ThreadPlan) -> None:
        self.plan = plan
        self.load = CoreLoad(set(os.sched_getaffinity(0))) if os.path.exists(STAT) and hasattr(
            os, "sched_getaffinity") else None
        self.current = plan

    def _now(self) -> ThreadPlan:
        if self.load is not None and self.load.read():
            left = cores_left(len(self.load.cores), self.load.others)
            self.current = ThreadPlan(min(self.plan.acting, left), min(self.plan.updating, left))
        return self.current

    @property
    def acting(self) -> int:
        return self._now().acting

    @property
    def updating(self) -> int:
        return self._now().updating

    @property
    def overlaps_env(self) -> bool:
        return self.plan.overlaps_env
