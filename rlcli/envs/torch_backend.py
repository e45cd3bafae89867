"""torch backend: tasks whose physics is torch code over a batch of envs, on the training device.

A step takes the actions as a tensor on that device and returns every array of its StepResult as tensors on
it, so a rollout never leaves the device. The auto-reset rule is the other backends' (``rlcli.envs.base``): a
step after a done ignores its action and returns a first observation with reward 0; the observation that comes
with a done is the real final one; the time limit is a truncation. Every row's dynamics is computed and the
rows that reset take a fresh state instead (``torch.where``), so a step reads nothing back to the host.

The tasks are gymnasium's classic-control ones with its constants, float32: a step from the same state agrees
with gymnasium's to float32 rounding. The envs share one random generator, seeded with the run's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from rlcli.envs.base import SteppedOnWait, StepResult
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.errors import UsageError


class Physics(Protocol):
    """One task: its spaces, time limit and batched dynamics over a state tensor [n_envs, state_dim]."""

    @property
    def observation_space(self) -> gym.spaces.Box: ...

    @property
    def action_space(self) -> gym.Space: ...

    @property
    def max_episode_steps(self) -> int: ...

    def initial(self, n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor: ...

    def step(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next state, reward, terminated) for every row."""
        ...

    def observe(self, state: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class CartPole:
    """gymnasium's CartPole-v1 (Barto, Sutton and Anderson's cart-pole, Euler integration)."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_episode_steps: int = 500

    @property
    def observation_space(self) -> gym.spaces.Box:
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32)

    @property
    def action_space(self) -> gym.Space:
        return gym.spaces.Discrete(2)

    def initial(self, n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.rand(n, 4, generator=generator, device=device) * 0.1 - 0.05

    def step(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(actions.reshape(-1) == 1, self.force_mag, -self.force_mag)
        cos, sin = torch.cos(theta), torch.sin(theta)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * x_acc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        return torch.stack([x, x_dot, theta, theta_dot], -1), torch.ones_like(x), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.clone()  # the caller's to keep, apart from the env's state


@dataclass(frozen=True)
class Pendulum:
    """gymnasium's Pendulum-v1: swing a pendulum up and hold it, torque in [-2, 2]."""

    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    length: float = 1.0
    max_episode_steps: int = 200

    @property
    def observation_space(self) -> gym.spaces.Box:
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32)

    @property
    def action_space(self) -> gym.Space:
        return gym.spaces.Box(-self.max_torque, self.max_torque, (1,), dtype=np.float32)

    def initial(self, n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        unit = torch.rand(n, 2, generator=generator, device=device) * 2 - 1
        return unit * torch.tensor([math.pi, 1.0], device=device)

    def step(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        theta, theta_dot = state.unbind(-1)
        u = actions.reshape(-1).clamp(-self.max_torque, self.max_torque)
        normalized = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        costs = normalized**2 + 0.1 * theta_dot**2 + 0.001 * u**2
        theta_dot = theta_dot + (3 * self.g / (2 * self.length) * torch.sin(theta)
                                 + 3.0 / (self.m * self.length**2) * u) * self.dt
        theta_dot = theta_dot.clamp(-self.max_speed, self.max_speed)
        theta = theta + theta_dot * self.dt
        return torch.stack([theta, theta_dot], -1), -costs, torch.zeros_like(theta, dtype=torch.bool)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(-1)
        return torch.stack([torch.cos(theta), torch.sin(theta), theta_dot], -1)


TASKS: dict[str, Physics] = {"CartPole-v1": CartPole(), "Pendulum-v1": Pendulum()}


def on_current_gpu(device: torch.device) -> torch.device:
    """``cuda`` as the process's current GPU (a distributed run's own), any other device as it is."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def torch_task(env_id: str) -> Physics:
    try:
        return TASKS[env_id]
    except KeyError:
        raise UsageError(f"the torch backend has no environment '{env_id}' (it has {', '.join(TASKS)}); "
                         "use --backend auto") from None


class TorchVecEnv(SteppedOnWait):
    """``num_envs`` envs of a torch task on ``device``; its arrays are tensors there. The tensors a step
    returns are the caller's: the env never writes to them again."""

    backend = "torch"
    obs_layout = None

    def __init__(self, env_id: str, num_envs: int, seed: int, device: torch.device | str = "cpu",
                 kwargs: dict[str, Any] | None = None) -> None:
        self.physics = torch_task(env_id)
        unknown = set(kwargs or {}) - {"max_episode_steps"}
        if unknown:
            raise UsageError(f"the torch backend's {env_id} takes max_episode_steps alone, not "
                             f"{', '.join(sorted(unknown))}")
        self.max_episode_steps = int((kwargs or {}).get("max_episode_steps", self.physics.max_episode_steps))
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.device = on_current_gpu(torch.device(device))
        self.single_observation_space = self.physics.observation_space
        self.single_action_space = self.physics.action_space
        self.single_action_space.seed(seed)
        self.generator = torch.Generator(self.device)
        self.reset()

    def reset(self) -> torch.Tensor:
        self.generator.manual_seed(self.seed)
        self.physical = self.physics.initial(self.num_envs, self.generator, self.device)
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self.physics.observe(self.physical)

    def step(self, actions: torch.Tensor | np.ndarray) -> StepResult[torch.Tensor]:
        actions = torch.as_tensor(actions, device=self.device)
        stepped, reward, terminated = self.physics.step(self.physical, actions)
        fresh = self.physics.initial(self.num_envs, self.generator, self.device)
        resetting = self.done
        self.physical = torch.where(resetting.unsqueeze(-1), fresh, stepped)
        self.elapsed = torch.where(resetting, 0, self.elapsed + 1)
        terminated = terminated & ~resetting
        truncated = self.elapsed >= self.max_episode_steps
        reward = torch.where(resetting, 0.0, reward)
        self.done = terminated | truncated
        # the caller's own tensors: the env reads self.done again at the next step
        return StepResult(self.physics.observe(self.physical), reward, terminated, truncated, reward.clone(),
                          self.done.clone())


    def state(self) -> Snapshot:
        """The envs' physical states, steps into their episodes, which ended, and the generator's state."""
        tensors = {"state": self.physical, "elapsed": self.elapsed, "done": self.done}
        return Snapshot({"env_id": self.env_id}, {**{k: v.to("cpu", copy=True) for k, v in tensors.items()},
                                                  "generator": self.generator.get_state()})

    def load_state(self, snapshot: Snapshot) -> None:
        tensors = snapshot.tensors
        if snapshot.values.get("env_id") != self.env_id or tuple(tensors["state"].shape) != tuple(self.physical.shape):
            raise EnvStateUnreadable(f"the saved envs are not {self.num_envs} of {self.env_id} on the torch backend")
        self.physical, self.elapsed, self.done = (tensors[k].to(self.device) for k in ("state", "elapsed", "done"))
        self.generator.set_state(tensors["generator"])

    def close(self) -> None:
        pass
