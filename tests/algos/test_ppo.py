"""PPO's pure functions against hand-computed cases: the clipped surrogate (hard and smooth), the clipped
value loss, the sampled KL and the adaptive-KL learning rate; and the agent's reward scale, value
normaliser, per-minibatch schedule and KL reference on one hand-made rollout."""

import math

import gymnasium as gym
import pytest
import torch

from rlcli.algos.buffers import RolloutBatch
from rlcli.algos.ppo import (
    PPO,
    PPOConfig,
    adaptive_kl_lr,
    check_spaces,
    clipped_surrogate_loss,
    clipped_value_loss,
    smooth_clamp,
)
from rlcli.algos.ppo.agent import stored_kinds
from rlcli.algos.ppo.losses import ppo_loss, rollout_standardized, sampled_kl
from rlcli.algos.ppo.minibatches import Minibatches
from rlcli.algos.ppo.schedule import clip_range, kl_target
from rlcli.algos.world import SINGLE
from rlcli.errors import UsageError


def surrogate(advantages, ratio, clip=0.2, requires_grad=False):
    ratio = torch.tensor(ratio, requires_grad=requires_grad)
    return clipped_surrogate_loss(torch.tensor(advantages), ratio, clip), ratio


@pytest.mark.parametrize(("advantage", "ratio", "loss"), [
    (2.0, 1.1, -2.2),   # inside [0.8, 1.2]: plain -A r
    (-2.0, 0.9, 1.8),
    (2.0, 1.5, -2.4),   # above 1 + clip, A > 0: the gain stops at r = 1.2
    (-2.0, 1.5, 3.0),   # above 1 + clip, A < 0: the full penalty of r = 1.5 (the pessimistic side)
    (2.0, 0.5, -1.0),   # below 1 - clip, A > 0: the full loss of r = 0.5
    (-2.0, 0.5, 1.6),   # below 1 - clip, A < 0: the gain stops at r = 0.8
    (0.0, 1.5, 0.0),
])
def test_surrogate_single_sample(advantage, ratio, loss):
    value, _ = surrogate([advantage], [ratio])
    assert value.item() == pytest.approx(loss)


def test_surrogate_is_the_mean_over_the_batch():
    value, _ = surrogate([2.0, -2.0, 2.0, -2.0, 1.0], [1.5, 1.5, 0.5, 0.5, 1.0])
    assert value.item() == pytest.approx((-2.4 + 3.0 - 1.0 + 1.6 - 1.0) / 5)


def test_surrogate_gives_no_gradient_where_the_clip_is_the_worse_side():
    # rows 0 and 3 are clipped (no push further from 1); rows 1 and 2 keep d/dr = -A / batch size
    value, ratio = surrogate([2.0, -2.0, 2.0, -2.0], [1.5, 1.5, 0.5, 0.5], requires_grad=True)
    value.backward()
    assert ratio.grad.tolist() == pytest.approx([0.0, 0.5, -0.5, 0.0])


def value_loss(values, old_values, returns, clip_value):
    t = torch.tensor
    return clipped_value_loss(t(values), t(old_values), t(returns), clip_value).item()


def test_value_loss_without_clipping_is_half_the_mean_squared_error():
    # old values are ignored: errors 1 and -3, so 0.5 * (1 + 9) / 2
    assert value_loss([1.0, 3.0], [100.0, -100.0], [0.0, 6.0], None) == pytest.approx(2.5)


@pytest.mark.parametrize(("value", "old_value", "ret", "loss"), [
    (1.2, 1.0, 2.0, 0.5 * 0.8**2),   # moved less than the clip: both terms equal
    (2.0, 0.0, 0.0, 0.5 * 2.0**2),   # moved away from the return: the unclipped error 2 is worse than 0.5
    (2.0, 0.0, 3.0, 0.5 * 2.5**2),   # moved towards it: the clipped value 0.5 is 2.5 short, worse than 1
    (-2.0, 0.0, -3.0, 0.5 * 2.5**2),  # the same, downwards: clipped to -0.5
])
def test_value_loss_with_clipping_takes_the_worse_of_the_two(value, old_value, ret, loss):
    assert value_loss([value], [old_value], [ret], 0.5) == pytest.approx(loss)


def test_clipped_value_loss_is_the_mean_over_the_batch():
    loss = value_loss([1.2, 2.0, 2.0], [1.0, 0.0, 0.0], [2.0, 0.0, 3.0], 0.5)
    assert loss == pytest.approx(0.5 * (0.64 + 4.0 + 6.25) / 3)


@pytest.mark.parametrize(("kl", "lr"), [
    (0.6, 2e-4),   # above twice the target: divided by 1.5
    (0.1, 4.5e-4),  # below half the target: multiplied by 1.5
    (0.25, 3e-4),  # on target
    (0.5, 3e-4),   # exactly twice the target: not above it
    (0.125, 3e-4),  # exactly half: not below it
])
def test_adaptive_kl_lr_branches(kl, lr):
    assert adaptive_kl_lr(3e-4, kl, target=0.25, low=1e-6, high=1e-2) == pytest.approx(lr)


def test_adaptive_kl_lr_bounds():
    low, high = PPOConfig().lr_min, PPOConfig().lr_max
    assert (low, high) == (1e-6, 1e-2)  # rl_games' bounds
    assert adaptive_kl_lr(1.2e-6, kl=1.0, target=0.01, low=low, high=high) == low  # 8e-7 would be below the floor
    assert adaptive_kl_lr(low, kl=1.0, target=0.01, low=low, high=high) == low
    assert adaptive_kl_lr(8e-3, kl=0.0, target=0.01, low=low, high=high) == high  # 1.2e-2 would be above the ceiling
    assert adaptive_kl_lr(high, kl=0.0, target=0.01, low=low, high=high) == high
    assert adaptive_kl_lr(8e-4, kl=0.0, target=0.01, low=low, high=1e-3) == 1e-3  # a lower ceiling, set
    # a starting rate above the ceiling is brought under it whatever the KL: on target, too far, too little
    for kl in (0.01, 1.0, 0.0):
        assert adaptive_kl_lr(3e-3, kl=kl, target=0.01, low=low, high=1e-3) == 1e-3


def test_adaptive_schedule_stays_within_the_configured_bounds():
    # a target far above any KL grows the rate 1.5x at each of 3 epochs, from 1e-5 to 3.375e-5: capped at 2e-5
    ppo = agent(lr_schedule="adaptive_kl", kl_target=1e3, learning_rate=1e-5, lr_max=2e-5)
    ppo.update(rollout(), 0.0)
    assert ppo.lr.value == pytest.approx(2e-5)
    with pytest.raises(ValueError, match="lr_min=0.1 exceeds lr_max=0.01"):
        PPOConfig(lr_min=0.1, lr_max=0.01)


def test_smooth_clamp_runs_through_the_midpoint_with_slope_one_and_saturates_at_the_bounds():
    x = torch.tensor([1.0, 0.8, 1.2, -50.0, 50.0], requires_grad=True)
    y = smooth_clamp(x, 0.8, 1.2)
    sigmoid = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    assert y.tolist() == pytest.approx([1.0, 0.8 + 0.4 * sigmoid(-2.0), 0.8 + 0.4 * sigmoid(2.0), 0.8, 1.2])
    y[0].backward()
    assert x.grad[0].item() == pytest.approx(1.0)  # 0.4 * sigmoid'(0) * 4 / 0.4


def test_smooth_surrogate_is_the_pessimistic_side_of_the_sigmoid_clip():
    # A > 0, r = 1.5: min(1.5 A, smooth(1.5) A) = smooth(1.5) A, just under 1.2 A
    ratio, advantage = 1.5, 2.0
    smooth = 0.8 + 0.4 / (1.0 + math.exp(-(4.0 * (ratio - 0.8) / 0.4 - 2.0)))
    value = clipped_surrogate_loss(torch.tensor([advantage]), torch.tensor([ratio]), 0.2, smooth=True)
    assert value.item() == pytest.approx(-advantage * smooth)
    assert 1.18 < smooth < 1.2
    # A < 0, r = 1.5: the full penalty of r, as with the hard clip
    value = clipped_surrogate_loss(torch.tensor([-advantage]), torch.tensor([ratio]), 0.2, smooth=True)
    assert value.item() == pytest.approx(advantage * ratio)


def agent(**settings):
    cfg = PPOConfig(n_envs=2, n_steps=4, minibatch_size=2, n_epochs=3, network={"hidden": [8]}, **settings)
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    return PPO(cfg, box, box, 2, torch.device("cpu"))


def rollout(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, generator=g) * 3 + 10
    returns = values + torch.randn(n, generator=g)
    return RolloutBatch(torch.randn(n, 3, generator=g), torch.rand(n, 3, generator=g) * 2 - 1,
                        torch.full((n,), -2.0), values, returns - values, returns)


def test_reward_scale_multiplies_rewards_before_normalisation():
    rewards, dones = torch.tensor([1.0, -2.0]), torch.tensor([False, False])
    assert agent(reward_scale=0.1).scale_rewards(rewards, dones).tolist() == pytest.approx([0.1, -0.2])
    assert agent().scale_rewards(rewards, dones).tolist() == [1.0, -2.0]


def test_value_normaliser_learns_standardised_targets_and_maps_outputs_back():
    ppo = agent(normalize_value=True)
    batch = rollout()
    ppo.update(batch, 0.0)
    norm = ppo.value_norm
    # its statistics are the returns' (from the prior of one unit variance at weight 1e-4)
    assert norm.rms.mean.item() == pytest.approx(batch.returns.double().mean().item(), rel=1e-4)
    assert norm.rms.var.item() == pytest.approx(batch.returns.double().var(unbiased=False).item(), rel=1e-3)
    std = math.sqrt(norm.rms.var.item() + 1e-8)
    assert norm.normalize(batch.returns).tolist() == pytest.approx(
        ((batch.returns - norm.rms.mean.item()) / std).tolist(), rel=1e-5, abs=1e-5)
    assert norm.denormalize(norm.normalize(batch.returns)).tolist() == pytest.approx(batch.returns.tolist(), rel=1e-5)
    # the value the rollout sees is the critic's output mapped back
    obs = batch.obs[:2]
    raw = ppo.net.value(ppo.obs_norm(obs))
    assert ppo.value(obs).tolist() == pytest.approx((raw * std + norm.rms.mean.item()).tolist(), rel=1e-5)
    assert "value_norm.rms.mean" in ppo.state_dict()
    assert not any("value_norm" in key for key in agent().state_dict())  # old runs load as they were


def test_value_normaliser_off_leaves_values_as_the_critic_gives_them():
    ppo, obs = agent(), rollout().obs[:2]
    assert torch.equal(ppo.value(obs), ppo.net.value(ppo.obs_norm(obs)))


@pytest.mark.parametrize(("every", "changes"), [("epoch", 3), ("minibatch", 12)])
def test_adaptive_schedule_adapts_after_each_epoch_or_each_minibatch(every, changes):
    # 8 rows in minibatches of 2 over 3 epochs: 12 minibatches; a target far above any KL grows the
    # rate 1.5x at each decision
    ppo = agent(lr_schedule="adaptive_kl", kl_target=1e3, lr_adapt_every=every, learning_rate=1e-5)
    ppo.update(rollout(), 0.0)
    assert ppo.lr.value == pytest.approx(1e-5 * 1.5 ** changes)


def test_sampled_kl_is_the_mean_of_exp_minus_one_minus_the_log_ratio():
    # ratios 1, 2 and 1/2: 0, 1 - ln 2 and ln 2 - 1/2, whose mean is exactly 1/6
    log_ratio = torch.tensor([0.0, math.log(2.0), -math.log(2.0)], dtype=torch.float64)
    assert sampled_kl(log_ratio).item() == pytest.approx(1.0 / 6.0, rel=1e-12)
    assert sampled_kl(log_ratio, total=torch.tensor(6.0, dtype=torch.float64)).item() == pytest.approx(1.0 / 12.0)


def test_ppo_loss_measures_the_kl_from_the_reference_where_one_is_given():
    # the rollout's policy is the current one (ratio 1: KL 0); the reference gave the two actions half and
    # twice their probability now: KL (1 - ln 2 + ln 2 - 1/2) / 2 = 1/4
    log_probs = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    rows = (log_probs, torch.zeros(2), torch.zeros(2), log_probs.clone(), torch.zeros(2), torch.ones(2), torch.zeros(2))
    reference = log_probs + torch.tensor([-math.log(2.0), math.log(2.0)], dtype=torch.float64)
    cfg = PPOConfig(normalize_advantage=False)
    assert ppo_loss(cfg, rows, torch.tensor(0.2), SINGLE)[1][3].item() == 0.0
    assert ppo_loss(cfg, rows, torch.tensor(0.2), SINGLE, reference)[1][3].item() == pytest.approx(0.25, rel=1e-12)


def test_rollout_standardized_uses_the_moments_of_the_learning_rows():
    # [1, 3]: mean 2, standard deviation sqrt(2); [1, 2, 3] of the valid rows: mean 2, deviation 1
    both = rollout_standardized(torch.tensor([1.0, 3.0], dtype=torch.float64), None, SINGLE)
    assert both.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-7)
    valid = torch.tensor([True, False, True, True])
    masked = rollout_standardized(torch.tensor([1.0, 100.0, 2.0, 3.0], dtype=torch.float64), valid, SINGLE)
    assert masked.tolist() == pytest.approx([-1.0, 100.0, 0.0, 1.0], rel=1e-7)


def test_ppo_loss_takes_rollout_standardised_advantages_as_given():
    # ratio 1: the policy loss is minus the mean advantage, 0 once a minibatch standardises [1, 3] itself
    log_probs = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    advantages = torch.tensor([1.0, 3.0], dtype=torch.float64)
    rows = (log_probs, torch.zeros(2), torch.zeros(2), log_probs.clone(), torch.zeros(2), advantages, torch.zeros(2))
    rollout_scope = ppo_loss(PPOConfig(normalize_advantage_over="rollout"), rows, torch.tensor(0.2), SINGLE)
    assert rollout_scope[1][0].item() == -2.0
    assert ppo_loss(PPOConfig(), rows, torch.tensor(0.2), SINGLE)[1][0].item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("over", ["minibatch", "rollout"])
def test_every_minibatch_step_sees_the_rollout_s_advantages_standardised_once_or_as_they_are(over):
    ppo, batch, seen = agent(normalize_advantage_over=over), rollout(), []

    def step(rows, clip, reference):
        seen.append(rows[4].clone())
        return torch.zeros(6), rows[2]

    ppo._step = step
    ppo.update(batch, 0.0)
    assert len(seen) == 12  # 3 epochs of 4 minibatches of 2 rows
    rows = torch.cat(seen[:4])
    a = batch.advantages.double()
    expected = (a - a.mean()) / (a.std() + 1e-8) if over == "rollout" else a
    assert sorted(rows.tolist()) == pytest.approx(sorted(expected.tolist()), rel=1e-6)


@pytest.mark.parametrize("previous_epoch", [False, True])
def test_previous_epoch_kl_reference_is_each_row_s_log_probs_one_epoch_earlier(previous_epoch):
    # 8 rows in minibatches of 2 over 3 epochs, each row's observation its number; each step answers with
    # log-probs that name its epoch and rows (100 * epoch + row), so a row's reference says where it came from
    batch = rollout()._replace(obs=torch.arange(8.0).unsqueeze(-1))
    given = []

    def step(rows, reference):
        row, epoch = rows[0][:, 0], len(given) // 4
        given.append((epoch, row, reference))
        return torch.zeros(6), 100.0 * epoch + row

    Minibatches(2, 4, SINGLE, torch.device("cpu")).train(batch, 3, step, agent().lr, previous_epoch=previous_epoch)
    assert len(given) == 12
    for epoch, row, reference in given:
        if not previous_epoch:
            assert reference is None
        elif epoch == 0:  # the rollout's log-probs
            assert torch.equal(reference, batch.log_probs[row.long()])
        else:  # what the step of the epoch before returned for the same rows
            assert torch.equal(reference, 100.0 * (epoch - 1) + row)


def test_previous_epoch_kl_reference_needs_a_feed_forward_network():
    with pytest.raises(ValueError, match="kl_reference=previous_epoch keeps each row's log-probability"):
        PPOConfig(kl_reference="previous_epoch", n_steps=8, minibatch_size=16, network={"recurrent": "lstm"})


@pytest.mark.parametrize(("schedule", "progress", "expected"), [
    ("constant", 0.0, 0.2), ("constant", 0.75, 0.2), ("linear", 0.0, 0.2), ("linear", 0.25, 0.15),
    ("linear", 1.0, 0.0), ("linear", 1.02, 0.0)])  # the last rollout may run a little past the budget
def test_clip_range_is_constant_or_falls_linearly_to_zero(schedule, progress, expected):
    assert clip_range(PPOConfig(clip_range=0.2, clip_range_schedule=schedule), progress) == pytest.approx(expected)


@pytest.mark.parametrize(("schedule", "progress", "expected"), [
    ("constant", 0.0, 0.008), ("constant", 0.9, 0.008), ("linear", 0.0, 0.008), ("linear", 0.75, 0.002),
    ("linear", 1.0, 0.0), ("linear", 1.02, 0.0)])
def test_kl_target_is_constant_or_falls_linearly_to_zero(schedule, progress, expected):
    cfg = PPOConfig(kl_target=0.008, kl_target_schedule=schedule)
    assert kl_target(cfg, progress) == pytest.approx(expected)


def test_adaptive_schedule_aims_at_the_kl_target_of_the_update_s_progress():
    # one epoch's KL judged against 0.008 at the start, against 0.002 three quarters through: a KL of 0.005
    # is on target for the first (rate kept) and above twice the second (rate divided by 1.5)
    ppo = agent(lr_schedule="adaptive_kl", kl_target=0.008, kl_target_schedule="linear", learning_rate=3e-4)
    for progress, expected in ((0.0, 3e-4), (0.75, 2e-4)):
        ppo.lr.begin(progress, 0.2)
        ppo.lr.adapt(torch.tensor(0.005), 1)
        assert ppo.lr.value == pytest.approx(expected)


def test_rollouts_store_frames_as_bytes_and_discrete_actions_as_indices():
    frames, vector = gym.spaces.Box(0, 255, (4, 84, 84), "uint8"), gym.spaces.Box(-1, 1, (3,))
    assert stored_kinds(PPOConfig(), frames, gym.spaces.Discrete(6), [6]) == (torch.uint8, (1,), torch.long)
    assert stored_kinds(PPOConfig(normalize_obs=True), frames, gym.spaces.Discrete(6), [6])[0] == torch.float32
    assert stored_kinds(PPOConfig(), vector, gym.spaces.Box(-1, 1, (2,)), []) == (torch.float32, (2,), torch.float32)
    assert stored_kinds(PPOConfig(), vector, gym.spaces.MultiDiscrete([3, 4]), [3, 4])[1:] == ((2,), torch.long)


def test_ppo_refuses_the_spaces_it_cannot_act_in():
    check_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([3, 4]))
    with pytest.raises(UsageError, match="Box observations"):
        check_spaces(gym.spaces.Discrete(3), gym.spaces.Discrete(2))
    with pytest.raises(UsageError, match="Discrete, MultiDiscrete or Box actions"):
        check_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiBinary(2))
