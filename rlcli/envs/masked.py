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
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np

ENV_ID = "MaskedChoice-v0"
LENGTH = 16  # steps per episode, and its optimal return


class MaskedChoice(gym.Env):
    """Pick the best allowed action, ``LENGTH`` times; see the module's docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, n_actions: int = 8, mask: Literal["info", "obs", "hidden"] = "info",
                 delayed: bool = False, render_mode: str | None = None) -> None:
        if mask not in ("info", "obs", "hidden"):
            raise ValueError(f"mask must be 'info', 'obs' or 'hidden', not {mask!r}")
        self.n, self.mask, self.delayed = n_actions, mask, delayed
        values = gym.spaces.Box(0.0, 1.0, (n_actions,), np.float32)
        keys: dict[str, gym.Space] = {"observation": values}
        if mask == "obs":
            keys["action_mask"] = gym.spaces.MultiBinary(n_actions)
        if delayed:
            keys["state"] = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.observation_space = values if len(keys) == 1 else gym.spaces.Dict(keys)
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


def register() -> None:
    """Registers ``ENV_ID`` with gymnasium (``LENGTH`` steps an episode); idempotent."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=MaskedChoice, max_episode_steps=LENGTH, reward_threshold=0.95 * LENGTH)


register()
