"""Running statistics for observation normalisation and reward scaling.

State lives in module buffers, so it is saved in ``model.safetensors`` with the weights and restored
with them; evaluation uses the statistics frozen.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Mean and variance over every sample seen (Chan et al. parallel update)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        if batch.shape[0] == 0:
            return  # e.g. every row was a reset row: nothing new was seen
        batch = batch.double()
        b_mean, b_var, b_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta.square() * self.count * b_count / total
        self.mean.add_(delta * b_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObsNormalizer(nn.Module):
    """(obs - mean) / std, clipped; identity when disabled. ``raw_columns`` (of a flat observation) pass
    through as they are: an action mask's 0/1 entries, which the network reads as flags."""

    def __init__(self, shape: tuple[int, ...], enabled: bool, clip: float, raw_columns: Sequence[int] = ()) -> None:
        super().__init__()
        self.enabled, self.clip = enabled, clip
        self.rms = RunningMeanStd(shape)
        raw = None
        if raw_columns:
            raw = torch.zeros(shape, dtype=torch.bool)
            raw[list(raw_columns)] = True
        self.register_buffer("raw", raw, persistent=False)  # not saved: the env's layout gives it again

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        if not self.enabled:
            return obs
        if update:
            self.rms.update(obs)
        std = torch.sqrt(self.rms.var + 1e-8).float()
        normalized = ((obs - self.rms.mean.float()) / std).clamp(-self.clip, self.clip)
        return normalized if self.raw is None else torch.where(self.raw, obs, normalized)


class RewardScaler(nn.Module):
    """Divides rewards by the running std of the discounted return (as SB3's VecNormalize does);
    keeps the reward's sign and the optimum, makes the value targets' scale steady."""

    def __init__(self, num_envs: int, gamma: float, enabled: bool, clip: float = 10.0) -> None:
        super().__init__()
        self.enabled, self.gamma, self.clip = enabled, gamma, clip
        self.rms = RunningMeanStd(())
        self.returns = torch.zeros(num_envs, dtype=torch.float64)  # not saved: per-run state

    @torch.no_grad()
    def forward(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return rewards
        self.returns.mul_(self.gamma).add_(rewards)
        self.rms.update(self.returns)
        self.returns.masked_fill_(dones, 0.0)
        return (rewards / torch.sqrt(self.rms.var + 1e-8).float()).clamp(-self.clip, self.clip)
