"""Evaluation episodes: the only other code that steps environments."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from rlcli.algos import Agent
from rlcli.envs import VecEnv


class EvalResult(NamedTuple):
    returns: list[float]
    lengths: list[int]

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def as_dict(self) -> dict[str, float | int | list]:
        return {"mean_return": self.mean, "std_return": self.std, "episodes": len(self.returns),
                "mean_length": float(np.mean(self.lengths)), "returns": self.returns,
                "lengths": self.lengths}


@torch.no_grad()
def evaluate(agent: Agent, env: VecEnv, episodes: int, deterministic: bool = True,
             on_frame: Callable[[], None] | None = None) -> EvalResult:
    """Runs ``episodes`` full games (all lives), spread evenly over the envs so that short episodes
    are not over-represented; returns their unclipped returns and lengths in env steps."""
    n = env.num_envs
    targets = np.array([(episodes + i) // n for i in range(n)])
    done_counts = np.zeros(n, dtype=np.int64)
    ep_returns = np.zeros(n)
    ep_lengths = np.zeros(n, dtype=np.int64)
    returns: list[float] = []
    lengths: list[int] = []
    prev_done = np.zeros(n, dtype=bool)
    obs = env.reset()
    while (done_counts < targets).any():
        actions = agent.predict(torch.as_tensor(obs, device=agent.device), deterministic)
        result = env.step(actions.cpu().numpy())
        if on_frame is not None:
            on_frame()
        ep_returns += result.raw_reward
        ep_lengths += ~prev_done
        prev_done = result.terminated | result.truncated
        for i in np.flatnonzero(result.game_over):
            if done_counts[i] < targets[i]:
                returns.append(float(ep_returns[i]))
                lengths.append(int(ep_lengths[i]))
                done_counts[i] += 1
            ep_returns[i] = 0.0
            ep_lengths[i] = 0
        obs = result.obs
    return EvalResult(returns, lengths)


@torch.no_grad()
def sample_observations(agent: Agent, env: VecEnv, steps: int, deterministic: bool = False) -> np.ndarray:
    """Raw observations met while the agent acts for ``steps`` vector steps, as the env produces
    them (no normalisation): [steps * n_envs, *obs_shape]. Export checks its files on these."""
    obs = env.reset()
    seen = [obs.copy()]  # a backend may reuse its output buffer on the next step
    for _ in range(steps - 1):
        actions = agent.predict(torch.as_tensor(obs, device=agent.device), deterministic)
        obs = env.step(actions.cpu().numpy()).obs
        seen.append(obs.copy())
    return np.concatenate(seen)
