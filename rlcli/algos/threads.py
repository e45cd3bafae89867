"""Torch thread counts (how many cores there are, the plan a learner follows, switching between them) and the
CPU's handling of subnormal floats while training."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple, Protocol

import torch


class Threads(Protocol):
    """What a learner reads of its thread plan: a ``ThreadPlan``, or one that follows the machine's load."""

    @property
    def acting(self) -> int: ...

    @property
    def updating(self) -> int: ...

    @property
    def overlaps_env(self) -> bool: ...


class ThreadPlan(NamedTuple):
    """Torch intra-op threads while collecting experience and while updating."""

    acting: int
    updating: int

    @property
    def overlaps_env(self) -> bool:
        """Whether the learner works beside envpool's threads while they step (acting on one thread):
        a torch thread pool would spin beside them instead (Pong's rollout took 7-12% longer)."""
        return self.acting == 1


def update_shares_cores(rows: int, widest: int) -> bool:
    """Whether an MLP update of ``rows`` rows through layers at most ``widest`` wide is worth a second thread:
    at least 128 wide and 2^22 multiply-adds in its widest product. Forward, backward and Adam of a two-layer
    MLP on 2 cores, one thread against two (µs): 64 wide, 64 rows 317 against 353, 2,048 rows 1,240 against
    1,469; 256 wide, 64 rows 680 against 594, 512 rows 2,998 against 1,622. Below, a second thread gains
    nothing alone, and beside a busy process its spinning wait collapses the update (64 rows of 64: 317
    against 1,584 µs)."""
    return widest >= 128 and rows * widest * widest >= 2 ** 22


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
