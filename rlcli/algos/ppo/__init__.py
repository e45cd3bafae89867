"""Proximal Policy Optimisation (Schulman et al. 2017) for every action space the networks support, in parts:
``config`` (hyperparameters, search space, thread plan), ``losses`` (the maths, pure functions),
``schedule`` (the learning rate), ``minibatches`` (how an epoch walks a rollout) and ``agent`` (the networks,
normalisers and optimiser that learn, and the update that ties the parts together)."""

from rlcli.algos.ppo.agent import PPO, network_class
from rlcli.algos.ppo.config import (
    COUPLED,
    SEARCH_SPACE,
    PPOConfig,
    check_spaces,
    fit_minibatches,
    shares_cores,
    thread_plan,
)
from rlcli.algos.ppo.losses import (
    clipped_surrogate_loss,
    clipped_value_loss,
    explained_variance,
    pooled_standardize,
    ppo_loss,
    row_mean,
    smooth_clamp,
)
from rlcli.algos.ppo.minibatches import Minibatches, evaluated, sequence_rows
from rlcli.algos.ppo.schedule import LearningRate, adaptive_kl_lr

__all__ = ["COUPLED", "PPO", "SEARCH_SPACE", "LearningRate", "Minibatches", "PPOConfig",
           "adaptive_kl_lr", "check_spaces", "clipped_surrogate_loss", "clipped_value_loss", "evaluated",
           "explained_variance", "fit_minibatches", "network_class", "pooled_standardize", "ppo_loss", "row_mean",
           "sequence_rows", "shares_cores", "smooth_clamp", "thread_plan"]
