"""Prioritised experience replay (Schaul et al. 2016, proportional variant): rows drawn with probability
proportional to ``(|TD error| + eps) ** alpha`` through a sum tree, every tree operation one tensor operation
per level for the whole batch; importance-sampling weights ``(N P(i)) ** -beta`` over the batch's largest,
``beta`` rising from ``beta_start`` to 1 over the run; new rows get the largest priority seen so far."""

from __future__ import annotations

import torch

from rlcli.algos.buffers import ReplayBatch, ReplayBuffer

PRIORITIES = "priorities"  # the metric an agent's update returns its rows' new priorities (|TD error|) under


class SumTree:
    """Leaf values and, above them, each node the sum of its two children: the root is the total, and a
    mass in [0, total) leads down to the leaf whose cumulative range holds it. float64, so that a million
    priorities sum without losing the small ones."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.leaves = 1 << max(capacity - 1, 1).bit_length()
        self.depth = self.leaves.bit_length() - 1
        self.tree = torch.zeros(2 * self.leaves, dtype=torch.float64, device=device)

    def set(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Leaves ``index`` take ``values``, and every sum above them follows."""
        node = index + self.leaves
        self.tree[node] = values.to(torch.float64)
        for _ in range(self.depth):
            node = node // 2
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def get(self, index: torch.Tensor) -> torch.Tensor:
        return self.tree[index + self.leaves]

    def total(self) -> torch.Tensor:
        return self.tree[1]

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """The leaf each of ``mass`` (in [0, total)) falls in."""
        node = torch.ones(mass.shape, dtype=torch.long, device=mass.device)
        mass = mass.to(torch.float64)
        for _ in range(self.depth):
            left = self.tree[2 * node]
            right = mass >= left
            mass = torch.where(right, mass - left, mass)
            node = 2 * node + right.long()
        return node - self.leaves


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer whose ``sample`` draws rows by priority and returns their importance weights and places;
    ``update_priorities`` takes the new |TD errors| of a sampled batch."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], action_dim: int, device: torch.device,
                 obs_dtype: torch.dtype = torch.float32, discounts: bool = False, alpha: float = 0.6,
                 beta_start: float = 0.4, eps: float = 1e-6) -> None:
        super().__init__(capacity, obs_shape, action_dim, device, obs_dtype, discounts)
        self.alpha, self.beta_start, self.eps = alpha, beta_start, eps
        self.tree = SumTree(capacity, device)
        self.max_priority = torch.ones((), dtype=torch.float64, device=device)  # a tensor: read without a sync

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor, discounts: torch.Tensor | None = None) -> None:
        places = (self.pos + torch.arange(obs.shape[0], device=self.device)) % self.capacity
        super().add(obs, actions, rewards, next_obs, terminated, discounts)
        self.tree.set(places, self.max_priority.pow(self.alpha).expand(len(places)))

    def sample(self, batch_size: int, progress: float = 0.0) -> ReplayBatch:
        """Stratified: one row from each of ``batch_size`` equal slices of the total priority."""
        total = self.tree.total()
        strata = torch.arange(batch_size, device=self.device, dtype=torch.float64)
        mass = (strata + torch.rand(batch_size, device=self.device, dtype=torch.float64)) * (total / batch_size)
        index = self.tree.find(mass).clamp_(max=self.size - 1)
        probabilities = self.tree.get(index) / total
        beta = self.beta_start + (1.0 - self.beta_start) * min(max(progress, 0.0), 1.0)
        weights = (self.size * probabilities).pow(-beta)
        weights = (weights / weights.max()).to(torch.float32)
        return self.rows(index)._replace(weights=weights, index=index)

    def update_priorities(self, index: torch.Tensor, errors: torch.Tensor) -> None:
        """Rows ``index`` take priority ``(|error| + eps) ** alpha``."""
        priorities = errors.detach().abs().to(torch.float64) + self.eps
        self.max_priority = torch.maximum(self.max_priority, priorities.max())
        self.tree.set(index, priorities.pow(self.alpha))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The rows, the write position and each row's priority (the sums above them are rebuilt)."""
        places = torch.arange(self.size, device=self.device)
        return {**super().state_tensors(), "priority": self.tree.get(places), "max_priority": self.max_priority}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        super().load_state_tensors(tensors)
        places = torch.arange(self.size, device=self.device)
        if "priority" in tensors:
            self.tree.set(places, tensors["priority"].to(self.device))
            self.max_priority = tensors["max_priority"].to(self.device, torch.float64)
        else:  # a buffer saved without priorities: every row as new
            self.tree.set(places, self.max_priority.pow(self.alpha).expand(self.size))
