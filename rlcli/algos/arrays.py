"""Where the off-policy learner's per-step arrays live: numpy arrays on the host for an env that steps in numpy,
or tensors on the device of a ResidentEnv. Each side has its own generator for the warm-up's random actions, so
that one loop serves both without copying a resident env's steps to the host."""

from __future__ import annotations

from typing import Protocol

import gymnasium as gym
import numpy as np
import torch

from rlcli.envs.base import ArrayT
from rlcli.envs.snapshot import Snapshot


class StepArrays(Protocol[ArrayT]):
    """The operations the learner's loop needs of the arrays an env steps in."""

    def zeros(self, n: int) -> ArrayT:
        """``n`` False flags."""
        ...

    def env_actions(self, actions: torch.Tensor) -> ArrayT:
        """The agent's actions as the env takes them."""
        ...

    def true_rows(self, mask: ArrayT) -> ArrayT:
        """The indices where ``mask`` is True, in order."""
        ...

    def random(self, shape: tuple[int, ...]) -> ArrayT:
        """Uniform floats in [0, 1)."""
        ...

    def integers(self, high: int, n: int) -> ArrayT:
        """``n`` uniform integers in [0, high)."""
        ...

    def uniform(self, low: np.ndarray, high: np.ndarray, n: int) -> ArrayT:
        """``n`` float32 rows uniform in [low, high)."""
        ...

    def saved(self, array: ArrayT) -> torch.Tensor:
        """``array`` as a checkpoint's tensor."""
        ...

    def loaded(self, tensor: torch.Tensor) -> ArrayT:
        """A checkpoint's ``saved`` tensor as this side's array again."""
        ...

    def state(self) -> Snapshot:
        """The random generator's state, under ``rng``."""
        ...

    def load_state(self, snapshot: Snapshot) -> None: ...


class NumpyArrays:
    """An env's numpy arrays, on the host: the agent's actions are read back to it, random ones drawn by numpy."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=bool)

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        return actions.cpu().numpy()

    def true_rows(self, mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask)

    def random(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.random(shape)

    def integers(self, high: int, n: int) -> np.ndarray:
        return self.rng.integers(0, high, n)

    def uniform(self, low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
        return self.rng.uniform(low, high, (n, *low.shape)).astype(np.float32)

    def saved(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array))

    def loaded(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.numpy().copy()

    def state(self) -> Snapshot:
        return Snapshot({"rng": self.rng.bit_generator.state}, {})

    def load_state(self, snapshot: Snapshot) -> None:
        self.rng.bit_generator.state = snapshot.values["rng"]


class DeviceTensors:
    """A ResidentEnv's tensors on ``device``: the agent's actions stay there, random ones are drawn there by a
    torch generator of its own."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.device = device
        self.generator = torch.Generator(device)
        self.generator.manual_seed(seed)

    def zeros(self, n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.bool, device=self.device)

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions

    def true_rows(self, mask: torch.Tensor) -> torch.Tensor:
        # read back to the host once a step (the indices' count): how many rows are transitions decides where
        # the replay writes next and how many gradient steps are owed
        return mask.nonzero(as_tuple=True)[0]

    def random(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device)

    def integers(self, high: int, n: int) -> torch.Tensor:
        return torch.randint(0, int(high), (n,), generator=self.generator, device=self.device)

    def uniform(self, low: np.ndarray, high: np.ndarray, n: int) -> torch.Tensor:
        low_t, high_t = (torch.as_tensor(x, dtype=torch.float32, device=self.device) for x in (low, high))
        return low_t + (high_t - low_t) * self.random((n, *low.shape))

    def saved(self, array: torch.Tensor) -> torch.Tensor:
        return array

    def loaded(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def state(self) -> Snapshot:
        return Snapshot({}, {"rng": self.generator.get_state()})

    def load_state(self, snapshot: Snapshot) -> None:
        if "rng" in snapshot.tensors:
            self.generator.set_state(snapshot.tensors["rng"])
            return
        # a run saved while its warm-up actions came from numpy on the host: it goes on from a seed that
        # state gives, the same on every resume of that checkpoint
        rng = np.random.default_rng()
        rng.bit_generator.state = snapshot.values["rng"]
        self.generator.manual_seed(int(rng.integers(0, 2**31 - 1)))


def random_actions(space: gym.Space, arrays: StepArrays[ArrayT], n: int, obs: ArrayT, mask_columns: list[int]
                   ) -> ArrayT:
    """``n`` uniform random actions drawn on ``arrays``' side: a Box's within its bounds, a Discrete's among its
    choices, numbered from 0 as the agents number them (those the action mask in ``obs``' ``mask_columns``
    allows, where the env publishes one)."""
    if isinstance(space, gym.spaces.Discrete):
        if mask_columns:
            allowed = obs[:, mask_columns] > 0.5
            return (arrays.random((n, int(space.n))) * allowed).argmax(-1)
        return arrays.integers(space.n, n)
    assert isinstance(space, gym.spaces.Box), space  # off-policy algorithms act in Discrete or Box spaces
    return arrays.uniform(space.low, space.high, n)
