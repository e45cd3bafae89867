"""Deep Q-learning (Mnih et al. 2015) for Discrete actions, with the Rainbow components (Hessel et al. 2018) as
settings: double Q-learning, dueling heads, n-step returns and prioritised replay (the off-policy learner's),
distributional values (C51, or quantile regression as QR-DQN) and noisy layers.

It rides the off-policy learner SAC uses (replay, random actions before ``learning_starts``, ``utd_ratio``
gradient steps per transition). Acting is epsilon-greedy, epsilon falling linearly from ``epsilon_start`` to
``epsilon_end`` over the first ``exploration_fraction`` of the budget (through the noisy heads' draw where they
are noisy); evaluation, play and export run the greedy policy.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from functools import cached_property

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlcli.algos.buffers import ReplayBatch, bootstrap_discount
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.dqn.config import DQNConfig
from rlcli.algos.dqn.networks import ActionMask, GreedyPolicy, QNetwork, check_q_spaces, check_trunk
from rlcli.algos.dqn.targets import (
    categorical_targets,
    linear_epsilon,
    next_actions,
    quantile_huber_loss,
    quantile_targets,
    td_targets,
)
from rlcli.algos.optim import adam
from rlcli.algos.prioritized import PRIORITIES
from rlcli.algos.sac import polyak_update
from rlcli.envs.layout import ObsLayout, n_actions
from rlcli.errors import UsageError
from rlcli.nets.models import training_precision
from rlcli.nets.normalization import ObsNormalizer


def of_actions(distributions: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """[B, K]: each row's distribution ([B, actions, K]: atoms or quantiles) of its action ([B, 1])."""
    return distributions.gather(1, actions.unsqueeze(-1).expand(-1, 1, distributions.shape[-1])).squeeze(1)


class DQN(nn.Module):
    """Q network, its target and their optimiser; all state is tensors, and the env steps seen (epsilon's
    schedule) in the extra state."""

    def __init__(self, cfg: DQNConfig, obs_space: gym.spaces.Box, action_space: gym.Space, n_envs: int,
                 device: torch.device, obs_layout: ObsLayout | None = None) -> None:
        super().__init__()
        self.check_spaces(obs_space, action_space)
        if obs_layout is not None and obs_layout.groups:
            raise UsageError("DQN learns one policy; agents of different spaces need --algo ppo")
        self.cfg, self.device = cfg, device
        self.n_actions = n_actions(action_space)
        check_trunk("DQN", cfg.trunk, tuple(obs_space.shape))
        self.q = QNetwork(tuple(obs_space.shape), self.n_actions, cfg.hidden, cfg.activation, cfg.dueling,
                          cfg.atoms, cfg.v_min, cfg.v_max, cfg.noisy, cfg.noisy_std, trunk=cfg.trunk,
                          quantiles=cfg.quantiles)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        # an action mask's columns of the observation: the network reads them as flags, and no value of a
        # masked action is acted on or bootstrapped from
        mask = obs_layout.mask_columns() if obs_layout is not None else []
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs, mask)
        self.mask = ActionMask(mask)
        self.to(device)
        self.env_steps, self.updates = 0, 0
        # not a submodule: the same modules
        self.__dict__["_greedy"] = GreedyPolicy(self.obs_norm, self.q, self.mask)
        self._params, self._target_params = list(self.q.parameters()), list(self.q_target.parameters())
        self._q_step = compiled(self.q_step, cfg.compile, device)
        self._gradient_step = captured(self.gradient_step, cfg.compile, device)
        self._epsilon = torch.zeros((), device=device)  # the metric, written in place: no new tensor a step

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        check_q_spaces("DQN", obs_space, action_space)

    def training_precision(self) -> AbstractContextManager:
        return training_precision(self.cfg.precision, self.device)

    @cached_property
    def optimizer(self) -> torch.optim.Adam:
        """Adam over the Q network's parameters (not its target's)."""
        return adam(self.q.parameters(), lr=self.cfg.learning_rate, eps=self.cfg.adam_eps)

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
        if self.cfg.noisy:
            self.q.reset_noise()
            greedy = self.mask(self.q(self.obs_norm(obs.float()), noise=True), obs).argmax(-1)
        else:
            greedy = self._greedy(obs)
        explore = torch.rand(obs.shape[0], device=obs.device) < self.epsilon
        return torch.where(explore, self.mask.uniform(obs, self.n_actions), greedy)

    def td_loss(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loss between Q(s, a) and the TD targets (each row's weighted by its importance weight under
        prioritised replay); also the mean Q and each row's |TD error| (detached), or with atoms each row's
        cross-entropy to its projected target, or with quantiles each row's quantile regression loss."""
        obs, next_obs = self._replayed(batch.obs), self._replayed(batch.next_obs)
        actions = batch.actions.long().reshape(-1, 1)  # the buffer keeps actions as one float column
        noise = self.cfg.noisy
        if noise:
            self.q.reset_noise()
            self.q_target.reset_noise()
        if self.cfg.atoms > 1:
            return self.distributional_loss(batch, obs, next_obs, actions)
        if self.cfg.quantiles > 1:
            return self.quantile_loss(batch, obs, next_obs, actions)
        with torch.no_grad():
            next_online = self.mask(self.q(next_obs, noise), batch.next_obs) if self.cfg.double_q else None
            # the heads run in bf16 under that precision; the targets, the loss and the priorities do not
            targets = td_targets(batch.rewards, batch.terminated, self.mask(self.q_target(next_obs, noise).float(),
                                                                           batch.next_obs), next_online,
                                 bootstrap_discount(batch, self.cfg.gamma))
        q = self.q(obs, noise).gather(-1, actions).squeeze(-1).float()
        loss_of = F.smooth_l1_loss if self.cfg.loss == "huber" else F.mse_loss
        if batch.weights is None:
            loss = loss_of(q, targets)
        else:
            loss = (batch.weights * loss_of(q, targets, reduction="none")).mean()
        return loss, q.mean().detach(), (q - targets).detach().abs()

    def _replayed(self, obs: torch.Tensor) -> torch.Tensor:
        """Replayed observations as the Q network takes them: frames as bytes (it scales them itself), vectors
        as floats, normalised where that is on."""
        if self.obs_norm.enabled or not self.q.pixels:
            return self.obs_norm(obs.float())
        return obs

    def distributional_loss(self, batch: ReplayBatch, obs: torch.Tensor, next_obs: torch.Tensor,
                            actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """C51: the cross-entropy between the taken action's distribution and the projected target of the
        next state's chosen action (double Q-learning's choice where it is on)."""
        noise, support = self.cfg.noisy, self.q.support
        with torch.no_grad():
            next_probs = self.q_target.heads(next_obs, noise).float().softmax(-1)
            next_online = self.mask(self.q(next_obs, noise), batch.next_obs) if self.cfg.double_q else None
            best = next_actions(self.mask((next_probs * support).sum(-1), batch.next_obs), next_online)
            targets = categorical_targets(batch.rewards, batch.terminated, of_actions(next_probs, best), support,
                                          bootstrap_discount(batch, self.cfg.gamma))
        log_probs = of_actions(self.q.heads(obs, noise), actions).float().log_softmax(-1)
        per_row = -(targets * log_probs).sum(-1)
        loss = per_row.mean() if batch.weights is None else (batch.weights * per_row).mean()
        q_mean = (log_probs.detach().exp() * support).sum(-1).mean()
        return loss, q_mean, per_row.detach()

    def quantile_loss(self, batch: ReplayBatch, obs: torch.Tensor, next_obs: torch.Tensor,
                      actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """QR-DQN: the quantile Huber loss between the taken action's quantiles and the next state's chosen
        action's (by their means, or double Q-learning's choice where it is on) moved by the Bellman operator."""
        noise = self.cfg.noisy
        with torch.no_grad():
            next_quantiles = self.q_target.heads(next_obs, noise).float()
            next_online = self.mask(self.q(next_obs, noise), batch.next_obs) if self.cfg.double_q else None
            best = next_actions(self.mask(next_quantiles.mean(-1), batch.next_obs), next_online)
            targets = quantile_targets(batch.rewards, batch.terminated, of_actions(next_quantiles, best),
                                       bootstrap_discount(batch, self.cfg.gamma))
        quantiles = of_actions(self.q.heads(obs, noise), actions).float()
        per_row = quantile_huber_loss(quantiles, targets, self.q.levels)
        loss = per_row.mean() if batch.weights is None else (batch.weights * per_row).mean()
        return loss, quantiles.detach().mean(), per_row.detach()

    def q_step(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward, loss, backward, clipping and Adam: what ``compile`` compiles."""
        with self.training_precision():
            loss, q_mean, errors = self.td_loss(batch)
        self.optimizer.zero_grad()
        loss.backward()
        if self.cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self._params, self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return loss.detach(), q_mean, errors

    def gradient_step(self, batch: ReplayBatch, move_target: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The Q step, then (``move_target``) the target's update: one CUDA graph when compiling on a GPU."""
        loss, q_mean, errors = self._q_step(batch)
        if move_target:
            polyak_update(self._target_params, self._params, self.cfg.target_update_rate)
        return loss, q_mean, errors

    def update(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step, and every ``target_update_every``-th the target's update. Metrics stay tensors;
        under prioritised replay they include the rows' new priorities."""
        self.updates += 1
        loss, q_mean, errors = self._gradient_step(batch, self.updates % self.cfg.target_update_every == 0)
        self._epsilon.fill_(self.epsilon)
        metrics = {"losses/td": loss, "charts/q_mean": q_mean, "charts/epsilon": self._epsilon}
        return {**metrics, PRIORITIES: errors} if self.cfg.prioritized else metrics
