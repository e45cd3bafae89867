"""A device-resident env seen through numpy arrays on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlcli.envs.base import SteppedOnWait, StepResult
from rlcli.envs.snapshot import Snapshot


class HostArrays(SteppedOnWait):
    """A device-resident env seen through numpy arrays, for the loops that read every step on the host
    (evaluation, play, export's check)."""

    def __init__(self, env: Any) -> None:  # a ResidentEnv with VecEnv's methods over tensors
        self.env = env
        self.backend, self.num_envs, self.obs_layout = env.backend, env.num_envs, env.obs_layout
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space

    def reset(self) -> np.ndarray:
        return self.env.reset().cpu().numpy()

    def step(self, actions: np.ndarray) -> StepResult[np.ndarray]:
        result = self.env.step(torch.as_tensor(np.asarray(actions), device=self.env.device))
        return StepResult(*(x.cpu().numpy() for x in result))


    def state(self) -> Snapshot:
        return self.env.state()

    def load_state(self, snapshot: Snapshot) -> None:
        self.env.load_state(snapshot)

    def close(self) -> None:
        self.env.close()
