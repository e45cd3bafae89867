"""The only code that steps environments during training."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlcli.algos.ppo import PPO
from rlcli.buffers import RolloutBuffer
from rlcli.envs import VecEnv


@dataclass
class EpisodeTracker:
    """Real game returns and lengths per env (unclipped, all lives), from raw rewards."""

    n_envs: int
    returns: np.ndarray = field(init=False)
    lengths: np.ndarray = field(init=False)
    finished_returns: list[float] = field(default_factory=list)
    finished_lengths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.n_envs, dtype=np.float64)
        self.lengths = np.zeros(self.n_envs, dtype=np.int64)

    def add(self, raw_reward: np.ndarray, counted: np.ndarray, game_over: np.ndarray) -> np.ndarray:
        """Accumulates one step; returns the indices of envs whose episode just ended."""
        self.returns += raw_reward
        self.lengths += counted
        ended = np.flatnonzero(game_over)
        if ended.size:
            self.finished_returns.extend(self.returns[ended].tolist())
            self.finished_lengths.extend(self.lengths[ended].tolist())
            self.returns[ended] = 0.0
            self.lengths[ended] = 0
        return ended

    def drain(self) -> tuple[list[float], list[int]]:
        out = (self.finished_returns, self.finished_lengths)
        self.finished_returns, self.finished_lengths = [], []
        return out


class RolloutCollector:
    """Steps the env ``n_steps`` times into a preallocated buffer, carrying state across rollouts."""

    def __init__(self, env: VecEnv, agent: PPO) -> None:
        self.env = env
        self.agent = agent
        self.device = agent.device
        self.buffer: RolloutBuffer = agent.make_buffer(env.num_envs)
        self.obs = torch.as_tensor(env.reset(), device=self.device)
        # True where the previous step ended an episode: this step is then a reset row to mask out
        self.prev_done = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)
        self.episodes = EpisodeTracker(env.num_envs)

    @torch.no_grad()
    def collect(self) -> RolloutBuffer:
        agent, buf, env = self.agent, self.buffer, self.env
        policy = agent.policy
        prev_done_np = self.prev_done.cpu().numpy()
        for t in range(agent.cfg.n_steps):
            obs = agent.obs_norm(self.obs, update=True)
            out = policy.act(obs)
            result = env.step(policy.env_actions(out.actions).cpu().numpy())

            done_np = result.terminated | result.truncated
            self.episodes.add(result.raw_reward, ~prev_done_np, result.game_over)
            terminated = torch.as_tensor(result.terminated, device=self.device)
            done = torch.as_tensor(done_np, device=self.device)
            reward = torch.as_tensor(result.reward, device=self.device)

            buf.obs[t] = obs
            buf.actions[t] = out.actions
            buf.log_probs[t] = out.log_probs
            buf.values[t] = out.values
            buf.rewards[t] = agent.reward_scaler(reward, done)
            buf.terminated[t] = terminated
            buf.dones[t] = done
            buf.valid[t] = ~self.prev_done

            self.obs = torch.as_tensor(result.obs, device=self.device)
            self.prev_done = done
            prev_done_np = done_np
        buf.values[-1] = policy.value(agent.obs_norm(self.obs))
        return buf
