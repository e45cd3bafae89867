"""n-step returns for replay (Sutton 1988; Rainbow's multi-step targets): each env's transitions held until n
steps follow them or their episode ends, then stored as (s_t, a_t, r_t + gamma r_t+1 + ... + gamma^(k-1)
r_t+k-1, s_t+k, terminated, gamma^k), k = n, or fewer at an episode's end. A time limit's row keeps its
bootstrap, from the final observation k steps on; a terminal one has none."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlcli.envs.snapshot import Snapshot


class Transitions(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    discounts: torch.Tensor


class NStepReturns:
    """The last ``n`` steps of every env, in a ring all envs share (they step together); ``ages`` counts each
    env's steps since its episode began, up to ``n``."""

    def __init__(self, n: int, gamma: float, n_envs: int, obs_shape: tuple[int, ...], action_dim: int,
                 device: torch.device, obs_dtype: torch.dtype = torch.float32) -> None:
        self.n, self.gamma = n, gamma
        self.obs = torch.zeros((n, n_envs, *obs_shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((n, n_envs, action_dim), device=device)
        self.rewards = torch.zeros((n, n_envs), device=device)
        self.ages = torch.zeros(n_envs, dtype=torch.long, device=device)
        self.t = 0  # the ring's slot of the next step
        self.lengths = torch.arange(1, n + 1, device=device)  # k of each column of an emission mask
        self.powers = gamma ** self.lengths.double()

    def push(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
             terminated: torch.Tensor, done: torch.Tensor, real: torch.Tensor) -> Transitions:
        """One vector step of every env (``real``: the rows that are transitions, not a reset's; ``done``:
        where an episode ended, by termination or time limit); returns the transitions now complete: each
        env's n-step one, and at an episode's end every shorter one it still held."""
        slot = self.t % self.n
        self.obs[slot], self.actions[slot], self.rewards[slot] = obs.to(self.obs.dtype), actions, rewards
        self.t += 1
        self.ages = torch.where(real, (self.ages + 1).clamp(max=self.n), torch.zeros_like(self.ages))
        # emit[e, k-1]: env e's transition of k steps, begun k - 1 steps ago, is complete
        held = self.lengths <= self.ages.unsqueeze(1)
        emit = real.unsqueeze(1) & held & (done.unsqueeze(1) | (self.lengths == self.n))
        env, column = emit.nonzero(as_tuple=True)
        starts = (slot - column) % self.n
        returns = self._returns(slot)[column, env]
        self.ages = torch.where(done & real, torch.zeros_like(self.ages), self.ages)
        return Transitions(self.obs[starts, env], self.actions[starts, env], returns.float(), next_obs[env],
                           terminated[env].float(), self.powers[column].float())

    def _returns(self, slot: int) -> torch.Tensor:
        """[n, envs]: row k-1 the discounted sum of the last k rewards, the oldest first."""
        out = torch.empty((self.n, self.rewards.shape[1]), dtype=torch.float64, device=self.rewards.device)
        total = torch.zeros(self.rewards.shape[1], dtype=torch.float64, device=self.rewards.device)
        for k in range(self.n):
            total = self.rewards[(slot - k) % self.n].double() + self.gamma * total
            out[k] = total
        return out

    def state(self) -> Snapshot:
        return Snapshot({"t": self.t}, {"obs": self.obs, "actions": self.actions, "rewards": self.rewards,
                                        "ages": self.ages})

    def load_state(self, snapshot: Snapshot) -> None:
        self.t = int(snapshot.values["t"])
        for name in ("obs", "actions", "rewards", "ages"):
            getattr(self, name).copy_(snapshot.tensors[name])
