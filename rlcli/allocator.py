"""The C allocator's policy while training: memory a step frees is kept for the next step to reuse.

glibc's malloc serves a block above its mmap threshold (128 KiB at first, rising with what is freed) with
fresh pages, and gives the top of its heap back to the system once more than its trim threshold is free
there. A training step allocates and frees tensors of a few hundred KiB in every minibatch, so many came
back as new pages, each faulted in on its first write: 2,100-5,100 page faults an iteration of the
recurrent PPO on CartPoleNoVel-v1 (8 envs x 32 steps, 20 epochs), 76-82 ms an iteration against 70-75
without them. Both thresholds set (one alone stops the other's adjustment, and faulted 22,000 times an
iteration), blocks below 32 MiB come from the heap, and up to 256 MiB of it stays free before any is
returned. Allocation policy only: every computed value is the same.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20  # glibc's largest on a 64-bit system
TRIM_THRESHOLD = 256 << 20


def retain_freed_memory() -> bool:
    """Sets both thresholds for the rest of the process (glibc cannot go back to adjusting them); returns
    whether it could: False off Linux and where the C library has no ``mallopt`` (or a stub of it)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
