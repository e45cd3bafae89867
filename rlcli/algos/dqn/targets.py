"""DQN's maths as pure functions: the exploration schedule, the TD target (plain or double), the
distributional (C51) target's projection onto the atoms, and quantile regression's (QR-DQN) targets and loss."""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F


class EpsilonSchedule(Protocol):
    """What an epsilon-greedy schedule reads of a config (DQN's, PQN's)."""

    steps: int
    epsilon_start: float
    epsilon_end: float
    exploration_fraction: float


def linear_epsilon(step: int, cfg: EpsilonSchedule) -> float:
    """Epsilon after ``step`` env steps: from ``epsilon_start`` down to ``epsilon_end`` in a straight line over
    ``exploration_fraction * steps``, then flat."""
    span = cfg.exploration_fraction * cfg.steps
    fraction = min(step / span, 1.0)
    return cfg.epsilon_start + fraction * (cfg.epsilon_end - cfg.epsilon_start)


def next_actions(next_q_target: torch.Tensor, next_q_online: torch.Tensor | None) -> torch.Tensor:
    """[B, 1]: a' = argmax Q_online(s') (double Q-learning) or, without ``next_q_online``, argmax Q_target(s')."""
    return (next_q_target if next_q_online is None else next_q_online).argmax(-1, keepdim=True)


def td_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q_target: torch.Tensor,
               next_q_online: torch.Tensor | None, gamma: float | torch.Tensor) -> torch.Tensor:
    """r + gamma (1 - terminated) Q_target(s', a'), a' from ``next_actions``: the plain DQN target, max over
    the target's values, or double Q-learning's. ``gamma`` may be each row's own (gamma^k for an n-step
    return r)."""
    best = next_actions(next_q_target, next_q_online)
    return rewards + gamma * (1.0 - terminated) * next_q_target.gather(-1, best).squeeze(-1)


def categorical_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_probs: torch.Tensor,
                        support: torch.Tensor, gamma: float | torch.Tensor) -> torch.Tensor:
    """[B, atoms]: the next action's return distribution ``next_probs`` shifted and shrunk by the Bellman
    operator, each atom z_j moved to r + gamma (1 - terminated) z_j, clipped to the support's range, and its
    probability split between the two atoms around it in proportion to the distance to each (Bellemare et
    al. 2017, algorithm 1)."""
    v_min, v_max = float(support[0]), float(support[-1])
    spacing = (v_max - v_min) / (support.numel() - 1)
    moved = (rewards.unsqueeze(-1) + (gamma * (1.0 - terminated)).unsqueeze(-1) * support).clamp(v_min, v_max)
    # in float32 the top of the support can land a hair past the last atom ((200 + 10) / 4.2 = 50.0000038):
    # its ceil would index one atom too many
    position = ((moved - v_min) / spacing).clamp(max=support.numel() - 1)
    lower, upper = position.floor().long(), position.ceil().long()
    exact = (lower == upper).to(next_probs.dtype)  # on an atom: all of it there
    out = torch.zeros_like(next_probs)
    out.scatter_add_(-1, lower, next_probs * (upper.to(position.dtype) - position + exact))
    out.scatter_add_(-1, upper, next_probs * (position - lower.to(position.dtype)))
    return out


def quantile_levels(n: int) -> torch.Tensor:
    """[n]: the levels (2i - 1) / 2n, i = 1..n, whose quantiles QR-DQN's n outputs estimate (the midpoints of
    n equal slices of probability; Dabney et al. 2018, lemma 2)."""
    return (torch.arange(n, dtype=torch.float32) + 0.5) / n


def quantile_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_quantiles: torch.Tensor,
                     gamma: float | torch.Tensor) -> torch.Tensor:
    """[B, n]: each quantile theta_j of the next action moved by the Bellman operator to r + gamma (1 -
    terminated) theta_j (Dabney et al. 2018, algorithm 1); ``gamma`` may be each row's own."""
    return rewards.unsqueeze(-1) + (gamma * (1.0 - terminated)).unsqueeze(-1) * next_quantiles


def quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """[B]: each row's quantile regression loss. For every pair of an estimate theta_i ([B, n], at level tau_i
    of ``levels``) and a target sample T_j ([B, m]), the error u = T_j - theta_i costs the Huber loss of u
    (kappa 1) weighted by |tau_i - 1{u < 0}|, so that each estimate settles at its quantile of the targets;
    summed over i, averaged over j (Dabney et al. 2018, equation 10)."""
    shape = (*quantiles.shape, targets.shape[-1])  # [B, n, m]
    estimates, samples = quantiles.unsqueeze(-1).expand(shape), targets.unsqueeze(-2).expand(shape)
    # the pairs are B x n x m (1.28M on Pong's 200 quantiles): the Huber part as one op each way, and the weight,
    # which has no gradient, outside the graph
    huber = F.huber_loss(estimates, samples, reduction="none", delta=1.0)
    with torch.no_grad():
        weight = (levels.unsqueeze(-1) - (samples < estimates).to(huber.dtype)).abs()
    return (weight * huber).sum(-2).mean(-1)
