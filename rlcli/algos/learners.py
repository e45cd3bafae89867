"""Learners: the only code that steps environments during training. They meet agents through the
protocols of ``rlcli.algos.base`` alone, and hyperparameters through the fields named below."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from rlcli.algos.arrays import DeviceTensors, NumpyArrays, random_actions
from rlcli.algos.buffers import ReplayBuffer, RolloutBuffer
from rlcli.algos.frames import FrameReplayBuffer, PrioritizedFrameReplayBuffer, stacked_frames
from rlcli.algos.nstep import NStepReturns
from rlcli.algos.prioritized import PRIORITIES, PrioritizedReplayBuffer
from rlcli.algos.threads import Threads, torch_threads
from rlcli.envs import ManyAgentEnv, ResidentEnv, StepResult, VecEnv, agents_per_env
from rlcli.envs.faults import NonFiniteEnvOutput, first_non_finite, rollout_fault, transitions_fault
from rlcli.envs.snapshot import Snapshot

if TYPE_CHECKING:
    from rlcli.algos.base import Metrics, OffPolicyAgent, OnPolicyAgent
    from rlcli.nets.models import PolicySample


class OnPolicyConfig(Protocol):
    steps: int
    n_steps: int
    gamma: float
    gae_lambda: float


class OffPolicyConfig(Protocol):
    steps: int
    buffer_size: int
    learning_starts: int
    batch_size: int
    gamma: float
    utd_ratio: float
    log_every: int
    n_step: int
    prioritized: bool
    priority_alpha: float
    priority_beta: float
    frame_replay: bool


@dataclass
class EpisodeTracker:
    """Real game returns and lengths per env (unclipped, all lives), from raw rewards. With several agents
    per env (``agents_per_env`` consecutive rows, whose episodes end together), an episode's return is the
    team's, the sum over its agents, and its length the env's; each agent's return is kept as well."""

    n_envs: int  # rows
    agents_per_env: int = 1
    returns: np.ndarray = field(init=False)
    lengths: np.ndarray = field(init=False)
    finished_returns: list[float] = field(default_factory=list)
    finished_lengths: list[int] = field(default_factory=list)
    finished_agent_returns: list[np.ndarray] = field(default_factory=list)  # [agents_per_env] each

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.n_envs, dtype=np.float64)
        self.lengths = np.zeros(self.n_envs, dtype=np.int64)

    def add(self, raw_reward: np.ndarray, counted: np.ndarray, game_over: np.ndarray) -> None:
        """Accumulates one step."""
        self.returns += raw_reward
        self.lengths += counted
        ended = np.flatnonzero(game_over)
        if ended.size:
            self._finish(self.returns[ended], self.lengths[ended])
            self.returns[ended] = 0.0
            self.lengths[ended] = 0

    def _finish(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Records the episodes whose rows' ``returns`` and ``lengths`` these are, in row order."""
        agents = returns.reshape(-1, self.agents_per_env)
        self.finished_returns.extend(agents.sum(axis=1).tolist())
        self.finished_lengths.extend(lengths.reshape(-1, self.agents_per_env).max(axis=1).tolist())
        if self.agents_per_env > 1:
            self.finished_agent_returns.extend(agents)

    def drain(self) -> tuple[list[float], list[int]]:
        out = (self.finished_returns, self.finished_lengths)
        self.finished_returns, self.finished_lengths = [], []
        return out

    def drain_agents(self) -> np.ndarray | None:
        """Mean return of each agent over the episodes finished since the last call; None if none did."""
        if not self.finished_agent_returns:
            return None
        means = np.mean(self.finished_agent_returns, axis=0)
        self.finished_agent_returns = []
        return means

    def state(self) -> Snapshot:
        """The running episodes' returns and lengths so far, and the finished ones not yet drained."""
        return Snapshot({"finished_returns": self.finished_returns, "finished_lengths": self.finished_lengths,
                         "finished_agent_returns": [r.tolist() for r in self.finished_agent_returns]},
                        {"returns": torch.from_numpy(self.returns.copy()),
                         "lengths": torch.from_numpy(self.lengths.copy())})

    def load_state(self, snapshot: Snapshot) -> None:
        self.returns[:] = snapshot.tensors["returns"].numpy()
        self.lengths[:] = snapshot.tensors["lengths"].numpy()
        self.finished_returns = list(snapshot.values["finished_returns"])
        self.finished_lengths = list(snapshot.values["finished_lengths"])
        self.finished_agent_returns = [np.array(r) for r in snapshot.values.get("finished_agent_returns", [])]


class ResidentEpisodeTracker(EpisodeTracker):
    """EpisodeTracker over a ResidentEnv's tensors: the sums stay on its device, and the episodes that ended
    are read back once, when drained or saved, not at every step."""

    def __init__(self, n_envs: int, agents_per_env: int, device: torch.device) -> None:
        super().__init__(n_envs, agents_per_env)
        self.running = torch.zeros(n_envs, dtype=torch.float64, device=device)
        self.running_lengths = torch.zeros(n_envs, dtype=torch.int64, device=device)
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (ended, returns, lengths)

    def add(self, raw_reward: torch.Tensor, counted: torch.Tensor, game_over: torch.Tensor) -> None:
        self.running += raw_reward
        self.running_lengths += counted
        self.steps.append((game_over, self.running.clone(), self.running_lengths.clone()))
        self.running.masked_fill_(game_over, 0.0)
        self.running_lengths.masked_fill_(game_over, 0)

    def settle(self) -> None:
        """The episodes ended since the last call into the finished lists (one read from the device)."""
        if self.steps:
            ended, returns, lengths = (torch.stack(x) for x in zip(*self.steps, strict=True))
            self.steps = []
            self._finish(returns[ended].cpu().numpy(), lengths[ended].cpu().numpy())

    def drain(self) -> tuple[list[float], list[int]]:
        self.settle()
        return super().drain()

    def drain_agents(self) -> np.ndarray | None:
        self.settle()
        return super().drain_agents()

    def state(self) -> Snapshot:
        self.settle()
        self.returns[:] = self.running.cpu().numpy()  # the running episodes, read only for a checkpoint
        self.lengths[:] = self.running_lengths.cpu().numpy()
        return super().state()

    def load_state(self, snapshot: Snapshot) -> None:
        super().load_state(snapshot)
        self.steps = []
        self.running.copy_(torch.from_numpy(self.returns))
        self.running_lengths.copy_(torch.from_numpy(self.lengths))


def episode_tracker(n_envs: int, agents_per_env: int, device: torch.device | None) -> EpisodeTracker:
    """A tracker of ``n_envs`` rows' episodes, summed on ``device`` (a ResidentEnv's), or on the host where None."""
    if device is None:
        return EpisodeTracker(n_envs, agents_per_env)
    return ResidentEpisodeTracker(n_envs, agents_per_env, device)


class MetricMeans:
    """Means of per-update metrics over an iteration, each over the updates that reported it; tensors
    are summed on their device and read once."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: Metrics) -> None:
        for name, value in metrics.items():
            # a copy of the first: a compiled step's CUDA-graph outputs are overwritten by its next replay
            self.sums[name] = self.sums[name] + value if name in self.sums else torch.as_tensor(value).clone()
            self.counts[name] = self.counts.get(name, 0) + 1

    def means(self) -> dict[str, float]:
        if not self.sums:
            return {}
        totals = torch.stack(list(self.sums.values())).tolist()
        return {name: total / self.counts[name] for name, total in zip(self.sums, totals, strict=True)}


class OnPolicyLearner:
    """One on-policy iteration: a rollout of ``n_envs * n_steps`` env steps, then the agent's update,
    with the plan's threads for each (while collecting, the env backend's own threads need the cores)."""

    def __init__(self, env: VecEnv, agent: OnPolicyAgent, cfg: OnPolicyConfig, plan: Threads) -> None:
        self.collector = RolloutCollector(env, agent, cfg.n_steps, plan.overlaps_env)
        self.agent, self.cfg, self.plan = agent, cfg, plan
        agent.optimizers()  # built on first use (rlcli.algos.optim): before the first step, which may be compiled

    def iterate(self, step: int) -> tuple[int, dict[str, float]]:
        """Returns (env steps taken, metrics, ``charts/transitions`` among them: the steps that were no reset
        row); raises NonFiniteEnvOutput, before the update, where the env returned a NaN or an infinity."""
        cfg, env = self.cfg, self.collector.env
        agents = agents_per_env(env)
        rollout = self.collector.collect()
        fault = rollout_fault(rollout.obs, rollout.rewards, env.obs_layout, step, env.num_envs // agents)
        if fault is not None:
            raise fault
        batch = rollout.batch(cfg.gamma, cfg.gae_lambda)
        with torch_threads(self.plan.updating):
            metrics = self.agent.update(batch, progress=step / cfg.steps)
        out = {k: float(v) for k, v in metrics.items()}
        out["charts/transitions"] = float(rollout.valid.sum()) / agents
        if agents > 1 and isinstance(env, ManyAgentEnv):
            means = self.collector.episodes.drain_agents()
            for name, value in zip(env.agents, [] if means is None else means, strict=False):
                out[f"charts/episode_return/{name}"] = float(value)
        return env.num_envs // agents * cfg.n_steps, out

    @property
    def steps_per_iteration(self) -> int:
        env = self.collector.env
        return env.num_envs // agents_per_env(env) * self.cfg.n_steps

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        return self.collector.episodes.drain()

    def buffer_tensors(self) -> dict[str, torch.Tensor]:
        return {}  # on-policy: nothing outlives an iteration

    def load_buffer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        pass

    def live_state(self) -> Snapshot:
        return self.collector.live_state()

    def load_live_state(self, snapshot: Snapshot) -> None:
        self.collector.load_live_state(snapshot)


class RolloutCollector:
    """Steps the env ``n_steps`` times into the agent's rollout storage, carrying state across rollouts.
    ``overlap``: the critic and the buffer writes run while envpool's threads step the envs."""

    def __init__(self, env: VecEnv, agent: OnPolicyAgent, n_steps: int, overlap: bool) -> None:
        self.env, self.agent, self.n_steps, self.overlap = env, agent, n_steps, overlap
        self.device = agent.device
        self.buffer: RolloutBuffer = agent.new_rollout(env.num_envs)
        self.obs = torch.as_tensor(env.reset(), device=self.device)
        # True where the previous step ended an episode: this step is then a reset row to mask out
        self.prev_done = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)
        # a recurrent policy's state, and where the current rows start an episode (their state is zero)
        self.state = agent.initial_state(env.num_envs)
        self.starts = torch.ones(env.num_envs, dtype=torch.bool, device=self.device)
        # a ResidentEnv's arrays stay on its device: actions go to it as tensors, episodes are summed there
        self.resident = isinstance(env, ResidentEnv)
        self.episodes = episode_tracker(env.num_envs, agents_per_env(env), self.device if self.resident else None)

    def live_state(self) -> Snapshot:
        """What the next rollout continues from: the observations it acts on first, which rows follow a reset
        row and which start an episode, a recurrent policy's state, the agent's running state (the reward
        scaler's returns) and the episodes' partial returns."""
        tensors = {"obs": self.obs, "prev_done": self.prev_done, "starts": self.starts}
        if self.state is not None:
            tensors["policy_state"] = self.state
        return Snapshot.of({"collector": Snapshot({}, tensors), "agent": Snapshot({}, self.agent.running_state()),
                            "episodes": self.episodes.state()})

    def load_live_state(self, snapshot: Snapshot) -> None:
        saved = {k: t.to(self.device) for k, t in snapshot.part("collector").tensors.items()}
        self.obs, self.prev_done, self.starts = saved["obs"], saved["prev_done"], saved["starts"]
        if self.state is not None:
            self.state = saved["policy_state"]
        self.agent.load_running_state(snapshot.part("agent").tensors)
        self.episodes.load_state(snapshot.part("episodes"))

    @torch.no_grad()
    def collect(self) -> RolloutBuffer:
        agent, buf, env = self.agent, self.buffer, self.env
        prev_done_env = self.prev_done if self.resident else self.prev_done.cpu().numpy()  # as the env's arrays
        # Acting on one thread, the critic and the writes below run while envpool's threads step the
        # envs (Hopper x64: 3-10 ms less of a 200 ms rollout, values equal to the bit). A thread pool
        # (a CNN acts on every core) would spin beside those threads instead: Pong's rollout took
        # 7-12% longer, so it steps first.
        # A step's rewards, dones and episode bookkeeping are recorded during the next step, for the
        # same reason; nothing between needs them (the reward scaler's state is its own)
        pending: tuple[int, StepResult, torch.Tensor, np.ndarray | torch.Tensor] | None = None
        for t in range(self.n_steps):
            obs = agent.observe(self.obs)
            if self.state is None:
                sample = agent.sample(obs)
            else:
                sample = self._sample_recurrent(t, obs, self.state)
            actions = agent.env_actions(sample.actions)
            env.step_async(actions if self.resident else actions.cpu().numpy())
            result = None if self.overlap else env.step_wait()
            values = agent.value_of(sample)
            buf.obs[t] = obs
            buf.actions[t] = sample.actions
            buf.log_probs[t] = sample.log_probs
            buf.values[t] = values
            buf.valid[t] = ~self.prev_done
            if pending is not None:
                self._record(*pending)
            if result is None:
                result = env.step_wait()

            done_env = result.terminated | result.truncated
            self.starts = self.prev_done  # the row after a reset row is an episode's first
            self.prev_done = torch.as_tensor(done_env, device=self.device)
            pending = (t, result, self.prev_done, prev_done_env)
            self.obs = torch.as_tensor(result.obs, device=self.device)
            prev_done_env = done_env
        if pending is not None:
            self._record(*pending)
        if self.state is None:
            buf.values[-1] = agent.value(self.obs)
        else:
            buf.values[-1] = agent.value(self.obs, self.state.masked_fill(self.starts.unsqueeze(-1), 0.0))
        return buf

    def _sample_recurrent(self, t: int, obs: torch.Tensor, carried: torch.Tensor) -> PolicySample:
        """The policy's step from the ``carried`` state, zero where an episode starts; the state before a
        rollout's first step and the starts are what its update replays from."""
        buf = self.buffer
        state = carried.masked_fill(self.starts.unsqueeze(-1), 0.0)
        if t == 0:
            buf.state.copy_(state)
        buf.starts[t] = self.starts
        sample = self.agent.sample(obs, state)
        self.state = sample.state
        return sample

    def _record(self, t: int, result: StepResult, done: torch.Tensor, prev_done_env: np.ndarray | torch.Tensor) -> None:
        """Step ``t``'s scaled rewards and episode ends into the buffer, its returns into the tracker."""
        buf = self.buffer
        self.episodes.add(result.raw_reward, ~prev_done_env, result.game_over)
        buf.rewards[t] = self.agent.scale_rewards(torch.as_tensor(result.reward, device=self.device), done)
        buf.terminated[t] = torch.as_tensor(result.terminated, device=self.device)
        buf.dones[t] = done


def replay_buffer(cfg: OffPolicyConfig, obs_shape: tuple[int, ...], action_dim: int, device: torch.device,
                  obs_dtype: torch.dtype = torch.float32) -> ReplayBuffer:
    """The replay ``cfg`` asks for: uniform or prioritised, with each row's discount where returns are n-step."""
    if cfg.prioritized:
        return PrioritizedReplayBuffer(cfg.buffer_size, obs_shape, action_dim, device, obs_dtype,
                                       discounts=cfg.n_step > 1, alpha=cfg.priority_alpha,
                                       beta_start=cfg.priority_beta)
    return ReplayBuffer(cfg.buffer_size, obs_shape, action_dim, device, obs_dtype, discounts=cfg.n_step > 1)


class OffPolicyLearner:
    """One off-policy iteration: ``log_every`` env steps, with ``utd_ratio`` gradient steps per transition
    stored once the buffer holds more than ``learning_starts`` (or is full, where ``learning_starts`` is its
    size, as in the zoo's Atari values); until then actions are uniform random (so a resume without a saved
    buffer refills it before learning again)."""

    def __init__(self, env: VecEnv, agent: OffPolicyAgent, cfg: OffPolicyConfig, plan: Threads) -> None:
        self.env, self.agent, self.cfg, self.device, self.plan = env, agent, cfg, agent.device, plan
        agent.optimizers()  # built on first use (rlcli.algos.optim): before the first step, which may be compiled
        space, obs_space = env.single_action_space, env.single_observation_space
        # frames stay bytes (a quarter of float32's memory); every other observation is stored as float32
        obs_dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        self.buffer: ReplayBuffer | FrameReplayBuffer
        self.frames = cfg.frame_replay and stacked_frames(tuple(obs_space.shape), obs_space.dtype)
        if self.frames:
            shape, action_dim = tuple(obs_space.shape), int(np.prod(space.shape))
            self.buffer = PrioritizedFrameReplayBuffer(
                cfg.buffer_size, shape, env.num_envs, action_dim, self.device, cfg.n_step, cfg.gamma,
                cfg.priority_alpha, cfg.priority_beta) if cfg.prioritized else FrameReplayBuffer(
                cfg.buffer_size, shape, env.num_envs, action_dim, self.device, cfg.n_step, cfg.gamma)
        else:
            self.buffer = replay_buffer(cfg, tuple(obs_space.shape), int(np.prod(space.shape)), self.device,
                                        obs_dtype)
        self.nstep = None if cfg.n_step == 1 or self.frames else NStepReturns(
            cfg.n_step, cfg.gamma, env.num_envs, tuple(obs_space.shape), int(np.prod(space.shape)), self.device,
            obs_dtype)
        self.space = space
        self.mask_columns = env.obs_layout.mask_columns() if env.obs_layout is not None else []
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
        # a ResidentEnv's steps stay tensors on its device (its random actions and episode returns too, and the
        # replay holds them there); any other env's are numpy arrays on the host until they are stored
        env_device = env.device if isinstance(env, ResidentEnv) else None
        self.arrays: NumpyArrays | DeviceTensors = (
            NumpyArrays(seed) if env_device is None else DeviceTensors(seed, env_device))
        self.obs = env.reset()
        self.prev_done = self.arrays.zeros(env.num_envs)
        self.episodes = episode_tracker(env.num_envs, 1, env_device)
        self.updates_owed = 0.0
        # the replay's size at which gradient steps begin (it holds more than learning_starts); a full replay holds
        # no more, so a learning_starts of buffer_size learns once it is full
        self.learning_from = max(min(cfg.learning_starts + 1, self.buffer.capacity), cfg.batch_size)

    def iterate(self, step: int) -> tuple[int, dict[str, float]]:
        """Returns (env steps taken, mean metrics of the gradient steps made, their count and the transitions
        stored); raises NonFiniteEnvOutput where the env returned a NaN or an infinity."""
        agent, cfg, env, dev = self.agent, self.cfg, self.env, self.device
        n = env.num_envs
        means = MetricMeans()
        n_updates = taken = 0
        # where this iteration's transitions lie (the frame buffer finds them by step)
        first_row = 0 if isinstance(self.buffer, FrameReplayBuffer) else self.buffer.pos
        stored_each: list[int] = []
        while taken < cfg.log_every:
            obs = torch.as_tensor(self.obs, device=dev)
            agent.observe(obs, torch.as_tensor(~self.prev_done, device=dev))
            if self.buffer.size < cfg.learning_starts:
                actions = self.random_actions(n)
            else:
                actions = self.arrays.env_actions(agent.act(obs))
            result = env.step(actions)
            stored_each.append(self._store(obs, actions, result))
            self.prev_done = result.terminated | result.truncated
            self.obs = result.obs
            taken += n
            if self.buffer.size >= self.learning_from:
                self.updates_owed += cfg.utd_ratio * stored_each[-1]
                if self.updates_owed >= 1.0:
                    with torch_threads(self.plan.updating):
                        n_updates += self._update(means, step)
        self._check_env_output(first_row, stored_each, step)
        # the steps that were transitions (none of them a reset row), as stored: with n-step returns, as completed
        return taken, {"charts/gradient_steps": float(n_updates), "charts/transitions": float(sum(stored_each)),
                       **means.means()}

    def _store(self, obs: torch.Tensor, actions: np.ndarray | torch.Tensor, result: StepResult) -> int:
        """One vector step's transitions into the replay (through the n-step accumulator where returns are
        n-step), its rewards into the episodes' returns; returns how many transitions it stored. On a
        ResidentEnv that count is read back to the host at every step, the one read here (the frame buffer adds
        its check of the stacks): the replay's write position and the gradient steps owed are Python numbers."""
        dev, n = self.device, self.env.num_envs
        real = ~self.prev_done  # a reset row's action was ignored: it is no transition
        self.episodes.add(result.raw_reward, real, result.game_over)
        if isinstance(self.buffer, FrameReplayBuffer):
            self.buffer.add_step(*self._every_row(obs, actions, result, real))
            return int(real.sum())
        if self.nstep is not None:
            out = self.nstep.push(*self._every_row(obs, actions, result, real))
            if len(out.obs):
                self.buffer.add(*out)
            return len(out.obs)
        index = self.arrays.true_rows(real)
        stored = len(index)
        rows = slice(None) if stored == n else index  # a slice where every row is a transition: no gather
        # a Discrete space's actions as the buffer's one column
        acted = torch.as_tensor(actions[rows], device=dev).reshape(stored, self.buffer.actions.shape[1])
        self.buffer.add(obs[rows], acted, torch.as_tensor(result.reward[rows], device=dev),
                        torch.as_tensor(result.obs[rows], device=dev),
                        torch.as_tensor(result.terminated[rows], device=dev))
        return stored

    def _update(self, means: MetricMeans, step: int) -> int:
        """The gradient steps owed, each on a fresh batch; returns how many."""
        cfg, n_updates = self.cfg, 0
        while self.updates_owed >= 1.0:
            batch = self.buffer.sample(cfg.batch_size, step / cfg.steps)
            metrics = self.agent.update(batch)
            if cfg.prioritized:
                metrics = dict(metrics)
                self.buffer.update_priorities(batch.index, metrics.pop(PRIORITIES))
            means.add(metrics)
            n_updates += 1
            self.updates_owed -= 1.0
        return n_updates

    def _every_row(self, obs: torch.Tensor, actions: np.ndarray | torch.Tensor, result: StepResult,
                   real: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A vector step's every row on the learner's device, with which are transitions (``real``): what the
        frame buffer's ``add_step`` and the n-step accumulator's ``push`` take, which pick the transitions out."""
        dev, n = self.device, self.env.num_envs
        done_t, real_t = (torch.as_tensor(x, device=dev) for x in (result.terminated | result.truncated, real))
        return (obs, torch.as_tensor(actions, device=dev).reshape(n, -1).float(),
                torch.as_tensor(result.reward, device=dev).float(), torch.as_tensor(result.obs, device=dev),
                torch.as_tensor(result.terminated, device=dev), done_t, real_t)

    def random_actions(self, n: int) -> np.ndarray | torch.Tensor:
        """``n`` uniform random actions, as the env's arrays: a Box's within its bounds, a Discrete's among its
        choices (those the observations' action mask allows, where the env publishes one)."""
        return random_actions(self.space, self.arrays, n, self.obs, self.mask_columns)

    def _check_env_output(self, first_row: int, stored_each: list[int], step: int) -> None:
        """Raises NonFiniteEnvOutput where a transition stored since ``first_row`` holds a NaN or an infinity
        (``stored_each``: the rows each env step stored; ``step``: the run's step before the first)."""
        buffer, n = self.buffer, self.env.num_envs
        if isinstance(buffer, FrameReplayBuffer):  # frames are bytes, always finite: the rewards alone
            kept = min(len(stored_each), buffer.slots - 1)
            rewards, real = buffer.recent_rewards(kept)
            at = first_non_finite(torch.where(real, rewards, 0.0))
            if at is not None:
                raise NonFiniteEnvOutput("reward", step + n * (len(stored_each) - kept + at[0] + 1))
            return
        counts = torch.tensor(stored_each)
        ends = step + n * torch.arange(1, len(stored_each) + 1)
        steps = torch.repeat_interleave(ends, counts)[-buffer.capacity:]  # the oldest were overwritten
        start = (first_row + max(int(counts.sum()) - buffer.capacity, 0)) % buffer.capacity
        rows = (start + torch.arange(len(steps))) % buffer.capacity
        rows = rows.to(self.device)
        fault = transitions_fault(buffer.obs[rows], buffer.rewards[rows], buffer.next_obs[rows],
                                  self.env.obs_layout, steps)
        if fault is not None:
            raise fault

    @property
    def steps_per_iteration(self) -> int:
        n = self.env.num_envs
        return -(-self.cfg.log_every // n) * n  # whole vector steps up to log_every

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        return self.episodes.drain()

    def buffer_tensors(self) -> dict[str, torch.Tensor]:
        return self.buffer.state_tensors()

    def load_buffer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.buffer.load_state_tensors(tensors)

    def live_state(self) -> Snapshot:
        """The observations the next step acts on, which rows follow a reset row, the random actions'
        generator, the fraction of a gradient step owed and the episodes' partial returns."""
        arrays = self.arrays.state()
        learner = Snapshot({**arrays.values, "updates_owed": self.updates_owed},
                           {**arrays.tensors, "obs": self.arrays.saved(self.obs),
                            "prev_done": self.arrays.saved(self.prev_done)})
        parts = {"learner": learner, "episodes": self.episodes.state()}
        return Snapshot.of(parts if self.nstep is None else {**parts, "n_step": self.nstep.state()})

    def load_live_state(self, snapshot: Snapshot) -> None:
        learner = snapshot.part("learner")
        self.obs, self.prev_done = (self.arrays.loaded(learner.tensors[name]) for name in ("obs", "prev_done"))
        self.arrays.load_state(learner)
        self.updates_owed = float(learner.values["updates_owed"])
        self.episodes.load_state(snapshot.part("episodes"))
        if self.nstep is not None:
            self.nstep.load_state(snapshot.part("n_step"))
