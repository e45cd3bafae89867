"""Evaluation episodes: the only other code that steps environments."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from rlcli.agents import agent_from_run, make_env, resolve_device
from rlcli.algos.base import Agent
from rlcli.envs import VecEnv
from rlcli.rundir import RunDir


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


class Actor:
    """A policy acting step after step in ``n`` envs: a recurrent one's state is carried, and set to zero
    where an episode starts (the row after a reset row, under next-step auto-reset)."""

    def __init__(self, policy: nn.Module, n: int, device: torch.device) -> None:
        self.policy, self.device = policy, device
        size = getattr(policy, "state_size", 0)
        self.state = torch.zeros(n, size, device=device) if size else None

    def __call__(self, obs: np.ndarray) -> torch.Tensor:
        """Env actions for raw observations [n, ...]."""
        if self.state is None:
            return self.policy(torch.as_tensor(obs, device=self.device))
        actions, self.state = self.policy(torch.as_tensor(obs, device=self.device), self.state)
        return actions

    def next_step(self, reset_rows: np.ndarray) -> None:
        """After a step: the observations it returned for ``reset_rows`` (the rows whose previous step
        ended an episode) are the first of new episodes."""
        if self.state is not None and reset_rows.any():
            self.state[torch.as_tensor(reset_rows, device=self.device)] = 0.0


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
    act = Actor(agent.policy(deterministic), n, agent.device)
    obs = env.reset()
    while (done_counts < targets).any():
        actions = act(obs)
        result = env.step(actions.cpu().numpy())
        if on_frame is not None:
            on_frame()
        ep_returns += result.raw_reward
        ep_lengths += ~prev_done
        act.next_step(prev_done)
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


class Recording(NamedTuple):
    """Episodes played by a saved agent, with what the screen showed."""

    result: EvalResult
    frames: list[np.ndarray]  # RGB, one per env step; empty unless rendered to "rgb_array"
    fps: int | None  # the frame rate of real time; None when nothing was rendered


def render_off_screen() -> None:
    """Renders without a display: MuJoCo through EGL, pygame into a dummy video driver. Both read
    their setting when first imported, so this has to come before any environment is made."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def record_episodes(run: RunDir, episodes: int, seed: int, *, deterministic: bool = True,
                    num_envs: int = 1, render_mode: str | None = None, best: bool = False) -> Recording:
    """Plays ``episodes`` episodes of a saved run on the CPU, over ``num_envs`` envs seeded from
    ``seed``. ``render_mode`` "rgb_array" keeps a frame per env step (``render_off_screen`` first,
    where there is no display), "human" shows a window; either needs ``num_envs`` 1. ``best``: the best
    evaluated model rather than the last."""
    if render_mode is not None and num_envs != 1:
        raise ValueError(f"rendering shows one env; num_envs is {num_envs}")
    env = make_env(run.cfg, num_envs, seed, render_mode=render_mode)
    frames: list[np.ndarray] = []
    try:
        agent = agent_from_run(run, env, resolve_device("cpu"), best)
        on_frame = (lambda: frames.append(env.render())) if render_mode == "rgb_array" else None  # type: ignore[attr-defined]
        result = evaluate(agent, env, episodes, deterministic, on_frame=on_frame)
        fps = env.render_fps if render_mode is not None else None  # type: ignore[attr-defined]
    finally:
        env.close()
    return Recording(result, frames, fps)


class Episodes(NamedTuple):
    """What envs showed a policy step after step: raw observations [steps, n_envs, *obs_shape] and where
    each row starts an episode [steps, n_envs] (a recurrent policy's state is zero there)."""

    obs: np.ndarray
    starts: np.ndarray


@torch.no_grad()
def sample_episodes(agent: Agent, env: VecEnv, steps: int, deterministic: bool = False) -> Episodes:
    """Raw observations met while the agent acts for ``steps`` vector steps, as the env produces them
    (no normalisation), with the episode starts. Export checks its files on these."""
    act = Actor(agent.policy(deterministic), env.num_envs, agent.device)
    obs = env.reset()
    seen = [obs.copy()]  # a backend may reuse its output buffer on the next step
    starts = [np.ones(env.num_envs, dtype=bool)]
    prev_done = np.zeros(env.num_envs, dtype=bool)
    for _ in range(steps - 1):
        result = env.step(act(obs).cpu().numpy())
        act.next_step(prev_done)
        starts.append(prev_done)
        prev_done = result.terminated | result.truncated
        obs = result.obs
        seen.append(obs.copy())
    return Episodes(np.stack(seen), np.stack(starts))
