import numpy as np
import pytest
import torch

from rlcli.nets.normalization import ObsNormalizer, RewardScaler, RunningMeanStd, pool_statistics


def test_running_mean_std_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    rms = RunningMeanStd((4,))
    for chunk in np.array_split(data, 7):
        rms.update(torch.as_tensor(chunk))
    assert np.allclose(rms.mean.numpy(), data.mean(0), atol=1e-6)
    assert np.allclose(rms.var.numpy(), data.var(0), atol=1e-4)


def test_an_empty_batch_leaves_the_statistics_alone():
    rms = RunningMeanStd((2,))
    rms.update(torch.ones(3, 2))
    before = rms.mean.clone(), rms.var.clone(), rms.count.clone()
    rms.update(torch.zeros(0, 2))
    assert all(torch.equal(a, b) for a, b in zip(before, (rms.mean, rms.var, rms.count), strict=True))


def test_obs_normalizer_standardises_and_clips():
    norm = ObsNormalizer((2,), enabled=True, clip=5.0)
    obs = torch.tensor([[0.0, 100.0], [2.0, 100.0], [4.0, 100.0]])
    out = norm(obs, update=True)
    assert torch.allclose(out[:, 0], torch.tensor([-1.2247, 0.0, 1.2247]), atol=1e-3)
    assert norm(torch.tensor([[1e6, 100.0]]))[0, 0].item() == 5.0
    assert torch.equal(ObsNormalizer((2,), enabled=False, clip=5.0)(obs), obs)


def test_reward_scaler_divides_by_return_std_and_resets_at_episode_end():
    scaler = RewardScaler(1, gamma=0.5, enabled=True)
    rewards = [torch.tensor([1.0])] * 3
    dones = [torch.tensor([False]), torch.tensor([True]), torch.tensor([False])]
    outs = [scaler(r, d) for r, d in zip(rewards, dones, strict=True)]
    # discounted returns seen: 1, 1.5, then reset -> 1
    returns = np.array([1.0, 1.5, 1.0])
    expected = 1.0 / np.sqrt(returns.var() + 1e-8)
    assert outs[-1].item() == pytest.approx(expected, rel=1e-3)
    assert scaler.returns.item() == 1.0


def test_pooled_statistics_equal_one_process_having_seen_all_the_data():
    """Chan's merge is exact: two processes' statistics, each updated with its own batches and pooled, are those
    of one process that saw every batch, to float64 rounding; and both processes hold the same bits."""
    g = torch.Generator().manual_seed(0)
    batches = [[torch.randn(8, 3, generator=g, dtype=torch.float64) * (r + 1) + r for _ in range(5)] for r in range(2)]
    one, ranks = RunningMeanStd((3,)), [RunningMeanStd((3,)) for _ in range(2)]
    for rms in ranks:
        rms.share()
    for step in range(5):
        for rank, rms in enumerate(ranks):
            rms.update(batches[rank][step])
            one.update(batches[rank][step])
    seen = [rms.seen() for rms in ranks]
    for rms in ranks:
        pool_statistics([rms], lambda local: seen)
    for name in ("mean", "var", "count"):
        assert torch.equal(getattr(ranks[0], name), getattr(ranks[1], name))
        torch.testing.assert_close(getattr(ranks[0], name), getattr(one, name), rtol=1e-12, atol=0)
    assert float(ranks[0].count) == pytest.approx(80 + 1e-4)
    ranks[0].update(batches[0][0])  # statistics go on from the pooled ones, and the next pool starts afresh
    assert float(ranks[0].seen()[-1]) == 8


def test_loaded_statistics_are_what_the_processes_agreed_on():
    rms = RunningMeanStd((2,))
    rms.share()
    rms.load_state_dict({"mean": torch.ones(2, dtype=torch.float64), "var": torch.ones(2, dtype=torch.float64) * 4,
                         "count": torch.tensor(10.0, dtype=torch.float64)})
    assert float(rms.seen()[-1]) == 0
    rms.absorb([torch.tensor([3.0, 3.0, 4.0, 4.0, 10.0], dtype=torch.float64)])
    assert rms.mean.tolist() == [2.0, 2.0] and rms.var.tolist() == [5.0, 5.0] and float(rms.count) == 20
