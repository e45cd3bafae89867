"""Replay for stacked frames that keeps each frame once (as rlpyt's frame buffer does): per env, a ring of the
newest frame of every observation in the order the env produced them, and how many of the frames before it in
that ring its stack holds (its "age"). A stack is rebuilt on sampling from the frames before it, the first of a
run repeated where the stack reaches back past it. Each new stack is checked as it comes: either it slides on
from the last one (within an episode, and across a life lost under episodic life, which keeps the stack), or it
is one frame repeated (a reset, as envpool's and rlcli's Atari stacking start an episode); any other stack is
refused. n-step returns are summed on sampling from the stored rewards, stopping at an episode's end.

A 4 x 84 x 84 transition costs one 84 x 84 frame (7 KB) instead of two stacks (55 KB)."""

from __future__ import annotations

import math

import numpy as np
import torch

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.prioritized import Priorities
from rlcli.errors import CheckpointError, UsageError


class FrameReplayBuffer:
    """Transitions of ``n_envs`` envs that step together, each env's observations a stack of ``obs_shape[0]``
    frames; ``capacity`` transitions in all (rounded up to whole vector steps)."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], n_envs: int, action_dim: int,
                 device: torch.device, n_step: int = 1, gamma: float = 0.99) -> None:
        self.stack, self.n_envs, self.n_step, self.gamma, self.device = obs_shape[0], n_envs, n_step, gamma, device
        self.capacity = capacity
        # the steps kept: the transitions, plus the frames their stacks and n-step targets reach
        self.slots = math.ceil(capacity / n_envs) + self.stack + n_step
        s, n = self.slots, n_envs
        self.frames = torch.zeros((s, n, *obs_shape[1:]), dtype=torch.uint8, device=device)
        self.age = torch.zeros((s, n), dtype=torch.long, device=device)  # steps since the episode's first, < stack
        self.actions = torch.zeros((s, n, action_dim), device=device)
        self.rewards = torch.zeros((s, n), device=device)
        self.terminated = torch.zeros((s, n), device=device)
        self.ended = torch.zeros((s, n), dtype=torch.bool, device=device)  # terminated or truncated at this step
        self.real = torch.zeros((s, n), dtype=torch.bool, device=device)  # a stored transition starts here
        self.t = 0  # the step of the observation acted on next: its frame is in slot t % slots
        self.oldest = 0  # the first step whose frame is still held
        self.size = 0  # transitions stored, at most ``capacity``
        self.fresh = True  # nothing added yet: the first observation brings its whole stack
        self.loaded = False  # a saved ring, whose envs may have started afresh (an inexact resume)

    @property
    def bytes_per_transition(self) -> float:
        return sum(x.nbytes for x in (self.frames, self.age, self.actions, self.rewards, self.terminated,
                                      self.ended, self.real)) / (self.slots * self.n_envs)

    def add_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                 terminated: torch.Tensor, ended: torch.Tensor, real: torch.Tensor) -> None:
        """One vector step of every env: ``real`` False where the env ignored its action (a reset row, which
        stores no transition; its ``next_obs`` starts an episode). A UsageError where ``next_obs`` is a stack
        the ring cannot rebuild."""
        s, k = self.slots, self.stack
        self.begin(obs)
        now, after = self.t % s, (self.t + 1) % s
        self.actions[now] = actions
        self.rewards[now] = rewards
        self.terminated[now] = terminated.float()
        self.ended[now] = ended
        self.real[now] = real
        slides = (next_obs[:, :-1] == obs[:, 1:]).flatten(1).all(1)
        if not bool((slides | (next_obs == next_obs[:, -1:]).flatten(1).all(1)).all()):
            raise UsageError("this env's frame stacks neither slide on from one step to the next nor start as one "
                             "frame repeated, so frames cannot be kept once: add -p frame_replay=false")
        self.frames[after] = next_obs[:, -1]
        self.age[after] = torch.where(slides, (self.age[now] + 1).clamp(max=k - 1), 0)
        self.real[after] = False  # its transition comes with the next step
        self.t += 1
        self.oldest = max(self.oldest, self.t + 1 - s)
        self.size = min(self.size + int(real.sum()), self.capacity)

    def begin(self, obs: torch.Tensor) -> None:
        """Where ``obs`` starts a run of frames (the first ever, or envs that started afresh beside a saved
        ring), its whole stack goes in, as if its episode began k-1 steps ago; a restart leaves a gap of k
        steps, so that the old run's last frames stay held and its n-step returns stop at its last step."""
        s, k = self.slots, self.stack
        if self.loaded:
            self.loaded = False
            t = torch.full((self.n_envs,), self.t, device=self.device)
            if torch.equal(self.stacked(t, torch.arange(self.n_envs, device=self.device)), obs):
                return  # the envs go on where the saved ring stopped (an exact resume)
            self.ended[(self.t - 1) % s] = True
            self.t += k
        elif not self.fresh:
            return
        for j in range(k):
            slot = (self.t - (k - 1) + j) % s
            self.frames[slot], self.age[slot], self.real[slot] = obs[:, j], j, False
        self.oldest = self.t - (k - 1) if self.fresh else max(self.oldest, self.t + 1 - s)
        self.fresh = False

    def first_sampled_step(self) -> int:
        """The oldest step whose whole stack is still held."""
        return self.oldest + self.stack - 1

    def sample(self, batch_size: int, progress: float = 0.0) -> ReplayBatch:
        """``batch_size`` stored transitions drawn uniformly (draws that land on a reset row are drawn again)."""
        low, high = self.first_sampled_step(), self.t - 1
        span = (high - low + 1) * self.n_envs
        steps: list[torch.Tensor] = []
        envs: list[torch.Tensor] = []
        while sum(int(x.numel()) for x in steps) < batch_size:
            index = torch.randint(0, span, (2 * batch_size,), device=self.device)
            t, e = low + index // self.n_envs, index % self.n_envs
            keep = self.real[t % self.slots, e]
            steps.append(t[keep])
            envs.append(e[keep])
        return self.transitions(torch.cat(steps)[:batch_size], torch.cat(envs)[:batch_size])

    def transitions(self, t: torch.Tensor, e: torch.Tensor) -> ReplayBatch:
        """The transitions that start at steps ``t`` of envs ``e``, with n-step returns where ``n_step`` > 1."""
        s = self.slots
        total = torch.zeros(len(t), device=self.device)
        discount = torch.ones(len(t), device=self.device)
        taken = torch.zeros_like(t)
        terminated = torch.zeros(len(t), device=self.device)
        going = torch.ones(len(t), dtype=torch.bool, device=self.device)
        for m in range(self.n_step):
            # a later step counts while the episode goes on and the step is stored
            counts = going & (t + m <= self.t - 1)
            slot = (t + m) % s
            total = total + torch.where(counts, discount * self.rewards[slot, e], 0.0)
            discount = torch.where(counts, discount * self.gamma, discount)
            taken = taken + counts.long()
            terminated = torch.where(counts, self.terminated[slot, e], terminated)
            going = counts & ~self.ended[slot, e]
        return ReplayBatch(self.stacked(t, e), self.actions[t % s, e], total, self.stacked(t + taken, e), terminated,
                           discounts=discount if self.n_step > 1 else None)

    def stacked(self, t: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """[B, stack, H, W]: the observations at steps ``t`` of envs ``e``, rebuilt from their frames."""
        age = self.age[t % self.slots, e]
        back = torch.arange(self.stack - 1, -1, -1, device=self.device)  # the oldest frame first
        source = t.unsqueeze(1) - torch.minimum(back.unsqueeze(0), age.unsqueeze(1))
        return self.frames[source % self.slots, e.unsqueeze(1)]

    def recent_rewards(self, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rewards of the last ``steps`` vector steps, [steps, n_envs], and where a transition was stored."""
        slots = torch.arange(self.t - steps, self.t, device=self.device) % self.slots
        return self.rewards[slots], self.real[slots]

    FIELDS = ("frames", "age", "actions", "rewards", "terminated", "ended", "real")

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {name: getattr(self, name) for name in self.FIELDS}
        out["counters"] = torch.tensor([self.t, self.oldest, self.size])
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        if "frames" not in tensors:
            raise CheckpointError("the saved replay holds whole stacks, not frames: resume it without "
                                  "--save-buffer's replay (delete replay.safetensors) or with the code that saved it")
        if tensors["frames"].shape != self.frames.shape:
            raise CheckpointError(f"saved frames are {tuple(tensors['frames'].shape)}, this buffer's "
                                  f"{tuple(self.frames.shape)}: the same buffer_size and n_envs resume it")
        for name in self.FIELDS:
            getattr(self, name).copy_(tensors[name])
        self.t, self.oldest, self.size = (int(x) for x in tensors["counters"])
        self.fresh, self.loaded = self.t == self.oldest, self.t != self.oldest


def stacked_frames(obs_space_shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """Whether observations of this shape and type are stacks of uint8 frames ([stack, H, W])."""
    return len(obs_space_shape) == 3 and dtype == np.uint8


class PrioritizedFrameReplayBuffer(Priorities, FrameReplayBuffer):
    """The frame replay drawn by priority (Schaul et al. 2016), as ``PrioritizedReplayBuffer`` draws whole rows:
    a sum tree over every (step, env) place, a stored transition's priority ``(|TD error| + eps) ** alpha`` (the
    largest so far when new), zero where no transition starts or its stack is no longer held."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], n_envs: int, action_dim: int,
                 device: torch.device, n_step: int = 1, gamma: float = 0.99, alpha: float = 0.6,
                 beta_start: float = 0.4, eps: float = 1e-6) -> None:
        FrameReplayBuffer.__init__(self, capacity, obs_shape, n_envs, action_dim, device, n_step, gamma)
        Priorities.__init__(self, self.slots * n_envs, device, alpha, beta_start, eps)

    def _set_step(self, step: int, priorities: torch.Tensor) -> None:
        """The places of step ``step``'s transitions, one per env and side by side, take ``priorities``."""
        self.tree.set_run((step % self.slots) * self.n_envs, priorities)

    def add_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                 terminated: torch.Tensor, ended: torch.Tensor, real: torch.Tensor) -> None:
        first = self.t if self.fresh else self.first_sampled_step()
        skipped = self.t
        self.begin(obs)
        zero = torch.zeros(self.n_envs, dtype=torch.float64, device=self.device)
        for gap in range(skipped, self.t):  # a restart's gap: old transitions' places
            self._set_step(gap, zero)
        step = self.t
        super().add_step(obs, actions, rewards, next_obs, terminated, ended, real)
        new = self.new_priority(self.n_envs)
        self._set_step(step, torch.where(real, new, torch.zeros_like(new)))
        self._set_step(step + 1, zero)  # an old transition's place, written over
        for lost in range(first, self.first_sampled_step()):  # stacks whose first frames were written over
            self._set_step(lost, zero)

    def sample(self, batch_size: int, progress: float = 0.0) -> ReplayBatch:
        """Stratified by priority (``Priorities.draw``)."""
        index, total = self.draw(batch_size)
        # a mass that rounding moved onto an empty place: the first stored transition instead
        index = torch.where(self.tree.get(index) > 0, index, self.tree.find(torch.zeros_like(total).expand(1)))
        weights = self.weights(index, total, progress, self.size)
        slot, e = index // self.n_envs, index % self.n_envs
        t = self.t - 1 - (self.t - 1 - slot) % self.slots  # the latest step held in that slot
        return self.transitions(t, e)._replace(weights=weights, index=index)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {**super().state_tensors(), "priority": self.tree.leaves, "max_priority": self.max_priority}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        super().load_state_tensors(tensors)
        places = torch.arange(len(self.tree.leaves), device=self.device)
        self.tree.set(places, tensors["priority"].to(self.device))
        self._set_max_priority(tensors["max_priority"].to(self.device, torch.float64))
