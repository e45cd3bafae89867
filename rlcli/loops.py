"""The only code that steps environments during training."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from rlcli.algos.ppo import PPO
from rlcli.algos.sac import ACTOR_METRICS as SAC_ACTOR_METRICS
from rlcli.algos.sac import METRICS as SAC_METRICS
from rlcli.algos.sac import SAC
from rlcli.buffers import ReplayBuffer, RolloutBuffer
from rlcli.envs import StepResult, VecEnv


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


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Runs the block with ``n`` torch intra-op threads (None: unchanged), then restores the count."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class PPOLearner:
    """One PPO iteration: a rollout of ``n_envs * n_steps`` env steps, then the update epochs.
    ``update_threads`` widens torch's thread pool for the update alone: while collecting, the env
    backend's own threads need the cores."""

    def __init__(self, env: VecEnv, agent: PPO, total_steps: int, update_threads: int | None = None) -> None:
        self.collector = RolloutCollector(env, agent)
        self.episodes = self.collector.episodes
        self.agent = agent
        self.total_steps = total_steps
        self.update_threads = update_threads

    def iterate(self, step: int) -> tuple[int, dict[str, float]]:
        """Returns (env steps taken, metrics)."""
        cfg = self.agent.cfg
        batch = self.collector.collect().batch(cfg.gamma, cfg.gae_lambda)
        with torch_threads(self.update_threads):
            metrics = self.agent.update(batch, progress=step / self.total_steps)
        return cfg.n_envs * cfg.n_steps, metrics

    def buffer_tensors(self) -> dict[str, torch.Tensor]:
        return {}  # on-policy: nothing outlives an iteration

    def load_buffer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        pass


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
        # Acting on one thread, the critic and the writes below run while envpool's threads step the
        # envs (Hopper x64: 3-10 ms less of a 200 ms rollout, values equal to the bit). A thread pool
        # (a CNN acts on every core) would spin beside those threads instead: Pong's rollout took
        # 7-12% longer, so it steps first.
        overlap = torch.get_num_threads() == 1
        # a step's rewards, dones and episode bookkeeping are recorded during the next step, for the
        # same reason; nothing between needs them (the reward scaler's state is its own)
        pending: tuple[int, StepResult, torch.Tensor, np.ndarray] | None = None
        for t in range(agent.cfg.n_steps):
            obs = agent.obs_norm(self.obs, update=True)
            with agent.training_precision():
                sample = policy.sample(obs)
            env.step_async(policy.env_actions(sample.actions).cpu().numpy())
            result = None if overlap else env.step_wait()
            with agent.training_precision():
                values = policy.value_of(sample)
            buf.obs[t] = obs
            buf.actions[t] = sample.actions
            buf.log_probs[t] = sample.log_probs
            buf.values[t] = values
            buf.valid[t] = ~self.prev_done
            if pending is not None:
                self._record(*pending)
            if result is None:
                result = env.step_wait()

            done_np = result.terminated | result.truncated
            self.prev_done = torch.as_tensor(done_np, device=self.device)
            pending = (t, result, self.prev_done, prev_done_np)
            self.obs = torch.as_tensor(result.obs, device=self.device)
            prev_done_np = done_np
        if pending is not None:
            self._record(*pending)
        with agent.training_precision():
            buf.values[-1] = policy.value(agent.obs_norm(self.obs))
        return buf

    def _record(self, t: int, result: StepResult, done: torch.Tensor, prev_done_np: np.ndarray) -> None:
        """Step ``t``'s scaled rewards and episode ends into the buffer, its returns into the tracker."""
        buf = self.buffer
        self.episodes.add(result.raw_reward, ~prev_done_np, result.game_over)
        buf.rewards[t] = self.agent.reward_scaler(torch.as_tensor(result.reward, device=self.device), done)
        buf.terminated[t] = torch.as_tensor(result.terminated, device=self.device)
        buf.dones[t] = done


class SACLearner:
    """One SAC iteration: ``log_every`` env steps, with ``utd_ratio`` gradient steps per transition
    stored once the buffer holds more than ``learning_starts``; until then actions are uniform random
    (so a resume without a saved buffer refills it before learning again)."""

    def __init__(self, env: VecEnv, agent: SAC, total_steps: int, update_threads: int | None = None) -> None:
        cfg = agent.cfg
        self.env, self.agent, self.device = env, agent, agent.device
        space = env.single_action_space
        self.buffer = ReplayBuffer(cfg.buffer_size, tuple(env.single_observation_space.shape),
                                   agent.action_dim, self.device)
        self.low, self.high = space.low, space.high  # type: ignore[attr-defined]
        self.rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))
        self.obs = env.reset()
        self.prev_done = np.zeros(env.num_envs, dtype=bool)
        self.episodes = EpisodeTracker(env.num_envs)
        self.updates_owed = 0.0

    def iterate(self, step: int) -> tuple[int, dict[str, float]]:
        """Returns (env steps taken, mean metrics of the gradient steps made)."""
        agent, cfg, env = self.agent, self.agent.cfg, self.env
        n = env.num_envs
        sums = torch.zeros(len(SAC_METRICS) + 1, device=self.device)
        n_updates = 0
        taken = 0
        while taken < cfg.log_every:
            obs = torch.as_tensor(self.obs, device=self.device)
            if cfg.normalize_obs:
                agent.obs_norm.rms.update(obs[torch.as_tensor(~self.prev_done, device=self.device)])
            if self.buffer.size < cfg.learning_starts:
                actions = self.rng.uniform(self.low, self.high, (n, *self.low.shape)).astype(np.float32)
            else:
                with torch.no_grad():
                    actions = agent.actor.act(agent.obs_norm(obs.float())).cpu().numpy()
            result = env.step(actions)
            real = ~self.prev_done  # a reset row's action was ignored: it is no transition
            self.episodes.add(result.raw_reward, real, result.game_over)
            rows = slice(None) if real.all() else np.flatnonzero(real)
            stored = int(real.sum())
            dev = self.device
            self.buffer.add(obs[rows], torch.as_tensor(actions[rows], device=dev),
                            torch.as_tensor(result.reward[rows], device=dev),
                            torch.as_tensor(result.obs[rows], device=dev),
                            torch.as_tensor(result.terminated[rows], device=dev))
            self.prev_done = result.terminated | result.truncated
            self.obs = result.obs
            taken += n
            if self.buffer.size > max(cfg.learning_starts, cfg.batch_size - 1):
                self.updates_owed += cfg.utd_ratio * stored
                while self.updates_owed >= 1.0:
                    sums += agent.update(self.buffer.sample(cfg.batch_size))
                    n_updates += 1
                    self.updates_owed -= 1.0
        metrics = {"charts/gradient_steps": float(n_updates)}
        if n_updates:
            *totals, actor_steps = sums.tolist()
            for i, (name, total) in enumerate(zip(SAC_METRICS, totals, strict=True)):
                metrics[name] = total / (max(actor_steps, 1.0) if i in SAC_ACTOR_METRICS else n_updates)
        return taken, metrics

    def buffer_tensors(self) -> dict[str, torch.Tensor]:
        return self.buffer.state_tensors()

    def load_buffer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.buffer.load_state_tensors(tensors)
