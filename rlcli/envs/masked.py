"""A small task where an action mask matters, registered with gymnasium as ``MaskedChoice-v0``.

Each step shows ``n_actions`` values in [0, 1) and allows a random half of the actions (at least one).
An allowed action earns its value divided by the best allowed value, so every episode's optimum is its
length, ``LENGTH``; a forbidden one ends the episode with nothing. The observation shows every value,
allowed or not: without the mask a policy cannot tell which actions are allowed, and an episode lasts
about two steps. The ``mask`` keyword says where the mask is published: ``"info"`` (``info["action_mask"]``,
gymnasium's and envpool's convention), ``"obs"`` (a Dict observation with ``observation`` and
``action_mask`` keys, PettingZoo's) or ``"hidden"`` (nowhere: the same task for an unmasked agent).

``delayed=True`` pays an episode's rewards at its end, and adds a ``state`` key with the score so far and
the step (both over ``LENGTH``): what the return depends on and a policy need not see. A critic that reads
``state`` (the default critic keys) can tell what each choice earned; one that reads the observation alone
cannot, so this is where a privileged critic input shows what it is worth.

``MaskedChoiceVector`` is the same task for ``num_envs`` envs at once as numpy arrays (gymnasium's vector
entry point for the id, which ``gym.make_vec`` and rlcli's gymnasium backend use): its step costs a few
array operations for all envs where a ``SyncVectorEnv`` of ``MaskedChoice`` steps each env's wrappers in
Python. Every env draws from one generator, so its episodes are not those of the per-env envs.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

ENV_ID = "MaskedChoice-v0"
LENGTH = 16  # steps per episode, and its optimal return


Mask = Literal["info", "obs", "hidden"]


def observation_space(n_actions: int, mask: Mask, delayed: bool) -> gym.Space:
    """One env's observations: the values, or a Dict of them with the mask (``mask="obs"``) and the
    ``state`` (``delayed``); a ValueError for an unknown ``mask``."""
    if mask not in ("info", "obs", "hidden"):
        raise ValueError(f"mask must be 'info', 'obs' or 'hidden', not {mask!r}")
    values = gym.spaces.Box(0.0, 1.0, (n_actions,), np.float32)
    keys: dict[str, gym.Space] = {"observation": values}
    if mask == "obs":
        keys["action_mask"] = gym.spaces.MultiBinary(n_actions)
    if delayed:
        keys["state"] = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    return values if len(keys) == 1 else gym.spaces.Dict(keys)


class MaskedChoice(gym.Env):
    """Pick the best allowed action, ``LENGTH`` times; see the module's docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, n_actions: int = 8, mask: Mask = "info", delayed: bool = False,
                 render_mode: str | None = None) -> None:
        self.observation_space = observation_space(n_actions, mask, delayed)
        self.n, self.mask, self.delayed = n_actions, mask, delayed
        self.score, self.t = 0.0, 0
        self.action_space = gym.spaces.Discrete(n_actions)
        self.render_mode = render_mode

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self.values = self.np_random.random(self.n, dtype=np.float32)
        self.allowed = self.np_random.random(self.n) < 0.5
        if not self.allowed.any():
            self.allowed[self.np_random.integers(self.n)] = True
        self.best = float(self.values[self.allowed].max())
        mask = self.allowed.astype(np.int8)
        info = {"action_mask": mask} if self.mask == "info" else {}
        obs: dict[str, np.ndarray] = {"observation": self.values.copy()}
        if self.mask == "obs":
            obs["action_mask"] = mask
        if self.delayed:
            obs["state"] = np.array([self.score, self.t], dtype=np.float32) / LENGTH
        return (obs if len(obs) > 1 else obs["observation"]), info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.score, self.t = 0.0, 0
        return self._draw()

    def render(self) -> np.ndarray:
        """A bar per action, as tall as its value: green where allowed, grey where forbidden (RGB)."""
        height, width = 64, 16
        frame = np.full((height, width * self.n, 3), 255, dtype=np.uint8)
        for i, (value, allowed) in enumerate(zip(self.values, self.allowed, strict=True)):
            top = height - int(round(float(value) * (height - 4)))
            frame[top:, i * width + 2:(i + 1) * width - 2] = (40, 170, 60) if allowed else (170, 170, 170)
        return frame

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        allowed = bool(self.allowed[int(action)])
        reward = float(self.values[int(action)]) / self.best if allowed else 0.0
        self.score += reward
        ended = not allowed or (self.delayed and self.t == LENGTH)
        if self.delayed:  # all of it at the end
            reward = self.score if ended else 0.0
        obs, info = self._draw()
        return obs, reward, ended, False, info


class MaskedChoiceVector(gym.vector.VectorEnv):
    """``num_envs`` MaskedChoice envs as arrays, with the time limit of ``max_episode_steps`` (truncation)
    and next-step auto-reset: a step after an episode's last ignores that env's action and returns the first
    observation of a new episode, reward 0. ``reset(options={"reset_mask": rows})`` starts new episodes in
    the rows that are true and leaves the others as they are (what a same-step auto-reset needs). The mask
    is published as a ``SyncVectorEnv`` of ``MaskedChoice`` publishes it: ``info["action_mask"]`` [num_envs,
    n_actions] int8 with ``info["_action_mask"]``, or as the Dict observation's key."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, n_actions: int = 8, mask: Mask = "info", delayed: bool = False,
                 max_episode_steps: int = LENGTH) -> None:
        self.single_observation_space = observation_space(n_actions, mask, delayed)
        self.single_action_space = gym.spaces.Discrete(n_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.num_envs, self.n, self.mask, self.delayed = num_envs, n_actions, mask, delayed
        self.max_episode_steps = max_episode_steps
        self.rows = np.arange(num_envs)
        self.values = np.zeros((num_envs, n_actions), np.float32)
        self.allowed = np.ones((num_envs, n_actions), bool)
        self.best = np.ones(num_envs, np.float32)
        self.score = np.zeros(num_envs)
        self.t = np.zeros(num_envs, np.int64)
        self.ended = np.zeros(num_envs, bool)  # the rows whose last step ended an episode

    def _draw(self, rows: np.ndarray | None = None) -> None:
        """New values and allowed actions for ``rows`` (a boolean mask; None: every env)."""
        count = self.num_envs if rows is None else int(rows.sum())
        values = self.np_random.random((count, self.n), dtype=np.float32)
        allowed = self.np_random.random((count, self.n)) < 0.5
        none = ~allowed.any(1)
        if none.any():
            allowed[none, self.np_random.integers(self.n, size=int(none.sum()))] = True
        best = np.where(allowed, values, np.float32(0)).max(1)  # values are >= 0
        if rows is None:
            self.values, self.allowed, self.best = values, allowed, best
        else:
            self.values[rows], self.allowed[rows], self.best[rows] = values, allowed, best

    def _results(self) -> tuple[Any, dict[str, Any]]:
        mask = self.allowed.astype(np.int8)
        info = {"action_mask": mask, "_action_mask": np.ones(self.num_envs, bool)} if self.mask == "info" else {}
        obs: dict[str, np.ndarray] = {"observation": self.values.copy()}
        if self.mask == "obs":
            obs["action_mask"] = mask
        if self.delayed:
            obs["state"] = (np.stack([self.score, self.t], 1) / LENGTH).astype(np.float32)
        return (obs if len(obs) > 1 else obs["observation"]), info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        rows = None if options is None or "reset_mask" not in options else np.asarray(options["reset_mask"], bool)
        every = slice(None) if rows is None else rows
        self.score[every], self.t[every], self.ended[every] = 0.0, 0, False
        self._draw(rows)
        return self._results()

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        starting = self.ended
        allowed = self.allowed[self.rows, actions]
        reward = np.where(allowed, self.values[self.rows, actions] / self.best, 0.0)
        self.t += 1
        self.score += reward
        terminated = ~allowed
        if self.delayed:  # all of it at the end
            terminated |= self.t == LENGTH
            reward = np.where(terminated, self.score, 0.0)
        truncated = self.t >= self.max_episode_steps
        # rows whose previous step ended an episode start a new one instead
        reward[starting], terminated[starting], truncated[starting] = 0.0, False, False
        self.score[starting], self.t[starting] = 0.0, 0
        self.ended = terminated | truncated
        self._draw()
        obs, info = self._results()
        return obs, reward.astype(np.float32), terminated, truncated, info


def register() -> None:
    """Registers ``ENV_ID`` with gymnasium (``LENGTH`` steps an episode), ``MaskedChoiceVector`` as its
    vector entry point; idempotent."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=MaskedChoice, vector_entry_point=MaskedChoiceVector,
                     max_episode_steps=LENGTH, reward_threshold=0.95 * LENGTH)


register()
