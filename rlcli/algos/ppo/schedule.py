"""PPO's learning rate over training: constant, linear to zero, or adapted to how far each step moved the
policy (rl_games' adaptive KL rule), the lead's where several processes learn; and its clip range."""

from __future__ import annotations

import torch

from rlcli.algos.optim import set_lr
from rlcli.algos.ppo.config import PPOConfig
from rlcli.algos.world import World
from rlcli.config import Schedule


def adaptive_kl_lr(lr: float, kl: float, target: float, low: float, high: float) -> float:
    """rl_games' rule: shrink the step when the policy moved too far, grow it when it barely moved; always
    within [``low``, ``high``], also when ``lr`` started outside them."""
    if kl > 2.0 * target:
        lr = lr / 1.5
    elif kl < 0.5 * target:
        lr = lr * 1.5
    return min(max(lr, low), high)


def kl_target(cfg: PPOConfig, progress: float) -> float:
    """The KL the adaptive schedule aims at ``progress`` (the fraction of training done) through training."""
    return cfg.kl_target * (max(1.0 - progress, 0.0) if cfg.kl_target_schedule == "linear" else 1.0)


def clip_range(cfg: PPOConfig, progress: float) -> float:
    """The surrogate's clip range with ``progress`` (the fraction of training done) through training."""
    return cfg.clip_range * (max(1.0 - progress, 0.0) if cfg.clip_range_schedule == "linear" else 1.0)


class LearningRate:
    """The optimiser's learning rate: set at the start of each update from the schedule, and with
    ``adaptive_kl`` changed after each epoch (or minibatch: ``lr_adapt_every``) from its mean KL."""

    def __init__(self, cfg: PPOConfig, optimizer: torch.optim.Optimizer, world: World) -> None:
        self.cfg, self.optimizer, self.world = cfg, optimizer, world
        self.value = cfg.learning_rate
        self.progress = 0.0
        self.adapt_every = cfg.lr_adapt_every if cfg.lr_schedule == Schedule.adaptive_kl else None

    def begin(self, progress: float, clip: float) -> float:
        """Sets the rate of an update ``progress`` (the fraction of training done) into training; returns
        ``clip``, the update's clip range, as the lead has it (one exchange for both)."""
        cfg = self.cfg
        self.progress = progress
        if cfg.lr_schedule == Schedule.linear:
            self.value = cfg.learning_rate * max(1.0 - progress, 0.0)
        elif cfg.lr_schedule == Schedule.constant:
            self.value = cfg.learning_rate
        self.value, clip = self.world.agree(self.value, clip)
        self.apply(self.value)
        return clip

    def adapt(self, kl_sum: torch.Tensor, steps: int) -> None:
        """The next rate from the mean KL of ``steps`` minibatch steps (summed over every process's rows),
        decided by the lead."""
        kl = float(self.world.sum_(kl_sum)) / steps
        cfg = self.cfg
        self.value = adaptive_kl_lr(self.value, kl, kl_target(cfg, self.progress), cfg.lr_min, cfg.lr_max)
        (self.value,) = self.world.agree(self.value)
        self.apply(self.value)

    def apply(self, lr: float) -> None:
        set_lr(self.optimizer, lr)
