"""The optimiser every agent uses: torch's Adam, with its learning rate held as a tensor."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adam(params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """``torch.optim.Adam`` as one fused kernel a step (CPU and CUDA), its learning rate a tensor so that a
    schedule changes a value, not a constant a compiled step was built with; on a GPU safe to capture in a
    CUDA graph (its step count stays on the device)."""
    params = list(params)
    device = params[0].device
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), eps=eps, fused=True,
                            capturable=device.type == "cuda")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Sets every group's learning rate in place (the tensor a compiled step reads)."""
    for group in optimizer.param_groups:
        group["lr"].fill_(lr)
