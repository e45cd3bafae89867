"""The replay's Rainbow parts in closed form: n-step returns (what each transition stores, at an episode's end
too), the sum tree (its sums and where a mass falls), prioritised sampling's proportions and importance
weights, new rows at the largest priority, and a saved buffer that loads to the same tree."""

import pytest
import torch

from rlcli.algos.nstep import NStepReturns
from rlcli.algos.prioritized import PrioritizedReplayBuffer, SumTree

T, F = True, False


def _push(nstep, t, rewards, terminated, done, real):
    obs = torch.tensor([[10.0 * t], [10.0 * t + 1]])  # env e's observation at step t: 10 t + e
    return nstep.push(obs, obs.clone(), torch.tensor(rewards), obs + 10.0, torch.tensor(terminated),
                      torch.tensor(done), torch.tensor(real))


def test_n_step_transitions_sum_n_rewards_and_flush_shorter_ones_where_an_episode_ends():
    nstep = NStepReturns(3, 0.5, n_envs=2, obs_shape=(1,), action_dim=1, device=torch.device("cpu"))
    # env 0: rewards 1, 2, 4, 8 (terminal), a reset row, then 16 (a time limit); env 1: rewards of 1, never done
    assert len(_push(nstep, 0, [1.0, 1.0], [F, F], [F, F], [T, T]).obs) == 0
    assert len(_push(nstep, 1, [2.0, 1.0], [F, F], [F, F], [T, T]).obs) == 0
    out = _push(nstep, 2, [4.0, 1.0], [F, F], [F, F], [T, T])
    assert out.obs.flatten().tolist() == [0.0, 1.0]  # each env's first transition, three steps long
    assert out.rewards.tolist() == [1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 + 0.25]
    assert out.next_obs.flatten().tolist() == [30.0, 31.0] and out.discounts.tolist() == [0.125, 0.125]
    out = _push(nstep, 3, [8.0, 1.0], [T, F], [T, F], [T, T])
    # env 0 ends: the transitions of 1, 2 and 3 steps it held, none bootstrapped; env 1 its next 3-step one
    assert out.obs.flatten().tolist() == [30.0, 20.0, 10.0, 11.0]
    assert out.rewards.tolist() == [8.0, 4 + 0.5 * 8, 2 + 0.5 * 4 + 0.25 * 8, 1.75]
    assert out.next_obs.flatten().tolist() == [40.0, 40.0, 40.0, 41.0]
    assert out.terminated.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert out.discounts.tolist() == [0.5, 0.25, 0.125, 0.125]
    out = _push(nstep, 4, [0.0, 1.0], [F, F], [F, F], [F, T])  # env 0's reset row is no transition
    assert out.obs.flatten().tolist() == [21.0]
    out = _push(nstep, 5, [16.0, 1.0], [F, F], [T, F], [T, T])  # a time limit one step into env 0's episode
    assert out.obs.flatten().tolist() == [50.0, 31.0] and out.rewards.tolist() == [16.0, 1.75]
    assert out.terminated.tolist() == [0.0, 0.0] and out.discounts.tolist() == [0.5, 0.125]


def test_the_sum_tree_holds_each_blocks_sum_and_finds_the_leaf_a_mass_falls_in():
    tree = SumTree(5, torch.device("cpu"))  # blocks of 3: [1, 2, 3], [4, 0.5, unused]
    tree.set(torch.arange(5), torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert tree.sums.tolist() == [6.0, 4.5] and tree.total().item() == 10.5
    mass = torch.tensor([0.0, 0.99, 1.0, 2.9, 3.0, 5.99, 6.0, 9.99, 10.0, 10.49])
    assert tree.find(mass).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    tree.set(torch.tensor([1, 1]), torch.tensor([0.0, 0.0]))  # a row twice in one batch
    assert tree.total().item() == 8.5 and tree.find(torch.tensor([0.5, 1.5])).tolist() == [0, 2]
    big = SumTree(1_000_000, torch.device("cpu"))
    big.set(torch.tensor([0, 999_999]), torch.tensor([1e-6, 1.0]))
    assert big.find(torch.tensor([0.0, 5e-7, 1e-6, 0.5])).tolist() == [0, 0, 999_999, 999_999]


def test_a_run_of_places_sets_the_tree_as_their_index_does():
    # a replay's append writes a run of places: its slices must leave the leaves and block sums to the bit
    generator = torch.Generator().manual_seed(0)
    runs, indexed = SumTree(1_000, torch.device("cpu")), SumTree(1_000, torch.device("cpu"))  # blocks of 32
    for start, k in ((0, 1), (31, 2), (100, 64), (990, 10), (500, 1), (0, 1_000)):
        values = torch.rand(k, generator=generator, dtype=torch.float64)
        runs.set_run(start, values)
        indexed.set(torch.arange(start, start + k), values)
        assert torch.equal(runs.leaves, indexed.leaves) and torch.equal(runs.sums, indexed.sums), (start, k)


def _buffer(n, alpha=1.0, beta=0.5):
    buffer = PrioritizedReplayBuffer(n, (1,), 1, torch.device("cpu"), alpha=alpha, beta_start=beta, eps=0.0)
    rows = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    buffer.add(rows, rows, rows.squeeze(1), rows, torch.zeros(n))
    return buffer


def test_prioritised_draws_follow_the_priorities_and_weigh_rows_by_their_chance():
    torch.manual_seed(0)
    buffer = _buffer(4, alpha=0.5)
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 16.0]))  # ** 0.5: 1, 2, 3, 4
    counts = torch.zeros(4)
    for _ in range(200):
        batch = buffer.sample(500)
        counts += torch.bincount(batch.index, minlength=4)
        assert torch.equal(batch.obs.squeeze(1).long(), batch.index)
    torch.testing.assert_close(counts / counts.sum(), torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.003, rtol=0)
    probabilities = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)[batch.index]
    expected = (4 * probabilities) ** -0.5
    torch.testing.assert_close(batch.weights, (expected / expected.max()).float())
    late = buffer.sample(500, progress=1.0)  # beta has risen to 1: weights 1 / (N P(i)) over their largest
    torch.testing.assert_close(late.weights, (0.1 / torch.tensor([0.1, 0.2, 0.3, 0.4]))[late.index])


def test_new_rows_take_the_largest_priority_seen_and_a_saved_buffer_loads_to_the_same_tree():
    buffer = _buffer(8, alpha=0.6)
    buffer.update_priorities(torch.tensor([0, 3]), torch.tensor([-5.0, 2.0]))
    row = torch.ones(1, 1)
    buffer.add(row, row, torch.ones(1), row, torch.zeros(1))  # overwrites row 0, the oldest
    assert buffer.tree.get(torch.tensor([0])).item() == pytest.approx(5.0 ** 0.6)
    again = PrioritizedReplayBuffer(8, (1,), 1, torch.device("cpu"), alpha=0.6, eps=0.0)
    again.load_state_tensors(buffer.state_tensors())
    assert torch.equal(again.tree.leaves, buffer.tree.leaves) and torch.equal(again.tree.sums, buffer.tree.sums)
    assert torch.equal(again.max_priority, buffer.max_priority)
