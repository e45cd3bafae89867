"""Torch thread counts (how many cores there are, the plan a learner follows, switching between them) and the
CPU's handling of subnormal floats while training."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch


class ThreadPlan(NamedTuple):
    """Torch intra-op threads while collecting experience and while updating."""

    acting: int
    updating: int

    @property
    def overlaps_env(self) -> bool:
        """Whether the learner works beside envpool's threads while they step (acting on one thread):
        a torch thread pool would spin beside them instead (Pong's rollout took 7-12% longer)."""
        return self.acting == 1


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Runs the block with ``n`` torch intra-op threads (None: unchanged), then restores the count."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def flush_subnormals(on: bool) -> None:
    """Subnormal floats read and written as zero on the CPU (``on``), or kept, from here on. The CPU's flag
    belongs to each thread: this one's, and that of every torch worker thread started after it, which copies
    it; so a process sets it before its first parallel operation and keeps it (worker threads started
    earlier keep theirs)."""
    torch.set_flush_denormal(on)
