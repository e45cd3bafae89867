"""The optimiser every agent uses: torch's Adam, with its learning rate held as a tensor.

Agents build theirs on first use (``functools.cached_property``): constructing a torch optimiser imports
torch's compiler stack (TorchDynamo, about 1.5 s here), which a command that only acts (eval, play,
the zoo) never needs."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

import torch
from torch import nn


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


class ActorCriticOptimizers:
    """The actor's and the critics' optimisers of an actor-critic agent (SAC, TD3), built on first use from
    its ``actor``, ``critic`` and ``cfg`` (an ``ActorCriticReplayConfig``: ``actor_lr``, ``critic_lr``)."""

    actor: nn.Module
    critic: nn.Module

    @cached_property
    def actor_optimizer(self) -> torch.optim.Adam:
        """Adam over the actor's parameters."""
        return adam(self.actor.parameters(), lr=self.cfg.actor_lr)  # type: ignore[attr-defined]

    @cached_property
    def critic_optimizer(self) -> torch.optim.Adam:
        """Adam over the critics' parameters (the targets are not learnt)."""
        return adam(self.critic.parameters(), lr=self.cfg.critic_lr)  # type: ignore[attr-defined]
