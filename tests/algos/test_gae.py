"""GAE and returns against hand-computed cases, including truncation, termination and reset rows."""

import pytest
import torch

from rlcli.algos.buffers import RolloutBuffer, compute_gae


def gae(rewards, values, terminated, dones, gamma=0.9, lam=0.5):
    t = lambda x, dt=torch.float32: torch.tensor(x, dtype=dt).unsqueeze(-1)  # noqa: E731
    return compute_gae(rewards=t(rewards), values=t(values), terminated=t(terminated, torch.bool),
                       dones=t(dones, torch.bool), gamma=gamma, gae_lambda=lam).squeeze(-1)


def test_no_episode_end_matches_closed_form():
    # constant reward 1, zero values: A_t = sum_k (gamma*lam)^k * r_{t+k}
    adv = gae([1, 1, 1], [0, 0, 0, 0], [0, 0, 0], [0, 0, 0])
    assert adv.tolist() == pytest.approx([1 + 0.45 + 0.45**2, 1 + 0.45, 1])


def test_lambda_one_gives_discounted_return_minus_value():
    adv = gae([1, 2, 3], [0.5, 0.5, 0.5, 2.0], [0, 0, 0], [0, 0, 0], gamma=0.9, lam=1.0)
    ret0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 2.0
    assert adv[0].item() == pytest.approx(ret0 - 0.5)


def test_bootstrap_from_last_value():
    adv = gae([0.0], [0.0, 10.0], [0], [0], gamma=0.9, lam=0.5)
    assert adv.item() == pytest.approx(9.0)


def test_termination_does_not_bootstrap_or_carry():
    # step 1 terminates: its target is r only; step 0 does not see anything after step 1
    adv = gae([1, 1, 5], [0, 0, 7, 3], [0, 1, 0], [0, 1, 0], gamma=0.9, lam=0.5)
    d2 = 5 + 0.9 * 3 - 7
    assert adv[2].item() == pytest.approx(d2)
    assert adv[1].item() == pytest.approx(1.0)  # 1 + 0 (terminated) - 0, no carry
    assert adv[0].item() == pytest.approx(1 + 0.45 * 1.0)


def test_truncation_bootstraps_from_real_final_observation_but_stops_the_recursion():
    # step 0 is cut by a time limit: values[1] is the value of the real final observation
    adv = gae([1.0, 100.0], [0.0, 4.0, 0.0], [0, 0], [1, 0], gamma=0.9, lam=0.5)
    assert adv[0].item() == pytest.approx(1 + 0.9 * 4.0)


def test_buffer_masks_reset_rows_and_returns_are_advantage_plus_value():
    buf = RolloutBuffer(3, 2, (1,), torch.float32, (1,), torch.long, torch.device("cpu"))
    buf.obs[:, :, 0] = torch.arange(6, dtype=torch.float32).view(3, 2)
    buf.rewards.fill_(1.0)
    buf.values[:] = 0.5
    buf.valid[:] = True
    buf.valid[1, 0] = False  # env 0 was reset at step 1: the action taken there was ignored
    buf.dones[0, 0] = buf.terminated[0, 0] = True
    batch = buf.batch(gamma=0.9, gae_lambda=0.5)
    assert batch.obs.shape[0] == 5
    assert 2.0 not in batch.obs.flatten().tolist()  # obs of (t=1, env=0) is dropped
    assert torch.allclose(batch.returns, batch.advantages + batch.values)
