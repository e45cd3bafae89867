"""Twin Delayed DDPG (Fujimoto et al. 2018) for Box actions: its hyperparameters, search space, thread policy
and agent. DDPG (Lillicrap et al. 2016) is its settings with ``policy_delay=1`` and ``target_noise=0``, less
the twin critic (TD3 keeps the smaller of two; DDPG has one).

It rides the off-policy learner SAC uses and SAC's twin critics: a deterministic actor, Gaussian exploration
noise while training (``exploration_noise``, a fraction of the action range), clipped Gaussian noise on the
target's action (target policy smoothing), and the actor and the targets updated every ``policy_delay``
critic steps.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from rlcli.algos.buffers import ReplayBatch, bootstrap_discount
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.offpolicy import ActorCriticReplayConfig
from rlcli.algos.optim import ActorCriticOptimizers
from rlcli.algos.prioritized import PRIORITIES
from rlcli.algos.sac import polyak_update
from rlcli.algos.threads import ThreadPlan
from rlcli.config import NetworkConfig, RunConfig
from rlcli.errors import UsageError
from rlcli.nets.models import QEnsemble, mlp_trunk, training_precision
from rlcli.nets.normalization import ObsNormalizer


class TD3Config(ActorCriticReplayConfig):
    """TD3 hyperparameters (Fujimoto et al. 2018; CleanRL's td3_continuous_action.py where the paper is silent)."""

    algo: Literal["td3"] = "td3"
    """The algorithm."""
    learning_starts: Annotated[int, Field(ge=0)] = 25_000
    """Env steps of uniform random actions before learning; at most buffer_size (equal: learning starts once
    the replay is full)."""
    policy_delay: Annotated[int, Field(gt=0)] = 2
    """Critic updates per actor and target update."""
    exploration_noise: Annotated[float, Field(ge=0)] = 0.1
    """Std of the Gaussian noise on training actions, as a fraction of half the action range."""
    target_noise: Annotated[float, Field(ge=0)] = 0.2
    """Std of the noise on the target's action (target policy smoothing), in the same units; 0: none."""
    target_noise_clip: Annotated[float, Field(ge=0)] = 0.5
    """The target noise clipped to +- this."""
    twin_critics: bool = True
    """The smaller of two critics in the target (TD3), or one critic (DDPG)."""

SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"targets": ["actor_lr", "critic_lr"], "low": 1.0e-5, "high": 3.0e-3, "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "target_update_rate": {"low": 1.0e-3, "high": 0.05, "log": True},
    "batch_size": [64, 128, 256, 512],
    "exploration_noise": [0.05, 0.1, 0.2, 0.3],
    "learning_starts": [1000, 5000, 10000, 25000],
    "network": {"targets": ["actor_hidden", "critic_hidden"], "choices": [[64, 64], [256, 256], [400, 300]]},
}
# measured on the steps that move the actor (every policy_delay-th): an iteration may have none
ACTOR_METRICS = ("losses/actor",)


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """Every core for both: TD3 steps one env and is bound by its update."""
    return ThreadPlan(cores, cores)


def smoothed_target_actions(actions: torch.Tensor, noise: torch.Tensor, scale: float, clip: float) -> torch.Tensor:
    """The target policy's actions in [-1, 1] plus ``noise`` (standard normal draws) times ``scale``, the
    noise clipped to +- ``clip`` first and the sum clipped to [-1, 1] after: TD3's target policy smoothing."""
    return (actions + (noise * scale).clamp(-clip, clip)).clamp(-1.0, 1.0)


def td3_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor, gamma: float | torch.Tensor
                ) -> torch.Tensor:
    """r + gamma (1 - terminated) min over the critics of Q_target(s', a') (``next_q``: [critics, B]; ``gamma``
    each row's own with n-step returns)."""
    return rewards + gamma * (1.0 - terminated) * next_q.min(0).values


class DeterministicActor(nn.Module):
    """Observations -> actions in [-1, 1] (tanh); ``scale_to_env`` maps them to the env's bounds."""

    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden: tuple[int, ...], activation: str) -> None:
        super().__init__()
        self.trunk, width = mlp_trunk(obs_dim, NetworkConfig(hidden=hidden, activation=activation, ortho_init=False))
        self.mean = nn.Linear(width, int(np.prod(action_space.shape)))
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.trunk(obs)))

    def scale_to_env(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.action_scale + self.action_bias

    def unit(self, env_actions: torch.Tensor) -> torch.Tensor:
        """Env actions back in [-1, 1], as the critics read them."""
        return (env_actions - self.action_bias) / self.action_scale


class DeterministicPolicy(nn.Module):
    """Raw observations -> env actions: normalisation (frozen), the actor, its bounds; the agent's own modules."""

    continuous_output = "tanh of the actor's output, scaled to [low, high]"
    pixels = False

    def __init__(self, obs_norm: nn.Module, actor: DeterministicActor) -> None:
        super().__init__()
        self.obs_norm, self.actor = obs_norm, actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor.scale_to_env(self.actor(self.obs_norm(obs.float())))

    def action_log_probs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        return []  # continuous


class TD3(ActorCriticOptimizers, nn.Module):
    """Actor and critics with their targets and optimisers; all state is tensors."""

    def __init__(self, cfg: TD3Config, obs_space: gym.spaces.Box, action_space: gym.Space, n_envs: int,
                 device: torch.device) -> None:
        super().__init__()
        self.check_spaces(obs_space, action_space)
        self.cfg, self.device = cfg, device
        obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(action_space.shape))
        self.actor = DeterministicActor(obs_dim, action_space, cfg.actor_hidden, cfg.activation)  # type: ignore[arg-type]
        self.critic = QEnsemble(obs_dim, act_dim, cfg.critic_hidden, cfg.activation, n=2 if cfg.twin_critics else 1)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs)
        self.to(device)
        self.updates = 0
        self.__dict__["_policy"] = DeterministicPolicy(self.obs_norm, self.actor)  # not a submodule: the same ones
        self._online = list(self.actor.parameters()) + list(self.critic.parameters())
        self._targets = list(self.actor_target.parameters()) + list(self.critic_target.parameters())
        self._critic_step = compiled(self.critic_step, cfg.compile, device)
        self._actor_step = compiled(self.actor_step, cfg.compile, device)
        self._gradient_step = captured(self.gradient_step, cfg.compile, device)

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise UsageError(f"TD3 needs continuous (Box) actions; this environment's are {action_space}. "
                             "Use --algo ppo or --algo dqn")
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise UsageError(f"TD3 here takes flat vector observations; this environment's are {obs_space}")

    def training_precision(self) -> AbstractContextManager:
        return training_precision(self.cfg.precision, self.device)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}

    def extra_state(self) -> dict[str, int]:
        return {"updates": self.updates}  # keeps the policy delay's phase across a resume

    def load_extra_state(self, state: dict[str, int]) -> None:
        self.updates = int(state.get("updates", 0))

    def policy(self, deterministic: bool = True) -> DeterministicPolicy:
        """The deterministic policy (evaluation has no noise to leave out: exploration is training's)."""
        return self._policy

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self._policy(obs)

    def observe(self, obs: torch.Tensor, real: torch.Tensor) -> None:
        """Updates the observation statistics with the rows an episode really reached (``real``)."""
        if self.cfg.normalize_obs:
            self.obs_norm.rms.update(obs[real])

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's env actions plus Gaussian exploration noise, within the bounds, for training."""
        actions = self.actor(self.obs_norm(obs.float()))
        noisy = (actions + self.cfg.exploration_noise * torch.randn_like(actions)).clamp(-1.0, 1.0)
        return self.actor.scale_to_env(noisy)

    def critic_step(self, batch: ReplayBatch) -> tuple[torch.Tensor, ...]:
        """One gradient step of the critics towards the smoothed, clipped double-Q targets; returns (their
        loss, the mean Q, the normalised observations, each row's |TD error|, the critics' mean)."""
        cfg = self.cfg
        obs, next_obs = self.obs_norm(batch.obs.float()), self.obs_norm(batch.next_obs.float())
        with torch.no_grad():
            next_actions = self.actor_target(next_obs)
            next_actions = smoothed_target_actions(next_actions, torch.randn_like(next_actions), cfg.target_noise,
                                                   cfg.target_noise_clip)
            targets = td3_targets(batch.rewards, batch.terminated, self.critic_target(next_obs, next_actions),
                                  bootstrap_discount(batch, cfg.gamma))
        with self.training_precision():
            q = self.critic(obs, self.actor.unit(batch.actions))
            errors = q - targets
            squared = errors.square() if batch.weights is None else batch.weights * errors.square()
            loss = squared.mean(-1).sum()
        self.critic_optimizer.zero_grad()
        loss.backward()
        self.critic_optimizer.step()
        return loss.detach(), q.mean().detach(), obs, errors.detach().abs().mean(0)

    def actor_step(self, obs: torch.Tensor) -> torch.Tensor:
        """One gradient step of the actor up the first critic's values; returns its loss."""
        with self.training_precision():
            loss = -self.critic(obs, self.actor(obs), members=1)[0].mean()
        self.actor_optimizer.zero_grad()
        loss.backward()
        self.actor_optimizer.step()
        return loss.detach()

    def update(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One critic step; every ``policy_delay``-th also an actor step and the targets' Polyak update.
        Metrics stay tensors; the actor's only on the steps that moved it."""
        self.updates += 1
        return self._gradient_step(batch, self.updates % self.cfg.policy_delay == 0)

    def gradient_step(self, batch: ReplayBatch, move_actor: bool) -> dict[str, torch.Tensor]:
        """The critics' step, then (``move_actor``) the actor's and the targets' Polyak update: one CUDA graph
        when compiling on a GPU."""
        critic_loss, q_mean, obs, errors = self._critic_step(batch)
        metrics = {"losses/critic": critic_loss, "charts/q_mean": q_mean}
        if self.cfg.prioritized:
            metrics[PRIORITIES] = errors
        if move_actor:
            self.critic.requires_grad_(False)  # the actor's loss builds no graph through the critics' weights
            metrics["losses/actor"] = self._actor_step(obs)
            self.critic.requires_grad_(True)
            polyak_update(self._targets, self._online, self.cfg.target_update_rate)
        return metrics
