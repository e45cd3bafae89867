"""The frame replay against the stacks an Atari env really returned: every stored transition rebuilt to the
bit on both backends (life losses and the ring's wrap included), n-step returns against their sum written out,
uniform draws of stored transitions only, and a stack it cannot rebuild refused."""

import numpy as np
import pytest
import torch

from rlcli.algos.frames import FrameReplayBuffer, PrioritizedFrameReplayBuffer
from rlcli.envs import make_vec_env
from rlcli.errors import CheckpointError, UsageError

GAMMA, N_ENVS = 0.9, 2


def played(backend: str, n_step: int, capacity: int = 300, steps: int = 700, kind: type = FrameReplayBuffer):
    """Random play of Breakout-v5 (episodic life: an episode ends at each life lost) into a frame buffer, and
    what the env returned: {(step, env): (obs, next_obs, reward, terminated, ended)} of every real transition."""
    env = make_vec_env("Breakout-v5", N_ENVS, 0, backend)
    try:
        obs = env.reset()
        buffer = kind(capacity, tuple(env.single_observation_space.shape), N_ENVS, 1, torch.device("cpu"), n_step,
                      GAMMA)
        prev_done, record = np.zeros(N_ENVS, dtype=bool), {}
        rng = np.random.default_rng(0)
        for _ in range(steps):
            actions = rng.integers(0, 4, N_ENVS)
            result = env.step(actions)
            ended = result.terminated | result.truncated
            buffer.add_step(torch.as_tensor(obs), torch.as_tensor(actions).reshape(N_ENVS, 1).float(),
                            torch.as_tensor(result.reward).float(), torch.as_tensor(result.obs),
                            torch.as_tensor(result.terminated), torch.as_tensor(ended), torch.as_tensor(~prev_done))
            for e in np.flatnonzero(~prev_done):
                record[(buffer.t - 1, int(e))] = (np.array(obs[e]), np.array(result.obs[e]), float(result.reward[e]),
                                                  bool(result.terminated[e]), bool(ended[e]))
            prev_done, obs = ended, result.obs
        return buffer, record
    finally:
        env.close()


def held(buffer: FrameReplayBuffer, record: dict) -> list[tuple[int, int]]:
    return [(t, e) for t in range(buffer.first_sampled_step(), buffer.t) for e in range(N_ENVS) if (t, e) in record]


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_every_stored_transition_is_rebuilt_to_the_bit(backend):
    buffer, record = played(backend, n_step=1)
    transitions = held(buffer, record)
    assert len(transitions) >= 250 and sum(record[k][4] for k in record) >= 20  # life losses among them
    t, e = (torch.tensor(x) for x in zip(*transitions, strict=True))
    batch = buffer.transitions(t, e)
    assert torch.equal(batch.obs, torch.as_tensor(np.stack([record[k][0] for k in transitions])))
    assert torch.equal(batch.next_obs, torch.as_tensor(np.stack([record[k][1] for k in transitions])))
    assert torch.equal(batch.rewards, torch.tensor([record[k][2] for k in transitions]))
    assert batch.discounts is None
    # one 84 x 84 frame a transition (and a few bytes of bookkeeping) where a stored stack pair takes 56,448
    assert buffer.bytes_per_transition < 84 * 84 + 64


def test_n_step_returns_sum_rewards_up_to_an_episodes_end():
    buffer, record = played("envpool", n_step=3)
    transitions = held(buffer, record)
    rewards, discounts, terminated, next_obs = [], [], [], []
    for t, e in transitions:
        total, discount, m = 0.0, 1.0, 0
        while m < 3 and (t + m, e) in record and t + m <= buffer.t - 1:
            obs, after, reward, ends_by_termination, ended = record[(t + m, e)]
            total, discount, m = total + discount * reward, discount * GAMMA, m + 1
            if ended:
                break
        rewards.append(total)
        discounts.append(discount)
        terminated.append(float(ends_by_termination))
        next_obs.append(after)
    t, e = (torch.tensor(x) for x in zip(*transitions, strict=True))
    batch = buffer.transitions(t, e)
    assert torch.allclose(batch.rewards, torch.tensor(rewards))
    assert torch.allclose(batch.discounts, torch.tensor(discounts))
    assert torch.equal(batch.terminated, torch.tensor(terminated))
    assert torch.equal(batch.next_obs, torch.as_tensor(np.stack(next_obs)))
    assert {round(d, 6) for d in discounts} >= {round(GAMMA, 6), round(GAMMA ** 3, 6)}  # cut short and whole


def test_draws_are_stored_transitions_only():
    buffer, record = played("envpool", n_step=1, steps=400)
    stored = {(record[k][0].tobytes(), record[k][1].tobytes()) for k in held(buffer, record)}
    batch = buffer.sample(512)
    assert batch.obs.shape == (512, 4, 84, 84) and batch.obs.dtype == torch.uint8
    assert all((o.numpy().tobytes(), n.numpy().tobytes()) in stored for o, n in zip(batch.obs, batch.next_obs,
                                                                                      strict=True))


def test_a_stack_that_neither_slides_nor_repeats_one_frame_is_refused():
    buffer = FrameReplayBuffer(16, (4, 2, 2), 1, 1, torch.device("cpu"))
    obs = torch.arange(16, dtype=torch.uint8).reshape(1, 4, 2, 2)
    slid = torch.cat([obs[:, 1:], torch.full((1, 1, 2, 2), 99, dtype=torch.uint8)], 1)
    step = (torch.zeros(1, 1), torch.zeros(1), slid, torch.zeros(1, dtype=torch.bool),
            torch.zeros(1, dtype=torch.bool), torch.ones(1, dtype=torch.bool))
    buffer.add_step(obs, *step)
    with pytest.raises(UsageError, match="frame_replay=false"):
        buffer.add_step(slid, *step[:2], torch.randint(0, 255, (1, 4, 2, 2), dtype=torch.uint8), *step[3:])



@pytest.mark.parametrize("kind", [FrameReplayBuffer, PrioritizedFrameReplayBuffer])
def test_a_saved_ring_loads_back_to_the_same_draws(kind):
    buffer, record = played("envpool", n_step=3, steps=300, kind=kind)
    again = kind(300, (4, 84, 84), N_ENVS, 1, torch.device("cpu"), 3, GAMMA)
    again.load_state_tensors({k: v.clone() for k, v in buffer.state_tensors().items()})
    assert (again.t, again.oldest, again.size) == (buffer.t, buffer.oldest, buffer.size)
    torch.manual_seed(5)
    first = buffer.sample(64)
    torch.manual_seed(5)
    second = again.sample(64)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True) if a is not None)
    with pytest.raises(CheckpointError, match="the same buffer_size and n_envs"):
        FrameReplayBuffer(600, (4, 84, 84), N_ENVS, 1, torch.device("cpu")).load_state_tensors(buffer.state_tensors())


def test_prioritized_draws_follow_the_priorities_of_stored_transitions_only():
    buffer, record = played("envpool", n_step=1, kind=PrioritizedFrameReplayBuffer)
    buffer.alpha, buffer.beta_start = 1.0, 0.5
    transitions = held(buffer, record)
    places = torch.tensor([(t % buffer.slots) * N_ENVS + e for t, e in transitions])
    # only the transitions held (stacks whole, not reset rows, not written over) can be drawn
    assert buffer.tree.total() == pytest.approx(len(transitions))
    buffer.update_priorities(places, torch.ones(len(places)) - buffer.eps)  # priority 1 each ...
    favourite = places[7:8]
    buffer.update_priorities(favourite, torch.tensor([99.0 - buffer.eps]))  # ... and 99 for one
    torch.manual_seed(0)
    batch = buffer.sample(4096)
    expected = 99 / (len(places) - 1 + 99)
    share = float((batch.index == favourite).double().mean())
    assert share == pytest.approx(expected, abs=4 * (expected * (1 - expected) / 4096) ** 0.5)
    assert set(batch.index.tolist()) <= set(places.tolist())
    # importance weights (N P(i)) ** -beta over their largest: 99 ** -0.5 for the favourite, 1 for the rest
    weights = {round(w, 5) for w in batch.weights.tolist()}
    assert weights == {1.0, round(99 ** -0.5, 5)}
    t, e = transitions[7]
    assert torch.equal(batch.obs[batch.index == favourite][0], torch.as_tensor(record[(t, e)][0]))


def _frame(label: int) -> torch.Tensor:
    return torch.full((2, 2), label, dtype=torch.uint8)


def _slid(stack: torch.Tensor, label: int) -> torch.Tensor:
    return torch.cat([stack[:, 1:], _frame(label)[None, None]], 1)


@pytest.mark.parametrize("kind", [FrameReplayBuffer, PrioritizedFrameReplayBuffer])
def test_a_saved_ring_beside_envs_started_afresh_keeps_the_two_runs_apart(kind):
    """An inexact resume: the ring was saved, the envs were not. Frames labelled 1-11, then 100-102."""
    cpu, flag = torch.device("cpu"), torch.zeros(1, dtype=torch.bool)
    buffer = kind(64, (4, 2, 2), 1, 1, cpu, n_step=3, gamma=0.5)
    obs = torch.stack([_frame(1)] * 4)[None]
    for label in range(2, 12):  # steps 0-9 of one episode, reward 1 each
        buffer.add_step(obs, torch.zeros(1, 1), torch.ones(1), _slid(obs, label), flag, flag, ~flag)
        obs = _slid(obs, label)
    exact = kind(64, (4, 2, 2), 1, 1, cpu, n_step=3, gamma=0.5)
    exact.load_state_tensors(buffer.state_tensors())
    exact.add_step(obs, torch.zeros(1, 1), torch.ones(1), _slid(obs, 12), flag, flag, ~flag)
    assert exact.t == 11  # the envs went on where the ring stopped: no gap
    resumed = kind(64, (4, 2, 2), 1, 1, cpu, n_step=3, gamma=0.5)
    resumed.load_state_tensors(buffer.state_tensors())
    fresh = torch.stack([_frame(100)] * 4)[None]
    for label in (101, 102):  # the new run's first two steps, reward 10 each
        resumed.add_step(fresh, torch.zeros(1, 1), torch.full((1,), 10.0), _slid(fresh, label), flag, flag, ~flag)
        fresh = _slid(fresh, label)
    batch = resumed.transitions(torch.tensor([8, 9, resumed.t - 2]), torch.zeros(3, dtype=torch.long))
    # the old run's returns stop at its own last step, bootstrapping from its last frames
    assert batch.rewards[:2].tolist() == [1.5, 1.0] and batch.discounts[:2].tolist() == [0.25, 0.5]
    assert [int(f[0, 0]) for f in batch.next_obs[1]] == [8, 9, 10, 11]
    # the new run's first transition is the stack acted on, its 2-step return its own rewards
    assert [int(f[0, 0]) for f in batch.obs[2]] == [100] * 4
    assert [int(f[0, 0]) for f in batch.next_obs[2]] == [100, 100, 101, 102]
    assert batch.rewards[2] == 15.0 and batch.discounts[2] == 0.25
    if isinstance(resumed, PrioritizedFrameReplayBuffer):  # the 10 old and 2 new transitions, nothing else
        assert float(resumed.tree.total()) == pytest.approx(12.0)
