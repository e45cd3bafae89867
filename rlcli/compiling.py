"""The compile switch: which functions ``torch.compile`` builds, and when ``auto`` turns it on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from rlcli.config import Compile

F = TypeVar("F", bound=Callable)


def compile_enabled(mode: Compile, device: torch.device) -> bool:
    """Whether a run compiles its acting and update steps. ``auto``: on a GPU, where compiled steps with
    CUDA graphs remove the launch overhead that bounds small networks' updates; off on a CPU, where a
    run pays 15-60 s of compiling for a few percent per step (docs/speed.md's table)."""
    if mode == "auto":
        return device.type == "cuda"
    return mode == "on"


def compiled(fn: F, mode: Compile, device: torch.device, graphs: bool = True,
             rows_vary: bool = False) -> F:
    """``fn`` through ``torch.compile`` where ``compile_enabled``, else ``fn`` itself. On a GPU, with
    ``graphs``, the compiled graphs are replayed as CUDA graphs (``reduce-overhead``): for steps whose
    outputs the caller consumes before the next call, since a replay reuses their memory. ``rows_vary``:
    the inputs' row counts change from call to call (an update's last minibatch, where reset rows were
    left out), so the graphs are built for any count at once instead of again at the first change."""
    if not compile_enabled(mode, device):
        return fn
    cuda_graphs = graphs and device.type == "cuda"
    return torch.compile(fn, mode="reduce-overhead" if cuda_graphs else None,  # type: ignore[return-value]
                         dynamic=True if rows_vary else None)
