"""Soft Actor-Critic (Haarnoja et al. 2018) with automatic entropy tuning, for Box action spaces: its
hyperparameters, search space, thread policy and agent.

The update keeps everything on the device: losses and metrics stay tensors (summed by the caller and
read once per training iteration), the twin critics are one batched network, and the Polyak update is
an in-place interpolation. ``compile`` compiles acting and both gradient steps (loss, backward and Adam),
and on a GPU replays the whole update as one CUDA graph.
"""

from __future__ import annotations

import copy
import math
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from rlcli.algos.buffers import ReplayBatch, bootstrap_discount
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.offpolicy import ActorCriticReplayConfig
from rlcli.algos.optim import ActorCriticOptimizers, adam
from rlcli.algos.prioritized import PRIORITIES
from rlcli.algos.threads import ThreadPlan
from rlcli.config import Precision, RunConfig
from rlcli.errors import UsageError
from rlcli.nets.models import QEnsemble, SquashedGaussianActor, SquashedGaussianPolicy, training_precision
from rlcli.nets.normalization import ObsNormalizer


class SACConfig(ActorCriticReplayConfig):
    """Soft Actor-Critic hyperparameters (Haarnoja et al. 2018, with automatic entropy tuning)."""

    algo: Literal["sac"] = "sac"
    """The algorithm."""
    alpha_lr: Annotated[float, Field(gt=0)] = 3e-4
    """The entropy temperature's learning rate."""
    alpha: Annotated[float, Field(gt=0)] = 0.2
    """The entropy temperature: its initial value when tuned, else fixed."""
    autotune_alpha: bool = True
    """Tune the temperature towards target_entropy."""
    target_entropy: float | None = None
    """The entropy the temperature aims at; none: -dim(A)."""
    target_update_every: Annotated[int, Field(gt=0)] = 1
    """Critic updates per Polyak update."""
    precision: Precision = "fp32"
    """Arithmetic of the update: fp32, or bf16 hidden layers under autocast."""


SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"targets": ["actor_lr", "critic_lr", "alpha_lr"], "low": 1.0e-5, "high": 3.0e-3,
                      "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "target_update_rate": {"low": 1.0e-3, "high": 0.05, "log": True},
    "batch_size": [64, 128, 256, 512],
    "utd_ratio": [0.5, 1.0, 2.0],
    "learning_starts": [1000, 5000, 10000, 20000],
    "network": {"targets": ["actor_hidden", "critic_hidden"], "choices": [[64, 64], [256, 256], [400, 300]]},
}


# measured on the steps that move the actor (every policy_delay-th): an iteration may have none
ACTOR_METRICS = ("losses/actor", "losses/alpha", "charts/entropy")


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """Every core for both: SAC steps one env and is bound by its update."""
    return ThreadPlan(cores, cores)


@torch.no_grad()
def polyak_update(target: list[torch.Tensor], online: list[torch.Tensor], rate: float) -> None:
    """target <- (1 - rate) * target + rate * online, in place (no autograd history)."""
    for t, o in zip(target, online, strict=True):
        t.lerp_(o, rate)


def alpha_loss(log_alpha: torch.Tensor, target_entropy: float, entropy: torch.Tensor) -> torch.Tensor:
    """The temperature's loss -log_alpha * (target_entropy - entropy): its gradient raises alpha while the
    policy's entropy is below the target and lowers it above."""
    return -(log_alpha * (target_entropy - entropy.detach()))


class SAC(ActorCriticOptimizers, nn.Module):
    """Actor, twin critics with targets, entropy temperature and their optimisers; all state is tensors."""

    def __init__(self, cfg: SACConfig, obs_space: gym.spaces.Box, action_space: gym.Space, n_envs: int,
                 device: torch.device) -> None:
        super().__init__()
        self.check_spaces(obs_space, action_space)
        self.cfg, self.device = cfg, device
        obs_dim = int(np.prod(obs_space.shape))
        act_dim = int(np.prod(action_space.shape))
        self.actor = SquashedGaussianActor(obs_dim, action_space, cfg.actor_hidden, cfg.activation)
        self.critic = QEnsemble(obs_dim, act_dim, cfg.critic_hidden, cfg.activation)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.alpha)), requires_grad=cfg.autotune_alpha)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs)
        self.to(device)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -float(act_dim)
        self.action_dim = act_dim
        self.__dict__["_policies"] = {}  # not submodules: they share the actor's parameters
        self.updates = 0
        self._zero = torch.zeros((), device=device)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self._critic_step = compiled(self.critic_step, cfg.compile, device)
        self._actor_step = compiled(self.actor_step, cfg.compile, device)
        self._gradient_step = captured(self.gradient_step, cfg.compile, device)
        self._act = compiled(self._act_eager, cfg.compile, device)

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise UsageError(f"SAC needs continuous (Box) actions; this environment's are {action_space}. "
                             "Use --algo ppo")
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise UsageError(f"SAC here takes flat vector observations; this environment's are {obs_space}")

    def training_precision(self) -> AbstractContextManager:
        """The arithmetic of the update (``precision``); acting and evaluation are float32."""
        return training_precision(self.cfg.precision, self.device)

    @cached_property
    def alpha_optimizer(self) -> torch.optim.Adam:
        """Adam over the temperature's logarithm."""
        return adam([self.log_alpha], lr=self.cfg.alpha_lr)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer, "alpha": self.alpha_optimizer}

    def extra_state(self) -> dict[str, int]:
        return {"updates": self.updates}  # keeps the policy delay's phase across a resume

    def load_extra_state(self, state: dict[str, int]) -> None:
        self.updates = int(state.get("updates", 0))

    def policy(self, deterministic: bool = True) -> SquashedGaussianPolicy:
        """Raw observations -> env actions, statistics frozen: what evaluation, play and export run."""
        policies = self._policies
        if deterministic not in policies:
            policies[deterministic] = SquashedGaussianPolicy(self.obs_norm, self.actor, deterministic)
        return policies[deterministic]

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Env actions for raw observations, through ``policy``."""
        return self.policy(deterministic)(obs)

    def observe(self, obs: torch.Tensor, real: torch.Tensor) -> None:
        """Updates the observation statistics with the rows an episode really reached (``real``)."""
        if self.cfg.normalize_obs:
            self.obs_norm.rms.update(obs[real])

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Env actions drawn for raw observations, for training."""
        return self._act(obs)

    def _act_eager(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor.act(self.obs_norm(obs.float()))

    def critic_loss(self, batch: ReplayBatch, obs: torch.Tensor, next_obs: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Soft Bellman error summed over both critics (each row's weighted by its importance weight under
        prioritised replay); also the mean Q and each row's |TD error|, the critics' mean (detached)."""
        with torch.no_grad():
            next_actions, next_log_probs = self.actor(next_obs)
            alpha = self.log_alpha.exp()
            next_q = self.critic_target(next_obs, next_actions).min(0).values - alpha * next_log_probs
            target = batch.rewards + bootstrap_discount(batch, self.cfg.gamma) * (1.0 - batch.terminated) * next_q
        q = self.critic(obs, batch.actions)
        errors = q - target
        squared = errors.square() if batch.weights is None else batch.weights * errors.square()
        return squared.mean(-1).sum(), q.mean().detach(), errors.detach().abs().mean(0)

    def actor_loss(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha * log pi - min Q over fresh actions; also returns the log-probabilities (detached)."""
        actions, log_probs = self.actor(obs)
        q = self.critic(obs, actions).min(0).values
        return (self.log_alpha.exp().detach() * log_probs - q).mean(), log_probs.detach()

    def critic_step(self, batch: ReplayBatch) -> tuple[torch.Tensor, ...]:
        """One gradient step of the critics; returns (their loss, the mean Q, the normalised observations,
        each row's |TD error|)."""
        obs, next_obs = self.obs_norm(batch.obs.float()), self.obs_norm(batch.next_obs.float())
        with self.training_precision():
            loss, q_mean, errors = self.critic_loss(batch, obs, next_obs)
        self.critic_optimizer.zero_grad()
        loss.backward()
        self.critic_optimizer.step()
        return loss.detach(), q_mean, obs, errors

    def actor_step(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step of the actor, and of the temperature where it is tuned; returns (the actor's
        loss, the temperature's, the policy's entropy)."""
        with self.training_precision():
            loss, log_probs = self.actor_loss(obs)
        self.actor_optimizer.zero_grad()
        loss.backward()
        self.actor_optimizer.step()
        entropy = -log_probs.mean()
        temperature_loss = self._zero
        if self.cfg.autotune_alpha:
            temperature_loss = alpha_loss(self.log_alpha, self.target_entropy, entropy)
            self.alpha_optimizer.zero_grad()
            temperature_loss.backward()
            self.alpha_optimizer.step()
        return loss.detach(), temperature_loss.detach(), entropy

    def update(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step of the critics (and, every ``policy_delay`` steps, of the actor and alpha).
        Returns metrics as tensors, without synchronising with the device; those of the actor only on
        the steps that moved it."""
        self.updates += 1
        return self._gradient_step(batch, self.updates % self.cfg.policy_delay == 0,
                                   self.updates % self.cfg.target_update_every == 0)

    def gradient_step(self, batch: ReplayBatch, move_actor: bool, move_targets: bool) -> dict[str, torch.Tensor]:
        """The critics' step, then the actor's and alpha's (``move_actor``) and the Polyak update
        (``move_targets``): one CUDA graph when compiling on a GPU."""
        critic_loss, q_mean, obs, errors = self._critic_step(batch)
        metrics = {"losses/critic": critic_loss, "charts/q_mean": q_mean}
        if self.cfg.prioritized:
            metrics[PRIORITIES] = errors
        if move_actor:
            # requires_grad off so the actor's loss builds no graph through the critic's weights
            self.critic.requires_grad_(False)
            actor_loss, temperature_loss, entropy = self._actor_step(obs)
            self.critic.requires_grad_(True)
            metrics |= {"losses/actor": actor_loss, "losses/alpha": temperature_loss, "charts/entropy": entropy}
        if move_targets:
            polyak_update(self._target_params, self._critic_params, self.cfg.target_update_rate)
        metrics["charts/alpha"] = self.log_alpha.detach().exp()
        return metrics
