"""Deep Q-learning (Mnih et al. 2015) for Discrete actions, with double Q-learning (van Hasselt et al. 2016)
and dueling heads (Wang et al. 2016) as settings: its hyperparameters, search space, thread policy and agent.

It rides the off-policy learner SAC uses (replay, random actions before ``learning_starts``, ``utd_ratio``
gradient steps per transition). Acting is epsilon-greedy, epsilon falling linearly from ``epsilon_start`` to
``epsilon_end`` over the first ``exploration_fraction`` of the budget; evaluation, play and export run the
greedy policy.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.offpolicy import ReplayConfig
from rlcli.algos.optim import adam
from rlcli.algos.sac import polyak_update
from rlcli.algos.threads import ThreadPlan
from rlcli.config import RunConfig
from rlcli.errors import UsageError
from rlcli.nets.models import ACTIVATIONS, training_precision
from rlcli.nets.normalization import ObsNormalizer


class DQNConfig(ReplayConfig):
    """Deep Q-learning hyperparameters; SB3's DQN defaults where a field has one."""

    algo: Literal["dqn"] = "dqn"
    """The algorithm."""
    learning_starts: Annotated[int, Field(ge=0)] = 100
    """Env steps of uniform random actions before learning."""
    batch_size: Annotated[int, Field(gt=0)] = 32
    """Transitions per gradient step."""
    utd_ratio: Annotated[float, Field(gt=0)] = 0.25
    """Gradient steps per env step collected (SB3's gradient_steps / train_freq)."""
    learning_rate: Annotated[float, Field(gt=0)] = 1e-4
    """Adam's learning rate."""
    target_update_every: Annotated[int, Field(gt=0)] = 10_000
    """Gradient steps between updates of the target network."""
    target_update_rate: Annotated[float, Field(gt=0, le=1)] = 1.0
    """How far each target update moves the target towards the online network (1: a copy)."""
    epsilon_start: Annotated[float, Field(ge=0, le=1)] = 1.0
    """The chance of a uniform random action at the start."""
    epsilon_end: Annotated[float, Field(ge=0, le=1)] = 0.05
    """The chance of a uniform random action after the exploration phase."""
    exploration_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1
    """The fraction of the budget over which epsilon falls linearly from its start to its end."""
    double_q: bool = True
    """Double Q-learning: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling heads: Q = V + A - mean(A)."""
    loss: Literal["huber", "mse"] = "huber"
    """The TD error's loss: Huber (smooth L1, as SB3 and the Nature paper) or squared."""
    max_grad_norm: Annotated[float, Field(gt=0)] | None = 10.0
    """Gradients clipped to this global norm; none: no clipping."""
    hidden: Annotated[tuple[Annotated[int, Field(gt=0)], ...], Field(min_length=1)] = (64, 64)
    """Units of each layer of the Q network."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """The Q network's activation."""

SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"low": 1.0e-5, "high": 3.0e-3, "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "batch_size": [32, 64, 128, 256],
    "utd_ratio": [0.0625, 0.125, 0.25, 0.5, 1.0],
    "target_update_every": [100, 500, 1000, 5000, 10000],
    "exploration_fraction": {"low": 0.05, "high": 0.5},
    "epsilon_end": {"low": 0.0, "high": 0.2},
    "hidden": [[64, 64], [128, 128], [256, 256]],
}


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """One thread to act (one observation row a step), every core for the update."""
    return ThreadPlan(1, cores)


def linear_epsilon(step: int, cfg: DQNConfig) -> float:
    """Epsilon after ``step`` env steps: from ``epsilon_start`` down to ``epsilon_end`` in a straight line over
    ``exploration_fraction * steps``, then flat."""
    span = cfg.exploration_fraction * cfg.steps
    fraction = min(step / span, 1.0)
    return cfg.epsilon_start + fraction * (cfg.epsilon_end - cfg.epsilon_start)


def td_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q_target: torch.Tensor,
               next_q_online: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """r + gamma (1 - terminated) Q_target(s', a'), where a' = argmax Q_online(s') (double Q-learning) or,
    without ``next_q_online``, argmax Q_target(s'): the plain DQN target, max over the target's values."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = chooser.argmax(-1, keepdim=True)
    return rewards + gamma * (1.0 - terminated) * next_q_target.gather(-1, best).squeeze(-1)


class QNetwork(nn.Module):
    """Observations -> one value per action: an MLP, then one linear head, or dueling value and advantage
    heads combined as V + A - mean(A)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...], activation: str, dueling: bool
                 ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for units in hidden:
            layers += [nn.Linear(width, units), ACTIVATIONS[activation]()]
            width = units
        self.trunk = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage = nn.Linear(width, n_actions)
        self.value = nn.Linear(width, 1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.trunk(obs)
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(-1, keepdim=True)


class GreedyPolicy(nn.Module):
    """Raw observations -> the action of the highest value: normalisation (frozen), then the Q network; the
    agent's own modules, not copies."""

    pixels = False
    continuous_output = ""

    def __init__(self, obs_norm: nn.Module, q: QNetwork) -> None:
        super().__init__()
        self.obs_norm, self.q = obs_norm, q

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(self.obs_norm(obs.float())).argmax(-1)

    def action_log_probs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """The values as log-softmax: their argmax and the gaps between them, which a near tie is read from."""
        return [F.log_softmax(self.q(self.obs_norm(obs.float())), dim=-1)]


class DQN(nn.Module):
    """Q network, its target and their optimiser; all state is tensors, and the env steps seen (epsilon's
    schedule) in the extra state."""

    def __init__(self, cfg: DQNConfig, obs_space: gym.spaces.Box, action_space: gym.Space, n_envs: int,
                 device: torch.device) -> None:
        super().__init__()
        self.check_spaces(obs_space, action_space)
        self.cfg, self.device = cfg, device
        self.n_actions = int(action_space.n)  # type: ignore[attr-defined]
        self.q = QNetwork(int(np.prod(obs_space.shape)), self.n_actions, cfg.hidden, cfg.activation, cfg.dueling)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs)
        self.to(device)
        self.optimizer = adam(self.q.parameters(), lr=cfg.learning_rate)
        self.env_steps, self.updates = 0, 0
        self.__dict__["_greedy"] = GreedyPolicy(self.obs_norm, self.q)  # not a submodule: the same modules
        self._params, self._target_params = list(self.q.parameters()), list(self.q_target.parameters())
        self._q_step = compiled(self.q_step, cfg.compile, device)
        self._gradient_step = captured(self.gradient_step, cfg.compile, device)
        self._epsilon = torch.zeros((), device=device)  # the metric, written in place: no new tensor a step

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise UsageError(f"DQN needs Discrete actions; this environment's are {action_space}. Use --algo ppo, "
                             "or --algo sac for continuous actions")
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise UsageError(f"DQN here takes flat vector observations; this environment's are {obs_space}")

    def training_precision(self) -> AbstractContextManager:
        return training_precision(self.cfg.precision, self.device)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.optimizer}

    def extra_state(self) -> dict[str, int]:
        """Epsilon's position (env steps seen) and the target update's phase, across a resume."""
        return {"env_steps": self.env_steps, "updates": self.updates}

    def load_extra_state(self, state: dict[str, int]) -> None:
        self.env_steps, self.updates = int(state.get("env_steps", 0)), int(state.get("updates", 0))

    def policy(self, deterministic: bool = True) -> GreedyPolicy:
        """The greedy policy (evaluation is greedy either way: epsilon is training's exploration)."""
        return self._greedy

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self._greedy(obs)

    @property
    def epsilon(self) -> float:
        return linear_epsilon(self.env_steps, self.cfg)

    def observe(self, obs: torch.Tensor, real: torch.Tensor) -> None:
        """Counts the env steps (epsilon's clock) and updates the observation statistics with the rows an
        episode really reached (``real``)."""
        self.env_steps += obs.shape[0]
        if self.cfg.normalize_obs:
            self.obs_norm.rms.update(obs[real])

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Epsilon-greedy env actions for raw observations, for training."""
        greedy = self._greedy(obs)
        explore = torch.rand(obs.shape[0], device=obs.device) < self.epsilon
        return torch.where(explore, torch.randint_like(greedy, self.n_actions), greedy)

    def td_loss(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss between Q(s, a) and the TD targets; also the mean Q (detached)."""
        obs, next_obs = self.obs_norm(batch.obs.float()), self.obs_norm(batch.next_obs.float())
        actions = batch.actions.long().reshape(-1, 1)  # the buffer keeps actions as one float column
        with torch.no_grad():
            next_online = self.q(next_obs) if self.cfg.double_q else None
            targets = td_targets(batch.rewards, batch.terminated, self.q_target(next_obs), next_online,
                                 self.cfg.gamma)
        q = self.q(obs).gather(-1, actions).squeeze(-1)
        loss = F.smooth_l1_loss(q, targets) if self.cfg.loss == "huber" else F.mse_loss(q, targets)
        return loss, q.mean().detach()

    def q_step(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward, loss, backward, clipping and Adam: what ``compile`` compiles."""
        with self.training_precision():
            loss, q_mean = self.td_loss(batch)
        self.optimizer.zero_grad()
        loss.backward()
        if self.cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self._params, self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return loss.detach(), q_mean

    def gradient_step(self, batch: ReplayBatch, move_target: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The Q step, then (``move_target``) the target's update: one CUDA graph when compiling on a GPU."""
        loss, q_mean = self._q_step(batch)
        if move_target:
            polyak_update(self._target_params, self._params, self.cfg.target_update_rate)
        return loss, q_mean

    def update(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step, and every ``target_update_every``-th the target's update. Metrics stay tensors."""
        self.updates += 1
        loss, q_mean = self._gradient_step(batch, self.updates % self.cfg.target_update_every == 0)
        self._epsilon.fill_(self.epsilon)
        return {"losses/td": loss, "charts/q_mean": q_mean, "charts/epsilon": self._epsilon}
