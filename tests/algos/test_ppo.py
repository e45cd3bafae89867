"""PPO's pure functions against hand-computed cases: the clipped surrogate, the clipped value loss and the
adaptive-KL learning rate."""

import pytest
import torch

from rlcli.algos.ppo import MAX_LR, MIN_LR, adaptive_kl_lr, clipped_surrogate_loss, clipped_value_loss


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
    assert adaptive_kl_lr(3e-4, kl, target=0.25) == pytest.approx(lr)


def test_adaptive_kl_lr_bounds():
    assert (MIN_LR, MAX_LR) == (1e-6, 1e-2)
    assert adaptive_kl_lr(1.2e-6, kl=1.0, target=0.01) == MIN_LR  # 8e-7 would be below the floor
    assert adaptive_kl_lr(MIN_LR, kl=1.0, target=0.01) == MIN_LR
    assert adaptive_kl_lr(8e-3, kl=0.0, target=0.01) == MAX_LR  # 1.2e-2 would be above the ceiling
    assert adaptive_kl_lr(MAX_LR, kl=0.0, target=0.01) == MAX_LR
