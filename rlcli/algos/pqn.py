"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning"): Q-learning over many
vectorised envs with LayerNorm in the Q network, lambda-returns, and neither a replay buffer nor a target
network: its hyperparameters, search space, thread policy and agent.

It rides PPO's rollout. The collector stores max_a Q(s) as each step's value, so the rollout's generalised
advantages plus those values are Peng's Q(lambda) returns (a truncation bootstraps from the final
observation's values, a termination from nothing), and each epoch's minibatches regress Q(s, a) onto them.
Acting is epsilon-greedy, epsilon falling linearly from ``epsilon_start`` to ``epsilon_end`` over the first
``exploration_fraction`` of the budget; evaluation, play and export run the greedy policy. With ``recurrent``,
the Q network has memory and each minibatch is whole env sequences replayed from the rollout's stored state,
as a recurrent PPO's are.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cached_property
from typing import Annotated, Any, Literal

import gymnasium as gym
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from rlcli.algos.buffers import RolloutBatch, RolloutBuffer, SequenceBatch
from rlcli.algos.compiling import compiled
from rlcli.algos.dqn.config import check_raw_pixels
from rlcli.algos.dqn.memory import RecurrentGreedyPolicy, RecurrentQNetwork
from rlcli.algos.dqn.networks import GreedyPolicy, QNetwork, Trunk, check_q_spaces, check_trunk
from rlcli.algos.dqn.targets import linear_epsilon
from rlcli.algos.optim import adam, set_lr
from rlcli.algos.ppo.minibatches import Minibatches
from rlcli.algos.threads import ThreadPlan
from rlcli.algos.world import SINGLE
from rlcli.config import AlgoConfig, RunConfig, Schedule
from rlcli.envs.layout import n_actions
from rlcli.nets.models import PolicySample, training_precision
from rlcli.nets.normalization import ObsNormalizer


class PQNConfig(AlgoConfig):
    """PQN's hyperparameters; CleanRL's pqn.py defaults where a field has one."""

    algo: Literal["pqn"] = "pqn"
    """The algorithm."""
    n_envs: Annotated[int, Field(gt=0)] = 32
    """Envs stepped in parallel."""
    n_steps: Annotated[int, Field(gt=0)] = 64
    """Steps of each env per rollout."""
    minibatch_size: Annotated[int, Field(gt=0)] = 128
    """Rows per gradient step."""
    n_epochs: Annotated[int, Field(gt=0)] = 4
    """Passes over each rollout."""
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    """Discount factor."""
    gae_lambda: Annotated[float, Field(ge=0, le=1)] = 0.65
    """lambda of the Q(lambda) returns (CleanRL's q_lambda)."""
    learning_rate: Annotated[float, Field(gt=0)] = 2.5e-4
    """Adam's learning rate (the start of a schedule)."""
    lr_schedule: Literal[Schedule.constant, Schedule.linear] = Schedule.linear
    """constant, or linear to zero."""
    max_grad_norm: Annotated[float, Field(gt=0)] = 10.0
    """Gradients clipped to this global norm."""
    epsilon_start: Annotated[float, Field(ge=0, le=1)] = 1.0
    """The chance of a uniform random action at the start."""
    epsilon_end: Annotated[float, Field(ge=0, le=1)] = 0.05
    """The chance of a uniform random action after the exploration phase."""
    exploration_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    """The fraction of the budget over which epsilon falls linearly from its start to its end."""
    trunk: Trunk = "mlp"
    """The Q network's body: mlp for flat observations, cnn (the Nature CNN) for stacked uint8 frames."""
    hidden: Annotated[tuple[Annotated[int, Field(gt=0)], ...], Field(min_length=1)] = (120, 84)
    """Units of each layer of the Q network (with the cnn trunk: the last is its dense layer's width)."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """The Q network's activation."""
    layer_norm: bool = True
    """LayerNorm before each hidden activation: what keeps PQN stable without a target network."""
    recurrent: Literal["lstm", "gru"] | None = None
    """A memory after the trunk (an LSTM or GRU), for partially observed tasks; none: feed-forward."""
    recurrent_size: Annotated[int, Field(gt=0)] = 128
    """Units of the memory."""
    normalize_obs: bool = False
    """Observations standardised by running statistics (saved with the run)."""
    clip_obs: Annotated[float, Field(gt=0)] = 10.0
    """Normalised observations clipped to +- this."""

    @model_validator(mode="after")
    def _cnn_takes_raw_pixels(self) -> PQNConfig:
        check_raw_pixels(self.trunk, self.normalize_obs)
        return self

    @model_validator(mode="after")
    def _whole_sequences(self) -> PQNConfig:
        if self.recurrent and self.minibatch_size % self.n_steps:
            raise ValueError(
                f"a recurrent Q network learns from whole env sequences: minibatch_size={self.minibatch_size} "
                f"must be a multiple of n_steps={self.n_steps}")
        return self


SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"low": 1.0e-5, "high": 3.0e-3, "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "gae_lambda": {"low": 0.3, "high": 0.95},
    "n_epochs": [1, 2, 4, 8],
    "exploration_fraction": {"low": 0.05, "high": 0.5},
    "epsilon_end": {"low": 0.0, "high": 0.1},
}


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """An MLP acts with one thread (the env backend's threads step beside it) and updates with every core; a
    CNN on a CPU takes every core for both, as PPO's does: its acting is a convolution stack over every env's
    frames (Pong, 16k steps on 2 cores: 57.7 s acting on one thread, 50.9 s on two)."""
    if cfg.device != "cuda" and cfg.algo.trunk == "cnn":  # type: ignore[attr-defined]
        return ThreadPlan(cores, cores)
    return ThreadPlan(1, cores)


class PQN(nn.Module):
    """The Q network, its optimiser and the env steps seen (epsilon's clock); all state is tensors."""

    def __init__(self, cfg: PQNConfig, obs_space: gym.spaces.Box, action_space: gym.Space, n_envs: int,
                 device: torch.device) -> None:
        super().__init__()
        self.check_spaces(obs_space, action_space)
        self.cfg, self.device = cfg, device
        self.n_actions = n_actions(action_space)
        check_trunk("PQN", cfg.trunk, tuple(obs_space.shape))
        self.q: QNetwork | RecurrentQNetwork
        if cfg.recurrent:
            self.q = RecurrentQNetwork(tuple(obs_space.shape), self.n_actions, cfg.hidden, cfg.activation,
                                       cfg.layer_norm, cfg.trunk, cfg.recurrent, cfg.recurrent_size)
        else:
            self.q = QNetwork(tuple(obs_space.shape), self.n_actions, cfg.hidden, cfg.activation, dueling=False,
                              layer_norm=cfg.layer_norm, trunk=cfg.trunk)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs)
        self.to(device)
        self.env_steps = 0
        greedy = RecurrentGreedyPolicy(self.obs_norm, self.q) if isinstance(self.q, RecurrentQNetwork) \
            else GreedyPolicy(self.obs_norm, self.q)
        self.__dict__["_greedy"] = greedy  # not a submodule: the same modules
        self._params = list(self.q.parameters())
        self._step = compiled(self.q_step, cfg.compile, device, rows_vary=True)
        self._sequence_step = compiled(self.q_sequence_step, cfg.compile, device, rows_vary=True)
        self.minibatches = Minibatches(cfg.minibatch_size, cfg.n_steps, SINGLE, device)

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        check_q_spaces("PQN", obs_space, action_space)

    def training_precision(self) -> AbstractContextManager:
        return training_precision(self.cfg.precision, self.device)

    @cached_property
    def optimizer(self) -> torch.optim.Adam:
        """Adam over the Q network's parameters."""
        return adam(self.q.parameters(), lr=self.cfg.learning_rate)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.optimizer}

    def extra_state(self) -> dict[str, int]:
        return {"env_steps": self.env_steps}  # epsilon's position

    def load_extra_state(self, state: dict[str, int]) -> None:
        self.env_steps = int(state.get("env_steps", 0))

    def policy(self, deterministic: bool = True) -> GreedyPolicy | RecurrentGreedyPolicy:
        """The greedy policy (evaluation is greedy either way: epsilon is training's exploration)."""
        return self._greedy

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True, state: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Greedy actions for raw observations; a recurrent network's are (actions, next state), from
        ``state`` (zeros, new episodes, where None)."""
        if isinstance(self._greedy, RecurrentGreedyPolicy):
            return self._greedy(obs, self.initial_state(obs.shape[0]) if state is None else state)
        return self._greedy(obs)

    @property
    def epsilon(self) -> float:
        return linear_epsilon(self.env_steps, self.cfg)

    def new_rollout(self, n_envs: int) -> RolloutBuffer:
        obs_dtype = torch.uint8 if self.q.pixels else torch.float32  # frames stay bytes: a quarter the memory
        return RolloutBuffer(self.cfg.n_steps, n_envs, tuple(self.obs_norm.rms.mean.shape), obs_dtype, (),
                             torch.long, self.device, getattr(self.q, "state_size", 0))

    def initial_state(self, n_envs: int) -> torch.Tensor | None:
        """A recurrent network's state at the start of every env's first episode (zeros); None otherwise."""
        if isinstance(self.q, RecurrentQNetwork):
            return torch.zeros(n_envs, self.q.state_size, device=self.device)
        return None

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations normalised (where that is on) and counted: epsilon's clock."""
        self.env_steps += obs.shape[0]
        if self.obs_norm.enabled:
            return self.obs_norm(obs.float(), update=True)
        return obs if self.q.pixels else obs.float()  # frames stay bytes: the Q network scales them

    def sample(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> PolicySample:
        """Epsilon-greedy actions for observed rows (and a recurrent network's next state); the values go on
        to ``value_of``."""
        with self.training_precision():
            q, next_state = self._values(obs, state)
        greedy = q.argmax(-1)
        explore = torch.rand(obs.shape[0], device=obs.device) < self.epsilon
        actions = torch.where(explore, torch.randint_like(greedy, self.n_actions), greedy)
        return PolicySample(actions, torch.zeros(obs.shape[0], device=obs.device), q, next_state)

    def _values(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(self.q, RecurrentQNetwork):
            assert state is not None  # the collector carries it for a network with an initial state
            return self.q.step(obs, state)
        return self.q(obs), None

    def value_of(self, sample: PolicySample) -> torch.Tensor:
        return sample.critic_input.max(-1).values.float()

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """max_a Q(s, a) of raw observations (a rollout's bootstrap)."""
        with self.training_precision():
            return self._values(self.obs_norm(obs.float()), state)[0].max(-1).values.float()

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions

    def scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        return rewards

    def running_state(self) -> dict[str, torch.Tensor]:
        return {}

    def load_running_state(self, tensors: dict[str, torch.Tensor]) -> None:
        pass

    def update(self, batch: RolloutBatch | SequenceBatch, progress: float) -> dict[str, float]:
        """``n_epochs`` passes of minibatch steps regressing Q(s, a) onto the rollout's Q(lambda) returns."""
        cfg = self.cfg
        lr = cfg.learning_rate * (max(1.0 - progress, 0.0) if cfg.lr_schedule == Schedule.linear else 1.0)
        set_lr(self.optimizer, lr)
        sums, steps = torch.zeros(2, device=self.device), 0
        for epoch in self.minibatches.epochs(batch, cfg.n_epochs):
            for _, rows in epoch:
                if len(rows) == 6:
                    obs, actions, _, _, _, returns = rows
                    sums += self._step(obs, actions, returns)
                else:
                    obs, actions, _, _, _, returns, valid, starts, state = rows
                    sums += self._sequence_step(obs, actions, returns, valid, starts, state)
                steps += 1
        loss, q_mean = (sums / steps).tolist()
        return {"losses/td": loss, "charts/q_mean": q_mean, "charts/epsilon": self.epsilon,
                "charts/learning_rate": lr}

    def q_step(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """Forward, the squared error to the returns, backward, clipping and Adam: what ``compile`` compiles.
        Returns (the loss, the mean Q) detached."""
        with self.training_precision():
            q = self.q(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            loss = F.mse_loss(q, returns)
        return self._descend(loss, q.mean())

    def q_sequence_step(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor,
                        starts: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q_step`` for whole env sequences [steps, envs], replayed from the state before their first step;
        the reset rows (not ``valid``) are left out of the loss."""
        assert isinstance(self.q, RecurrentQNetwork)
        with self.training_precision():
            values = self.q.replay(obs, state, starts).float()
            q = values.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            weights = valid.float()
            loss = ((q - returns).square() * weights).sum() / weights.sum().clamp_min(1.0)
        return self._descend(loss, (q * weights).sum() / weights.sum().clamp_min(1.0))

    def _descend(self, loss: torch.Tensor, q_mean: torch.Tensor) -> torch.Tensor:
        """Backward, clipping and Adam; (the loss, the mean Q) detached."""
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self._params, self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return torch.stack([loss.detach(), q_mean.detach()])
