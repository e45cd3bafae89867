"""Partially observed classic-control tasks: the velocities hidden, as rl-baselines3-zoo defines them for
recurrent policies (``CartPoleNoVel-v1``: cart position and pole angle; ``PendulumNoVel-v1``: cos and sin of
the angle). A feed-forward policy sees a position but not where it is going; a recurrent one can infer it.

``CartPoleNoVelState-v1`` is CartPoleNoVel-v1 with the full state beside it, as a Dict observation
(``observation``: the velocity-hidden one, ``state``: the full one): the actor reads ``observation``, and a
critic may read ``state`` too, a privileged input that training has and acting does not."""

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


class WithState(gym.ObservationWrapper):
    """{"observation": the observation with the velocities hidden, "state": the full one}."""

    def __init__(self, env: gym.Env, visible: tuple[float, ...]) -> None:
        super().__init__(env)
        self.visible = np.asarray(visible, dtype=env.observation_space.dtype)
        self.observation_space = gym.spaces.Dict({"observation": env.observation_space,
                                                  "state": env.observation_space})

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"observation": observation * self.visible, "state": observation}


def make_without_velocity(full_id: str, **kwargs: Any) -> gym.Env:
    return HideVelocity(gym.make(full_id, **kwargs).unwrapped, VISIBLE[full_id])


def make_with_state(full_id: str, **kwargs: Any) -> gym.Env:
    return WithState(gym.make(full_id, **kwargs).unwrapped, VISIBLE[full_id])


WITH_STATE = {"CartPoleNoVelState-v1": "CartPole-v1"}


def register() -> None:
    """Registers the ids of ``NO_VELOCITY`` and ``WITH_STATE`` with gymnasium (with their task's time
    limit); idempotent."""
    for ids, entry_point in ((NO_VELOCITY, make_without_velocity), (WITH_STATE, make_with_state)):
        for env_id, full_id in ids.items():
            if env_id not in gym.registry:
                spec = gym.spec(full_id)
                gym.register(env_id, entry_point=entry_point, kwargs={"full_id": full_id},
                             max_episode_steps=spec.max_episode_steps, reward_threshold=spec.reward_threshold)


register()
