"""The allocator policy training runs under: memory freed by one step is reused by the next, not faulted
in again page by page."""

from __future__ import annotations

import platform
import resource

import pytest
import torch

from rlcli.allocator import retain_freed_memory

PAGES = 64 * 512 // 4  # 64 blocks of 512 KiB in 4 KiB pages


def _churn() -> None:
    """What a minibatch step does at a larger scale: tensors of a few hundred KiB written, then freed."""
    blocks = [torch.ones(128 * 1024) for _ in range(64)]
    del blocks


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_blocks_are_reused_without_page_faults() -> None:
    # without the thresholds the second round faulted 8,162 times here: each block's pages came back fresh
    assert retain_freed_memory()
    _churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    _churn()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < PAGES // 8, f"{faults} page faults reallocating {PAGES} pages just freed"
