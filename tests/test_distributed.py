"""One run trained by several processes (torch.distributed, gloo on CPU): one update by two processes equals one
process's over their rows, and their statistics and decisions agree."""

import json
import multiprocessing
import socket

import pytest
import torch
from distributed_workers import one_update_by_two

from rlcli.algos.ppo import clipped_surrogate_loss, pooled_standardize, row_mean
from rlcli.distributed.world import SINGLE, envs_per_process
from rlcli.errors import UsageError


def test_a_process_share_of_a_mean_and_pooled_advantages_in_one_process_are_the_plain_ones():
    g = torch.Generator().manual_seed(1)
    values, advantages, ratio = torch.randn(50, generator=g), torch.randn(50, generator=g) * 3 + 1, torch.rand(50) + 0.5
    assert row_mean(values[:20], torch.tensor(50.0)) + row_mean(values[20:], torch.tensor(50.0)) == pytest.approx(
        float(values.mean()), abs=1e-6)
    assert float(clipped_surrogate_loss(advantages, ratio, 0.2, torch.tensor(100.0))) == pytest.approx(
        float(clipped_surrogate_loss(advantages, ratio, 0.2)) / 2, rel=1e-5)
    count, standardized = pooled_standardize(advantages, SINGLE, normalize=True)
    assert float(count) == 50
    torch.testing.assert_close(standardized, (advantages - advantages.mean()) / (advantages.std() + 1e-8))
    assert torch.equal(pooled_standardize(advantages, SINGLE, normalize=False)[1], advantages)


def test_one_update_by_two_processes_equals_one_process_over_their_rows(tmp_path):
    """Two processes of 4 envs x 16 steps each make one update (3 epochs of 4 minibatches of 32 rows, 16 from
    each, the adaptive-KL schedule, observation and reward normalisation); one process over both processes' rows,
    drawn into the same minibatches, makes the same. The weights agree to 1e-6: the same sums taken in another
    order (two half sums and an all-reduce; the advantages' moments in float64) differ in float32's last bits,
    about 6e-8 at these weights' size (0.5-1), and twelve Adam steps, which divide each gradient by its own running
    scale, keep such differences at that size (measured: 6e-8, one unit in the last place, against a change of
    the weights of 1.5e-2 in this update)."""
    out = tmp_path / "found.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=one_update_by_two, args=(rank, port, str(out))) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
        if p.exitcode is None:
            p.kill()
    assert [p.exitcode for p in processes] == [0, 0]
    found = json.loads(out.read_text())
    assert found["minibatches_per_epoch"] == [4, 4, 4]
    assert found["processes_equal"] and found["stats_equal_between_processes"]
    assert found["largest_weight_difference"] < 1e-6 < 1e-3 < found["largest_weight_change"]
    assert found["largest_stats_relative_difference"] < 1e-12
    # the adaptive-KL decisions: the same on both processes and as one process's, and not all "keep"
    assert found["rates"][0] == found["rates"][1] == found["reference_rates"]
    assert len(set(found["rates"][0])) > 1
    for name, value in found["reference_metrics"].items():
        assert found["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_resuming_with_another_number_of_processes_keeps_the_global_batch():
    assert envs_per_process(8, 2, 4) == 4 and envs_per_process(8, 2, 1) == 16 and envs_per_process(8, 1, 8) == 1
    with pytest.raises(UsageError, match="16 envs in all .* 3 processes"):
        envs_per_process(8, 2, 3)
