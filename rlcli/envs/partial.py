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
from gymnasium.envs.classic_control.utils import maybe_parse_reset_bounds
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

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


class CartPoleNoVelVector(gym.vector.VectorEnv):
    """``num_envs`` CartPoleNoVel-v1 envs stepped as arrays, with the episodes of a SyncVectorEnv of the
    per-env task to the bit (``tests/envs/test_partial_envs.py``): each env's own generator, seeded and drawn as
    gymnasium seeds and resets it; CartPole's float64 dynamics in its order of operations (numpy's sin and
    cos give an array what they give each of its entries); its time limit (truncation) and next-step
    auto-reset. ``reset(options={"reset_mask": rows})`` starts new episodes in the rows that are true and
    leaves the others as they are (what a same-step auto-reset needs)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, full_id: str = "CartPole-v1", max_episode_steps: int = 500,
                 **kwargs: Any) -> None:
        task = gym.make(full_id, **kwargs).unwrapped  # its constants
        if task.kinematics_integrator != "euler":
            raise ValueError(f"{full_id}'s integrator is {task.kinematics_integrator!r}; this steps euler's")
        self.single_observation_space, self.single_action_space = task.observation_space, task.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.num_envs, self.max_episode_steps = num_envs, max_episode_steps
        self.force_mag, self.tau, self.gravity, self.length = task.force_mag, task.tau, task.gravity, task.length
        self.masspole, self.total_mass, self.polemass_length = task.masspole, task.total_mass, task.polemass_length
        self.x_threshold, self.theta_threshold = task.x_threshold, task.theta_threshold_radians
        self.sutton_barto = task._sutton_barto_reward
        task.close()
        self.visible = np.asarray(VISIBLE[full_id], dtype=np.float32)
        self.generators: list[np.random.Generator | None] = [None] * num_envs  # None: never reset
        self.state = np.zeros((num_envs, 4))
        self.elapsed = np.zeros(num_envs, np.int64)
        self.ended = np.zeros(num_envs, bool)  # the rows whose last step ended an episode

    def _start(self, rows: np.ndarray, low: float = -0.05, high: float = 0.05) -> None:
        """New episodes in ``rows`` (indices), each drawn from its env's generator."""
        for i in rows:
            generator = self.generators[i]
            if generator is None:  # as gymnasium's Env.np_random: from entropy where never seeded
                generator = self.generators[i] = seeding.np_random()[0]
            self.state[i] = generator.uniform(low=low, high=high, size=(4,))
        self.elapsed[rows] = 0
        self.ended[rows] = False

    def _observations(self) -> np.ndarray:
        return self.state.astype(np.float32) * self.visible

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """As a SyncVectorEnv's: env i seeded with ``seed + i`` (or ``seed[i]``), CartPole's ``low`` and
        ``high`` options taken, and only the rows of ``reset_mask`` (where given) seeded and started."""
        options = options or {}
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
        rows = np.flatnonzero(options.get("reset_mask", np.ones(self.num_envs, bool)))
        for i in rows:
            if seeds is not None and seeds[i] is not None:
                self.generators[i] = seeding.np_random(seeds[i])[0]  # gymnasium's Env.reset(seed=...)
        self._start(rows, *maybe_parse_reset_bounds(options, -0.05, 0.05))
        return self._observations(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self.generators[0] is None:
            raise gym.error.ResetNeeded("CartPoleNoVelVector: reset before the first step")
        actions = np.asarray(actions)
        if actions.dtype.kind not in "iu" or actions.min() < 0 or actions.max() > 1:
            raise ValueError(f"CartPole's actions are the integers 0 and 1, not {actions}")
        starting = self.ended
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # euler, CartPoleEnv's integrator
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = np.stack([x, x_dot, theta, theta_dot], 1)
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) | (theta < -self.theta_threshold) | (
            theta > self.theta_threshold)
        # every step pays 1, the one that ends an episode too (Sutton and Barto's: 0, and -1 at the end)
        reward = np.where(terminated, -1.0, 0.0) if self.sutton_barto else np.ones(self.num_envs)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        # rows whose previous step ended an episode start a new one instead
        reward[starting], terminated[starting], truncated[starting] = 0.0, False, False
        self.ended = terminated | truncated
        if starting.any():
            self._start(np.flatnonzero(starting))
        return self._observations(), reward, terminated, truncated, {}


VECTOR = {"CartPoleNoVel-v1": CartPoleNoVelVector}


def register() -> None:
    """Registers the ids of ``NO_VELOCITY`` and ``WITH_STATE`` with gymnasium (with their task's time
    limit; ``VECTOR``'s as their vector entry point); idempotent."""
    for ids, entry_point in ((NO_VELOCITY, make_without_velocity), (WITH_STATE, make_with_state)):
        for env_id, full_id in ids.items():
            if env_id not in gym.registry:
                spec = gym.spec(full_id)
                gym.register(env_id, entry_point=entry_point, vector_entry_point=VECTOR.get(env_id),
                             kwargs={"full_id": full_id}, max_episode_steps=spec.max_episode_steps,
                             reward_threshold=spec.reward_threshold)


register()
