"""PPO's maths as pure functions: the clipped surrogate (hard or smooth), the clipped value loss, and the
means and standardisation over a minibatch that several processes may split between them."""

from __future__ import annotations

import torch

from rlcli.algos.ppo.config import PPOConfig
from rlcli.algos.world import World


def row_mean(values: torch.Tensor, total: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of ``values``; with ``total``, their sum over ``total`` rows: this process's share of the mean
    over a minibatch split between processes, whose shares sum to it."""
    return values.mean() if total is None else values.sum() / total


def smooth_clamp(x: torch.Tensor, low: float | torch.Tensor, high: float | torch.Tensor) -> torch.Tensor:
    """A sigmoid from ``low`` to ``high`` through their midpoint with slope 1 there (rl_games'
    smooth_clamp): ``low + (high - low) * sigmoid(4 (x - low) / (high - low) - 2)``."""
    width = high - low
    return low + width * torch.sigmoid(4.0 * (x - low) / width - 2.0)


def clipped_surrogate_loss(advantages: torch.Tensor, ratio: torch.Tensor, clip: float | torch.Tensor,
                           total: torch.Tensor | None = None, smooth: bool = False) -> torch.Tensor:
    """PPO's clipped objective, negated to a loss: mean of max(-A r, -A clip(r, 1 - clip, 1 + clip)),
    the clip a sigmoid where ``smooth`` (``total``: see ``row_mean``)."""
    clipped = smooth_clamp(ratio, 1.0 - clip, 1.0 + clip) if smooth else ratio.clamp(1.0 - clip, 1.0 + clip)
    return row_mean(torch.max(-advantages * ratio, -advantages * clipped), total)


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip_value: float | None, total: torch.Tensor | None = None) -> torch.Tensor:
    """Half the mean squared error of the values; with ``clip_value``, of whichever is worse, the new
    value or the rollout's value moved by at most ``clip_value`` towards it (PPO2's value clipping)."""
    if clip_value is None:
        return 0.5 * row_mean((values - returns).square(), total)
    clipped = old_values + (values - old_values).clamp(-clip_value, clip_value)
    return 0.5 * row_mean(torch.max((values - returns).square(), (clipped - returns).square()), total)


def pooled_standardize(advantages: torch.Tensor, world: World, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows of a minibatch split between processes in the whole minibatch's rows, as float32; the
    advantages standardised by its mean and standard deviation where ``normalize``), with one all-reduce."""
    a = advantages.double()
    moments = world.sum_(torch.stack([torch.tensor(float(a.numel()), dtype=torch.float64, device=a.device),
                                      a.sum(), a.square().sum()]))
    count, total, squares = moments.unbind()
    if normalize:
        mean = total / count
        std = ((squares - total * mean) / (count - 1.0).clamp_min(1.0)).clamp_min(0.0).sqrt()
        advantages = ((a - mean) / (std + 1e-8)).to(advantages.dtype)
    return count.float(), advantages


def rollout_standardized(advantages: torch.Tensor, valid: torch.Tensor | None, world: World) -> torch.Tensor:
    """A rollout's advantages standardised by the mean and standard deviation of its learning rows
    (``valid``, or every row where None) over every process's rollout."""
    if valid is None:
        return pooled_standardize(advantages, world, True)[1]
    standardized = advantages.clone()
    standardized[valid] = pooled_standardize(advantages[valid], world, True)[1]
    return standardized


def explained_variance(returns: torch.Tensor, values: torch.Tensor, world: World,
                       sums: torch.Tensor | None = None) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) over every process's rows (0 where the returns do not vary).
    With several processes ``sums`` (their shares of the update's loss sums) are summed over them in place, in
    the same all-reduce."""
    if world.size == 1:
        var_returns = returns.var()
        explained = 1.0 - (returns - values).var() / var_returns
        return torch.where(var_returns > 0, explained, torch.zeros_like(explained))
    assert sums is not None
    r, e = returns.double(), (returns - values).double()
    pooled = world.sum_(torch.cat([sums[:5].double(), torch.stack([
        torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device), r.sum(), r.square().sum(),
        e.sum(), e.square().sum()])]))
    sums[:5] = pooled[:5].to(sums.dtype)
    n, r_sum, r_squares, e_sum, e_squares = pooled[5:].unbind()
    var_returns = r_squares - r_sum * r_sum / n
    explained = 1.0 - (e_squares - e_sum * e_sum / n) / var_returns
    return torch.where(var_returns > 0, explained, torch.zeros_like(explained)).float()


# what ``ppo_loss``'s statistics are, in their order, as the update reports their means
STATS = ("losses/policy", "losses/value", "losses/entropy", "losses/approx_kl", "losses/clip_fraction")


def sampled_kl(log_ratio: torch.Tensor, total: torch.Tensor | None = None) -> torch.Tensor:
    """Schulman's low-variance estimate of the KL between two policies from the log-ratios of their
    probabilities of sampled actions: the mean of ``exp(d) - 1 - d`` (``total``: see ``row_mean``)."""
    return row_mean(log_ratio.exp() - 1.0 - log_ratio, total)


def ppo_loss(cfg: PPOConfig, evaluated: tuple[torch.Tensor, ...], clip: torch.Tensor, world: World,
             reference: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(PPO's loss on a minibatch, its (policy loss, value loss, entropy, KL, clip fraction) detached) from
    ``evaluated``: the rows' (log_probs, entropy, values) under the current network, then the rollout's
    (log_probs, values, advantages, returns). The KL is from the rollout's policy, or from the policy whose
    log-probabilities of the same actions are ``reference``. With several processes each loss is this
    process's share of the minibatch's mean, its advantages standardised over the whole minibatch."""
    log_probs, entropy, values, old_log_probs, old_values, advantages, returns = evaluated
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    total = None  # one process: every loss is a mean over the minibatch
    normalize = cfg.normalize_advantage and cfg.normalize_advantage_over == "minibatch"
    if world.size > 1:
        total, advantages = pooled_standardize(advantages, world, normalize)
    elif normalize and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = clipped_surrogate_loss(advantages, ratio, clip, total, cfg.smooth_clip)
    value_loss = clipped_value_loss(values, old_values, returns, cfg.clip_value, total)
    entropy_mean = row_mean(entropy, total)
    # without an entropy bonus its term adds exact zeros to the loss and the logits' gradient: left out,
    # the backward pass skips the entropy's nodes (the same bits)
    loss = (policy_loss + cfg.vf_coef * value_loss if cfg.ent_coef == 0.0 else
            policy_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * value_loss)
    with torch.no_grad():
        approx_kl = sampled_kl(log_ratio if reference is None else log_probs - reference, total)
        clip_fraction = row_mean(((ratio - 1.0).abs() > clip).float(), total)
        return loss, torch.stack([policy_loss.detach(), value_loss.detach(), entropy_mean.detach(), approx_kl,
                                  clip_fraction])
