"""Rollout storage, preallocated once, and the pure advantage maths."""

from __future__ import annotations

from typing import NamedTuple

import torch


def compute_gae(*, rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                dones: torch.Tensor, gamma: float, gae_lambda: float) -> torch.Tensor:
    """Generalised advantage estimates, [T, N].

    ``values`` is [T + 1, N]: row t + 1 is the value of the observation that step t returned, which is
    the real final observation when step t ended an episode (next-step auto-reset), so a truncation
    (``dones`` without ``terminated``) bootstraps from it and a termination does not. ``dones`` cuts
    the recursion at episode ends so nothing leaks from one episode into the last one.
    """
    not_terminated = 1.0 - terminated.float()
    carry = gamma * gae_lambda * (1.0 - dones.float())
    deltas = rewards + gamma * values[1:] * not_terminated - values[:-1]
    return gae_scan(deltas, carry)


def gae_scan(deltas: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """A_t = delta_t + carry_t * A_{t+1}, backwards from A_T = 0, [T, N]."""
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages


class RolloutBatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class SequenceBatch(NamedTuple):
    """A rollout kept as [T, N] sequences, for a recurrent policy: ``state`` [N, S] is its state before
    the first step, ``starts`` where an episode starts (the state is zero there), ``valid`` the rows to
    learn from (not reset rows)."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    valid: torch.Tensor
    starts: torch.Tensor
    state: torch.Tensor


class RolloutBuffer:
    """[T, N] tensors for one rollout. ``valid`` is False on reset rows, whose action the env ignored.
    With ``state_size`` (a recurrent policy), also where episodes start and the state at the first step."""

    def __init__(self, n_steps: int, n_envs: int, obs_shape: tuple[int, ...], obs_dtype: torch.dtype,
                 action_shape: tuple[int, ...], action_dtype: torch.dtype, device: torch.device,
                 state_size: int = 0):
        def z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.obs = z(n_steps, n_envs, *obs_shape, dtype=obs_dtype)
        self.actions = z(n_steps, n_envs, *action_shape, dtype=action_dtype)
        self.log_probs = z(n_steps, n_envs)
        self.values = z(n_steps + 1, n_envs)
        self.rewards = z(n_steps, n_envs)
        self.terminated = z(n_steps, n_envs, dtype=torch.bool)
        self.dones = z(n_steps, n_envs, dtype=torch.bool)
        self.valid = z(n_steps, n_envs, dtype=torch.bool)
        self.state_size = state_size
        if state_size:
            self.starts = z(n_steps, n_envs, dtype=torch.bool)
            self.state = z(n_envs, state_size)

    def batch(self, gamma: float, gae_lambda: float) -> RolloutBatch | SequenceBatch:
        """Advantages and returns, flattened to the valid rows only; for a recurrent policy, the rollout
        as sequences."""
        advantages = compute_gae(rewards=self.rewards, values=self.values,
                                 terminated=self.terminated, dones=self.dones, gamma=gamma,
                                 gae_lambda=gae_lambda)
        returns = advantages + self.values[:-1]
        if self.state_size:
            return SequenceBatch(self.obs, self.actions, self.log_probs, self.values[:-1], advantages, returns,
                                 self.valid, self.starts, self.state)
        keep = self.valid.flatten()
        if bool(keep.all()):
            pick = lambda t: t.flatten(0, 1)  # noqa: E731 -- avoids a gather when nothing is masked
        else:
            index = keep.nonzero().squeeze(-1)
            pick = lambda t: t.flatten(0, 1).index_select(0, index)  # noqa: E731
        return RolloutBatch(pick(self.obs), pick(self.actions), pick(self.log_probs),
                            pick(self.values[:-1]), pick(advantages), pick(returns))


class ReplayBatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor  # with n-step returns, the discounted sum of the steps up to ``next_obs``
    next_obs: torch.Tensor
    terminated: torch.Tensor  # float: 1 where the episode ended without a time limit (no bootstrap)
    discounts: torch.Tensor | None = None  # n-step returns: gamma^k, k the steps to ``next_obs``; None: gamma
    weights: torch.Tensor | None = None  # prioritised replay: each row's importance-sampling weight
    index: torch.Tensor | None = None  # prioritised replay: the rows' places, for their new priorities


def bootstrap_discount(batch: ReplayBatch, gamma: float) -> torch.Tensor | float:
    """What the value of ``next_obs`` is discounted by: gamma, or each row's gamma^k with n-step returns."""
    return gamma if batch.discounts is None else batch.discounts


class ReplayBuffer:
    """A ring of preallocated tensors. ``next_obs`` is the real next observation, the final one at
    an episode end; rows are written only for transitions the env actually took."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], action_dim: int, device: torch.device,
                 obs_dtype: torch.dtype = torch.float32, discounts: bool = False) -> None:
        """``discounts``: each row keeps its own bootstrap discount (n-step returns)."""
        self.capacity, self.device = capacity, device
        self.fields = ("obs", "actions", "rewards", "next_obs", "terminated") + (("discounts",) if discounts else ())
        self.obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, device=device)
        self.next_obs = torch.zeros_like(self.obs)
        self.actions = torch.zeros((capacity, action_dim), device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.terminated = torch.zeros(capacity, device=device)
        self.discounts = torch.zeros(capacity, device=device) if discounts else None
        self.pos = 0
        self.size = 0

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor, discounts: torch.Tensor | None = None) -> None:
        """Appends k rows, overwriting the oldest once full."""
        k = obs.shape[0]
        end = self.pos + k
        # a slice where the rows do not wrap: a third of the time of an index for SAC's one row a step
        index = slice(self.pos, end) if end <= self.capacity else (
            torch.arange(self.pos, end, device=self.device) % self.capacity)
        for name, value in zip(self.fields, (obs, actions, rewards, next_obs, terminated, discounts), strict=False):
            getattr(self, name)[index] = value.to(getattr(self, name).dtype)
        self.pos = end % self.capacity
        self.size = min(self.size + k, self.capacity)

    def sample(self, batch_size: int, progress: float = 0.0) -> ReplayBatch:
        """``batch_size`` rows drawn uniformly (``progress``, the fraction of training done, is for the
        prioritised buffer's schedule)."""
        index = torch.randint(0, self.size, (batch_size,), device=self.device)
        return self.rows(index)

    def rows(self, index: torch.Tensor) -> ReplayBatch:
        return ReplayBatch(*(getattr(self, name).index_select(0, index) for name in self.fields))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The filled rows and the write position, for a checkpoint."""
        out = {name: getattr(self, name)[: self.size] for name in self.fields}
        out["pos"] = torch.tensor(self.pos)
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        size = tensors["obs"].shape[0]
        if size > self.capacity:
            raise ValueError(f"saved buffer holds {size} rows, more than buffer_size={self.capacity}")
        for name in self.fields:
            getattr(self, name)[:size] = tensors[name].to(self.device)
        self.size, self.pos = size, int(tensors["pos"]) % self.capacity
