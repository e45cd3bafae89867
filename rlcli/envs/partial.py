"""Partially observed classic-control tasks: the velocities hidden, as rl-baselines3-zoo defines them for
recurrent policies (``CartPoleNoVel-v1``: cart position and pole angle; ``PendulumNoVel-v1``: cos and sin of
the angle). A feed-forward policy sees a position but not where it is going; a recurrent one can infer it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# which observation entries stay visible; the hidden ones read 0, so the shape is the task's own
VISIBLE = {"CartPole-v1": (1.0, 0.0, 1.0, 0.0), "Pendulum-v1": (1.0, 1.0, 0.0)}
NO_VELOCITY = {"CartPoleNoVel-v1": "CartPole-v1", "PendulumNoVel-v1": "Pendulum-v1"}


class HideVelocity(gym.ObservationWrapper):
    """Multiplies each observation by a 0/1 mask that hides the velocity entries."""

    def __init__(self, env: gym.Env, visible: tuple[float, ...]) -> None:
        super().__init__(env)
        self.visible = np.asarray(visible, dtype=env.observation_space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.visible


def make_without_velocity(full_id: str, **kwargs: Any) -> gym.Env:
    return HideVelocity(gym.make(full_id, **kwargs).unwrapped, VISIBLE[full_id])


def register() -> None:
    """Registers the ids of ``NO_VELOCITY`` with gymnasium (with their task's time limit); idempotent."""
    for env_id, full_id in NO_VELOCITY.items():
        if env_id not in gym.registry:
            spec = gym.spec(full_id)
            gym.register(env_id, entry_point=make_without_velocity, kwargs={"full_id": full_id},
                         max_episode_steps=spec.max_episode_steps, reward_threshold=spec.reward_threshold)


register()
