"""DQN's maths as pure functions: the exploration schedule, the TD target (plain or double) and the
distributional (C51) target's projection onto the atoms."""

from __future__ import annotations

from typing import Protocol

import torch


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
    position = (moved - v_min) / spacing
    lower, upper = position.floor().long(), position.ceil().long()
    exact = (lower == upper).to(next_probs.dtype)  # on an atom: all of it there
    out = torch.zeros_like(next_probs)
    out.scatter_add_(-1, lower, next_probs * (upper.to(position.dtype) - position + exact))
    out.scatter_add_(-1, upper, next_probs * (position - lower.to(position.dtype)))
    return out
