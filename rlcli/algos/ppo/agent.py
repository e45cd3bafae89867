"""Proximal Policy Optimisation (Schulman et al. 2017) for every action space the networks support:
the agent: its networks, normalisers and optimiser, and the update.

The agent meets the on-policy learner through ``observe``, ``sample``/``value_of`` (the critic runs
while the envs step), ``scale_rewards`` and ``update``, which runs the minibatch epochs over one rollout
and returns plain floats, synchronising with the device once per update (plus once per epoch for the
adaptive-KL schedule, which needs the epoch's KL to pick the next learning rate).

With several processes (``rlcli.algos.world``) each learns from its own rollout: every minibatch is split
between them (the global minibatch is the configured one), its advantages normalised by the moments of the
whole of it, each loss a sum over the process's rows divided by the global minibatch's, and the gradients
summed over the processes before clipping, so that one update equals one process's over all the rollouts.
The learning rate and clip range are the lead's, and the normalisation statistics are pooled before each
update.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlcli.algos.buffers import RolloutBatch, RolloutBuffer, SequenceBatch
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.optim import adam
from rlcli.algos.ppo.config import PPOConfig
from rlcli.algos.ppo.losses import STATS, explained_variance, ppo_loss, rollout_standardized
from rlcli.algos.ppo.minibatches import Minibatches, evaluated
from rlcli.algos.ppo.schedule import LearningRate, clip_range
from rlcli.algos.world import SINGLE, World
from rlcli.config import NetworkConfig
from rlcli.envs.layout import ObsLayout
from rlcli.errors import UsageError
from rlcli.nets.grouped import GroupedActorCritic
from rlcli.nets.models import ActorCritic, ActorCriticPolicy, PolicySample, training_precision
from rlcli.nets.normalization import ObsNormalizer, RewardScaler, RunningMeanStd, ValueNormalizer, pool_statistics
from rlcli.nets.recurrent import RecurrentActorCritic, RecurrentPolicy


def network_class(cfg: NetworkConfig, layout: ObsLayout | None) -> type[nn.Module]:
    """The actor-critic for the config and the env's layout: recurrent, one policy per agent group, or plain."""
    if layout is not None and layout.groups:
        if cfg.recurrent:
            raise UsageError("agents of different spaces get feed-forward policies of their own; drop "
                             "network.recurrent")
        return GroupedActorCritic
    return RecurrentActorCritic if cfg.recurrent else ActorCritic


def minibatch_step(step: Callable, cfg: PPOConfig, net: nn.Module, world: World, device: torch.device) -> Callable:
    """``step`` as the update runs it: on a GPU one CUDA graph a row count (the eager step's kernels, since
    torch.compile's code for varying row counts fails to capture), except for a sequence minibatch, which
    keeps its valid rows (a count read back to the host), or where processes sum gradients between backward
    and Adam; elsewhere compiled for any row count where the switch says so."""
    if device.type == "cuda" and not isinstance(net, RecurrentActorCritic) and world.size == 1:
        return captured(step, cfg.compile, device)
    return compiled(step, cfg.compile, device, rows_vary=True)


def stored_kinds(cfg: PPOConfig, obs_space: gym.Space, action_space: gym.Space, nvec: list[int]
                 ) -> tuple[torch.dtype, tuple[int, ...], torch.dtype]:
    """How a rollout stores observations and actions: (obs dtype, action shape, action dtype). Atari frames
    stay uint8 unless normalised; discrete actions are one index per sub-action."""
    obs_dtype = torch.float32 if cfg.normalize_obs or obs_space.dtype != "uint8" else torch.uint8
    if nvec:
        return obs_dtype, (len(nvec),), torch.long
    return obs_dtype, tuple(action_space.shape or ()), torch.float32


def memory(state: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The keyword a recurrent network's call takes: its state, where there is one."""
    return {} if state is None else {"state": state}


def shared_statistics(world: World, *norms: ObsNormalizer | RewardScaler | ValueNormalizer) -> list[RunningMeanStd]:
    """The normalisation statistics in use, which several processes pool (none in a single process)."""
    return [norm.rms for norm in norms if norm.enabled] if world.size > 1 else []


# Saved models name the actor-critic ``policy``, as the first format did: old runs and the zoo's agents load
SAVED, HELD = "policy.", "net."


def _saved_names(module: nn.Module, state: dict[str, Any], prefix: str, metadata: Any) -> None:
    for key in [k for k in state if k.startswith(prefix + HELD)]:
        state[prefix + SAVED + key[len(prefix + HELD):]] = state.pop(key)


def _loaded_names(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    for key in [k for k in state if k.startswith(prefix + SAVED)]:
        state[prefix + HELD + key[len(prefix + SAVED):]] = state.pop(key)


class PPO(nn.Module):
    """Networks, normalisers and optimiser of one PPO agent; all state is tensors."""

    def __init__(self, cfg: PPOConfig, obs_space: gym.spaces.Box, action_space: gym.Space,
                 n_envs: int, device: torch.device, obs_layout: ObsLayout | None = None,
                 world: World = SINGLE) -> None:
        super().__init__()
        self.cfg = cfg
        self.device = device
        self._one = torch.ones((), device=device)  # the minibatch count each minibatch step adds to its sums
        self.__dict__["world"] = world  # the processes this agent learns with; not a module
        # obs_layout: the env's (VecEnv.obs_layout), for Dict observations and action masks
        self.net = network_class(cfg.network, obs_layout)(obs_space, action_space, cfg.network, obs_layout)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs,
                                      obs_layout.mask_columns() if obs_layout else ())
        self.reward_scaler = RewardScaler(n_envs, cfg.gamma, cfg.normalize_reward)
        self.value_norm = ValueNormalizer(cfg.normalize_value)
        self.to(device)
        self.reward_scaler.returns = self.reward_scaler.returns.to(device)
        self._pooled = shared_statistics(world, self.obs_norm, self.reward_scaler, self.value_norm)
        for stats in self._pooled:  # on the device: what they pool is read there
            stats.share()
        self._params = list(self.net.parameters())
        self._clip = torch.zeros((), device=device)  # a tensor: a schedule's new value recompiles nothing
        self._step = minibatch_step(self._minibatch_step, cfg, self.net, world, device)
        # acting's outputs outlive the next call (the critic finishes from the actor's), so no CUDA graphs
        self._sample = compiled(self.net.sample, cfg.compile, device)
        self._value_of = compiled(self.net.value_of, cfg.compile, device)
        self.minibatches = Minibatches(cfg.minibatch_size, cfg.n_steps, world, device)
        self._stored = stored_kinds(cfg, obs_space, action_space, self.net.nvec)
        # not submodules: they share this agent's parameters, which its state_dict already holds
        self.__dict__["_policies"] = {}
        self.register_state_dict_post_hook(_saved_names)
        self.register_load_state_dict_pre_hook(_loaded_names)

    def training_precision(self) -> AbstractContextManager:
        """The arithmetic of rollout acting and the update (``precision``); evaluation is float32."""
        return training_precision(self.cfg.precision, self.device)

    @cached_property
    def optimizer(self) -> torch.optim.Adam:
        """Adam over the network's parameters."""
        return adam(self.net.parameters(), lr=self.cfg.learning_rate, eps=self.cfg.adam_eps)

    @cached_property
    def lr(self) -> LearningRate:
        """The optimiser's learning rate and its schedule."""
        return LearningRate(self.cfg, self.optimizer, self.world)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.optimizer}

    def extra_state(self) -> dict[str, float]:
        """What a resume needs beyond tensors: the adaptive schedule's current learning rate."""
        return {"learning_rate": self.lr.value}

    def load_extra_state(self, state: dict[str, float]) -> None:
        self.lr.value = float(state.get("learning_rate", self.lr.value))

    def new_rollout(self, n_envs: int) -> RolloutBuffer:
        """Storage for one rollout of ``n_envs`` envs, in the shapes and types this agent learns from."""
        return RolloutBuffer(self.cfg.n_steps, n_envs, tuple(self.obs_norm.rms.mean.shape), *self._stored,
                             self.device, getattr(self.net, "state_size", 0))

    def initial_state(self, n_envs: int) -> torch.Tensor | None:
        """Zeros [n_envs, S] for a recurrent network; None for a feed-forward one."""
        if not isinstance(self.net, RecurrentActorCritic):
            return None
        return torch.zeros(n_envs, self.net.state_size, device=self.device)

    def policy(self, deterministic: bool = True) -> ActorCriticPolicy | RecurrentPolicy:
        """Raw observations -> env actions, statistics frozen: what evaluation, play and export run. A
        recurrent one takes and returns the actor's state as well."""
        policies = self._policies
        if deterministic not in policies:
            kind = RecurrentPolicy if isinstance(self.net, RecurrentActorCritic) else ActorCriticPolicy
            policies[deterministic] = kind(self.obs_norm, self.net, deterministic)  # type: ignore[arg-type]
        return policies[deterministic]

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True, state: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Env actions for raw observations, through ``policy``; a recurrent agent's are (actions, next
        state), from ``state`` (zeros, new episodes, where None)."""
        policy = self.policy(deterministic)
        if isinstance(policy, RecurrentPolicy):
            if state is None:
                state = torch.zeros(obs.shape[0], policy.state_size, device=obs.device)
            return policy(obs, state)
        return policy(obs)

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the rollout stores and acts on them, the statistics updated with them."""
        # disabled (as most often), the rows as they are: here and in scale_rewards, the module's call and
        # its no_grad context would cost 3-4 µs a step for nothing
        return self.obs_norm(obs, update=True) if self.obs_norm.enabled else obs

    def sample(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> PolicySample:
        """Actions drawn for observed rows, with their log-probabilities; ``value_of`` finishes the critic."""
        with self.training_precision():
            return self._sample(obs, **memory(state))

    def value_of(self, sample: PolicySample) -> torch.Tensor:
        with self.training_precision():
            return self.value_norm.denormalize(self._value_of(sample))

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """State values of raw observations (the bootstrap after a rollout's last step)."""
        with self.training_precision():
            return self.value_norm.denormalize(self.net.value(self.obs_norm(obs), **memory(state)))

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return self.net.env_actions(actions)

    def scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        return self.reward_scaler(rewards, dones) if self.reward_scaler.enabled else rewards

    def running_state(self) -> dict[str, torch.Tensor]:
        return {"reward_returns": self.reward_scaler.returns}

    def load_running_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.reward_scaler.returns.copy_(tensors["reward_returns"])

    def update(self, batch: RolloutBatch | SequenceBatch, progress: float) -> dict[str, float]:
        """Minibatch epochs over one rollout; ``progress`` is the fraction of training done, in [0, 1].
        A recurrent network's minibatches are whole env sequences, ``minibatch_size / n_steps`` envs each."""
        cfg = self.cfg
        sequences = isinstance(batch, SequenceBatch)
        self.value_norm.update(batch.returns[batch.valid] if sequences else batch.returns)
        clip = self.lr.begin(progress, clip_range(cfg, progress))
        pool_statistics(self._pooled, self.world.all_gather)
        clip_t = self._clip.fill_(clip)
        raw = batch
        if self.value_norm.enabled:  # the critic learns, and is clipped, in the standardised scale
            batch = batch._replace(values=self.value_norm.normalize(batch.values),
                                   returns=self.value_norm.normalize(batch.returns))
        if cfg.normalize_advantage and cfg.normalize_advantage_over == "rollout":
            batch = batch._replace(advantages=rollout_standardized(
                batch.advantages, batch.valid if sequences else None, self.world))

        sums = self.minibatches.train(batch, cfg.n_epochs, lambda rows, reference: self._step(rows, clip_t, reference),
                                      self.lr, previous_epoch=cfg.kl_reference == "previous_epoch")

        with torch.no_grad():
            returns, values = (raw.returns[raw.valid], raw.values[raw.valid]) if sequences else (
                raw.returns, raw.values)
            explained = explained_variance(returns, values, self.world, sums)
        return {**dict(zip(STATS, (sums[:5] / sums[5]).tolist(), strict=True)),
                "losses/explained_variance": float(explained), "charts/learning_rate": self.lr.value,
                "charts/clip_range": clip}

    def _minibatch_step(self, rows: tuple[torch.Tensor, ...], clip: torch.Tensor, reference: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on a minibatch (forward, loss, backward, clipping, Adam): what ``compile``
        compiles. Returns the step's (policy loss, value loss, entropy, KL, clip fraction, 1), the KL from
        the rollout's policy or from ``reference``'s log-probabilities of the same actions, and the rows'
        log-probabilities before the step."""
        rows = evaluated(self.net, rows, self.training_precision())
        loss, stats = ppo_loss(self.cfg, rows, clip, self.world, reference)
        self.optimizer.zero_grad()
        loss.backward()
        self.world.sum_gradients_(self._params)
        nn.utils.clip_grad_norm_(self._params, self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return torch.cat([stats, self._one.unsqueeze(0)]), rows[0].detach()
