"""Running statistics for observation normalisation and reward scaling.

State lives in module buffers, so it is saved in ``model.safetensors`` with the weights and restored
with them; evaluation uses the statistics frozen.

Several processes training one run (``rlcli.algos.world``) each see their own envs' data; their statistics
are pooled once per rollout (``pool_statistics``), so that every process holds what one process having
seen all of it would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor | float]  # mean, variance (biased), count


def merge_moments(mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor | float,
                  b_mean: torch.Tensor, b_var: torch.Tensor, b_count: torch.Tensor | float) -> Moments:
    """The mean, biased variance and count of two sets of samples from each one's (Chan et al.'s parallel
    update): exact, so merging in any order gives the moments of all the samples, up to rounding."""
    delta = b_mean - mean
    total = count + b_count
    m2 = var * count + b_var * b_count + delta.square() * count * b_count / total
    return mean + delta * b_count / total, m2 / total, total


class RunningMeanStd(nn.Module):
    """Mean and variance over every sample seen (Chan et al. parallel update)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        # with several processes: the statistics all of them agreed on last, and what this one saw since
        self._agreed: Moments | None = None
        self._seen: Moments | None = None

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        if batch.shape[0] == 0:
            return  # e.g. every row was a reset row: nothing new was seen
        batch = batch.double()
        b_mean, b_var, b_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        mean, var, total = merge_moments(self.mean, self.var, self.count, b_mean, b_var, b_count)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(total)
        if self._seen is not None:
            self._seen = merge_moments(*self._seen, b_mean, b_var, b_count)

    def share(self) -> None:
        """From now on also keeps apart what this process sees, for ``pool_statistics``; statistics loaded
        into the module (a checkpoint, another process's) are taken as agreed."""
        if self._seen is None:
            self.register_load_state_dict_post_hook(lambda module, keys: module._agree())
        self._agree()

    def _agree(self) -> None:
        self._agreed = (self.mean.clone(), self.var.clone(), self.count.clone())
        self._seen = (torch.zeros_like(self.mean), torch.zeros_like(self.var), torch.zeros_like(self.count))

    def seen(self) -> torch.Tensor:
        """What this process saw since the statistics were last agreed: mean, variance and count, flat."""
        assert self._seen is not None, "share() first"
        return torch.cat([t.reshape(-1) for t in self._seen])

    @torch.no_grad()
    def absorb(self, seen: Sequence[torch.Tensor]) -> None:
        """The agreed statistics merged with what each process saw (``seen()`` of each, in rank order)."""
        assert self._agreed is not None, "share() first"
        moments = self._agreed
        for flat in seen:
            mean, var, count = flat.split([self.mean.numel(), self.var.numel(), 1])
            moments = merge_moments(*moments, mean.view_as(self.mean), var.view_as(self.var), count.view(()))
        self.mean.copy_(moments[0])
        self.var.copy_(moments[1])
        self.count.copy_(moments[2])
        self._agree()


def pool_statistics(stats: Sequence[RunningMeanStd],
                    all_gather: Callable[[torch.Tensor], list[torch.Tensor]]) -> None:
    """Every process's statistics set to what one process having seen all their data would hold, with one
    gather of what each saw since they last agreed; ``all_gather`` returns one tensor per process, in rank
    order (every process then merges the same numbers in the same order, and agrees to the bit)."""
    if not stats:
        return
    sizes = [s.mean.numel() * 2 + 1 for s in stats]
    gathered = [flat.split(sizes) for flat in all_gather(torch.cat([s.seen() for s in stats]))]
    for i, s in enumerate(stats):
        s.absorb([parts[i] for parts in gathered])


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


class ValueNormalizer(nn.Module):
    """The critic learns standardised returns: its targets are (return - mean) / std by the running
    statistics of the value targets, and its outputs are mapped back before they meet rewards (rl_games'
    ``normalize_value``). Disabled, it holds no statistics, so runs without it save what they always did."""

    def __init__(self, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled
        self.rms = RunningMeanStd(()) if enabled else None

    def _moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.rms is not None, "a disabled ValueNormalizer has no statistics"
        return self.rms.mean.float(), torch.sqrt(self.rms.var + 1e-8).float()

    @torch.no_grad()
    def update(self, targets: torch.Tensor) -> None:
        if self.rms is not None:
            self.rms.update(targets.reshape(-1))

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        if self.rms is None:
            return values
        mean, std = self._moments()
        return (values - mean) / std

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        if self.rms is None:
            return values
        mean, std = self._moments()
        return values * std + mean
