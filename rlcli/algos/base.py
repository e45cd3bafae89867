"""What an algorithm is to the rest of rlcli: a registry entry (``AlgoSpec``) and the agent protocols
the learners, evaluation, export and checkpoints use, and nothing else of an agent.

Later capabilities are properties of the network and the batch, not new loops: a policy carrying
recurrent state, an action mask arriving with the observation, a privileged part of the observation
for the critic and several agents' rows in one env step all live in the agent's ``new_rollout``
storage, its ``sample`` output and its ``policy()`` module, whose shapes the learners never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import torch
from torch import nn

from rlcli.algos.threads import ThreadPlan, Threads
from rlcli.config import AlgoConfig, RunConfig

if TYPE_CHECKING:
    from rlcli.algos.buffers import ReplayBatch, RolloutBatch, RolloutBuffer, SequenceBatch
    from rlcli.envs import VecEnv
    from rlcli.envs.snapshot import Snapshot
    from rlcli.nets.models import PolicySample

Metrics = Mapping[str, float | torch.Tensor]  # name -> value; tensors are read once per iteration


class Agent(Protocol):
    """Every agent: an ``nn.Module`` whose ``state_dict`` is its whole model (weights and normalisation
    statistics), with what a checkpoint needs beyond it and the module that acts."""

    device: torch.device

    def policy(self, deterministic: bool = True) -> nn.Module:
        """Raw observations -> env actions with the statistics frozen: what predict, evaluation, play and
        export run (export serialises this module and checks the file against it)."""
        ...

    def optimizers(self) -> dict[str, torch.optim.Optimizer]: ...

    def extra_state(self) -> dict[str, Any]:
        """What a resume needs beyond tensors (a schedule's position), as JSON values."""
        ...

    def load_extra_state(self, state: dict[str, Any]) -> None: ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> Any: ...


class OnPolicyAgent(Agent, Protocol):
    """What the rollout collector and the on-policy learner use."""

    def new_rollout(self, n_envs: int) -> RolloutBuffer: ...

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as stored and acted on, the normalisation statistics updated with them."""
        ...

    def initial_state(self, n_envs: int) -> torch.Tensor | None:
        """A recurrent policy's state for ``n_envs`` new episodes, [n_envs, S]; None for a feed-forward one."""
        ...

    def sample(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> PolicySample:
        """Actions for observed rows (from ``state``, a recurrent policy's, which the sample carries on);
        the critic's half is left to ``value_of``, which runs while the envs step."""
        ...

    def value_of(self, sample: PolicySample) -> torch.Tensor: ...

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """State values of raw observations (a rollout's bootstrap)."""
        ...

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor: ...

    def scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor: ...

    def running_state(self) -> dict[str, torch.Tensor]:
        """State tied to the envs' running episodes (the reward scaler's discounted returns), which is not
        the model's: an exact resume restores it, one that restarts the episodes starts it again."""
        ...

    def load_running_state(self, tensors: dict[str, torch.Tensor]) -> None: ...

    def update(self, batch: RolloutBatch | SequenceBatch, progress: float) -> Metrics:
        """Learns from one rollout (a ``SequenceBatch`` where ``new_rollout`` stores a state);
        ``progress`` is the fraction of training done, in [0, 1]."""
        ...


class OffPolicyAgent(Agent, Protocol):
    """What the off-policy learner uses."""

    def observe(self, obs: torch.Tensor, real: torch.Tensor) -> None: ...

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Env actions drawn for raw observations."""
        ...

    def update(self, batch: ReplayBatch) -> Metrics:
        """One gradient step; metrics stay tensors (a metric missing from a step was not measured then)."""
        ...


class Learner(Protocol):
    """One training iteration at a time: collect experience and learn from it."""

    def iterate(self, step: int) -> tuple[int, dict[str, float]]:
        """Returns (env steps taken, metrics)."""
        ...

    @property
    def steps_per_iteration(self) -> int:
        """The env steps one iteration takes: a run trains whole iterations, up to its budget or past it."""
        ...

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the training episodes finished since the last call."""
        ...

    def buffer_tensors(self) -> dict[str, torch.Tensor]:
        """The experience kept across iterations (an off-policy replay buffer); empty where none is."""
        ...

    def load_buffer_tensors(self, tensors: dict[str, torch.Tensor]) -> None: ...

    def live_state(self) -> Snapshot:
        """What the next iteration continues from beyond the agent and the envs (the observations it acts on
        first, a recurrent state, the episodes' partial returns), between two iterations."""
        ...

    def load_live_state(self, snapshot: Snapshot) -> None: ...


# (algo config, observation space, action space, n_envs, device), and obs_layout= where the env has one
AgentFactory = Callable[..., Agent]
LearnerFactory = Callable[["VecEnv", Any, Any, Threads], Learner]


@dataclass(frozen=True)
class AlgoSpec:
    """Everything rlcli knows of one algorithm, by its name: the command line's choices, the config
    models, tuning's search space and each lookup derive from these entries."""

    name: str
    config: type[AlgoConfig]
    agent: AgentFactory  # (algo config, observation space, action space, n_envs, device) -> agent
    learner: LearnerFactory  # (env, agent, algo config, thread plan) -> learner
    check_spaces: Callable[[gym.Space, gym.Space], None]  # raises a UsageError where it cannot act
    thread_plan: Callable[[RunConfig, int], ThreadPlan]  # (run config, cores) -> the default plan
    search_space: dict[str, Any] = field(default_factory=dict)  # rlcli.tune.space's format
    coupled: tuple[str, ...] = ()  # fields that constrain one another, tried in every combination
    hyperparams: Path | None = None  # its tuned hyperparameters; None: the shipped hyperparams/NAME.yml
    optional_metrics: tuple[str, ...] = ()  # metrics some iterations lack: columns of metrics.csv all the same
    # whether its agent takes an ``obs_layout`` keyword (Dict observations, action masks); those envs are
    # refused for an algorithm that does not
    takes_layout: bool = False
    # whether it learns across several processes (``rlcli train --nproc``): its agent then takes a ``world``
    # keyword (rlcli.algos.world.World); one that does not trains in one process
    distributed: bool = False
    # (the entry's values, what the user set over them, the merged values) -> the merged values with what
    # depends on a changed setting made to follow it (PPO's minibatch size a changed rollout)
    fit: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
