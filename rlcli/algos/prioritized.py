"""Prioritised experience replay (Schaul et al. 2016, proportional variant): rows drawn with probability
proportional to ``(|TD error| + eps) ** alpha`` through a two-level sum tree, a few tensor operations for a
whole batch; importance-sampling weights ``(N P(i)) ** -beta`` over the batch's largest,
``beta`` rising from ``beta_start`` to 1 over the run; new rows get the largest priority seen so far."""

from __future__ import annotations

import math

import torch

from rlcli.algos.buffers import ReplayBatch, ReplayBuffer

PRIORITIES = "priorities"  # the metric an agent's update returns its rows' new priorities (|TD error|) under


class SumTree:
    """Leaf values in blocks of about sqrt(capacity), with each block's sum: the total is their sum, and a
    mass in [0, total) leads to its block through the blocks' running sums and to its leaf through that
    block's. Two levels, so a batch's search or update is a handful of tensor operations whatever the
    capacity (a binary tree takes a few per level, 20 levels for a million rows). float64, so that a million
    priorities sum without losing the small ones."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.block = max(math.isqrt(max(capacity - 1, 0)) + 1, 1)
        self.blocks = -(-capacity // self.block)
        self.leaves = torch.zeros(self.blocks * self.block, dtype=torch.float64, device=device)
        self.sums = torch.zeros(self.blocks, dtype=torch.float64, device=device)

    def set(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Leaves ``index`` take ``values``, and their blocks' sums follow."""
        self.leaves[index] = values.to(torch.float64)
        touched = index // self.block
        self.sums[touched] = self.leaves.view(self.blocks, self.block)[touched].sum(-1)

    def set_run(self, start: int, values: torch.Tensor) -> None:
        """Leaves ``start`` to ``start + len(values)`` (within the tree) take ``values``: ``set`` over a run of
        places, as slices (a replay's append: half the time of an index for one row a step)."""
        end = start + values.shape[0]
        self.leaves[start:end] = values
        first, last = start // self.block, (end - 1) // self.block
        self.sums[first:last + 1] = self.leaves.view(self.blocks, self.block)[first:last + 1].sum(-1)

    def get(self, index: torch.Tensor) -> torch.Tensor:
        return self.leaves[index]

    def total(self) -> torch.Tensor:
        return self.sums.sum()

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """The leaf each of ``mass`` (in [0, total)) falls in."""
        mass = mass.to(torch.float64)
        running = self.sums.cumsum(0)
        block = torch.searchsorted(running, mass, right=True).clamp_(max=self.blocks - 1)
        within = mass - (running[block] - self.sums[block])
        inner = self.leaves.view(self.blocks, self.block)[block].cumsum(-1)
        leaf = torch.searchsorted(inner, within.unsqueeze(-1), right=True).squeeze(-1).clamp_(max=self.block - 1)
        return block * self.block + leaf


class Priorities:
    """The priorities of a buffer's places: the sum tree, the largest priority so far (a tensor, read without
    a sync), the stratified draw with its importance weights, and the update from a batch's |TD errors|."""

    def __init__(self, places: int, device: torch.device, alpha: float, beta_start: float, eps: float) -> None:
        self.alpha, self.beta_start, self.eps = alpha, beta_start, eps
        self.tree = SumTree(places, device)
        self._set_max_priority(torch.ones((), dtype=torch.float64, device=device))

    def new_priority(self, n: int) -> torch.Tensor:
        """[n]: what a new transition's place takes, the largest priority so far."""
        return self._newest.expand(n)

    def _set_max_priority(self, value: torch.Tensor) -> None:
        """The largest priority so far, and what a new place takes, computed once here rather than at each add."""
        self.max_priority = value
        self._newest = value.pow(self.alpha)

    def draw(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified: one place from each of ``batch_size`` equal slices of the total priority, and the
        total. A place may be empty where rounding put a slice's mass on a boundary: the caller maps it onto
        one it holds."""
        total = self.tree.total()
        device = total.device
        strata = torch.arange(batch_size, device=device, dtype=torch.float64)
        mass = (strata + torch.rand(batch_size, device=device, dtype=torch.float64)) * (total / batch_size)
        return self.tree.find(mass), total

    def weights(self, index: torch.Tensor, total: torch.Tensor, progress: float, stored: int) -> torch.Tensor:
        """Importance weights ``(N P(i)) ** -beta`` over the batch's largest (``stored``: N); beta rises from
        ``beta_start`` to 1 with ``progress``, the fraction of training done."""
        beta = self.beta_start + (1.0 - self.beta_start) * min(max(progress, 0.0), 1.0)
        weights = (max(stored, 1) * self.tree.get(index) / total).pow(-beta)
        return (weights / weights.max()).to(torch.float32)

    def update_priorities(self, index: torch.Tensor, errors: torch.Tensor) -> None:
        """Places ``index`` take priority ``(|error| + eps) ** alpha``."""
        priorities = errors.detach().abs().to(torch.float64) + self.eps
        self._set_max_priority(torch.maximum(self.max_priority, priorities.max()))
        self.tree.set(index, priorities.pow(self.alpha))


class PrioritizedReplayBuffer(Priorities, ReplayBuffer):
    """A replay buffer whose ``sample`` draws rows by priority and returns their importance weights and places;
    ``update_priorities`` takes the new |TD errors| of a sampled batch."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], action_dim: int, device: torch.device,
                 obs_dtype: torch.dtype = torch.float32, discounts: bool = False, alpha: float = 0.6,
                 beta_start: float = 0.4, eps: float = 1e-6) -> None:
        ReplayBuffer.__init__(self, capacity, obs_shape, action_dim, device, obs_dtype, discounts)
        Priorities.__init__(self, capacity, device, alpha, beta_start, eps)

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor, discounts: torch.Tensor | None = None) -> None:
        start, k = self.pos, obs.shape[0]
        super().add(obs, actions, rewards, next_obs, terminated, discounts)
        if start + k <= self.capacity:
            self.tree.set_run(start, self.new_priority(k))
        else:
            self.tree.set((start + torch.arange(k, device=self.device)) % self.capacity, self.new_priority(k))

    def sample(self, batch_size: int, progress: float = 0.0) -> ReplayBatch:
        """Stratified by priority (``Priorities.draw``)."""
        index, total = self.draw(batch_size)
        index = index.clamp_(max=self.size - 1)
        return self.rows(index)._replace(weights=self.weights(index, total, progress, self.size), index=index)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The rows, the write position and each row's priority (the sums above them are rebuilt)."""
        places = torch.arange(self.size, device=self.device)
        return {**super().state_tensors(), "priority": self.tree.get(places), "max_priority": self.max_priority}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        super().load_state_tensors(tensors)
        places = torch.arange(self.size, device=self.device)
        if "priority" in tensors:
            self.tree.set(places, tensors["priority"].to(self.device))
            self._set_max_priority(tensors["max_priority"].to(self.device, torch.float64))
        else:  # a buffer saved without priorities: every row as new
            self.tree.set(places, self.new_priority(self.size))
