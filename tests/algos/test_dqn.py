"""DQN's pieces against hand-computed cases: the TD targets (plain and double), epsilon's schedule, the
dueling head, epsilon-greedy acting, the C51 projection, quantile regression's loss and targets, distributional
values and noisy layers; and short runs through every command and exact resumes."""

import json
import math

import gymnasium as gym
import pytest
import torch

from rlcli.algos.dqn import DQN, DQNConfig, NoisyLinear, QNetwork, categorical_targets, linear_epsilon, td_targets
from rlcli.algos.dqn.targets import quantile_huber_loss, quantile_levels, quantile_targets
from tests.algos.roundtrip import refused, train_evaluate_export


def test_plain_target_is_the_reward_plus_the_discounted_max_of_the_target_values():
    next_q = torch.tensor([[1.0, 3.0], [2.0, -1.0]])
    targets = td_targets(torch.tensor([0.5, 1.0]), torch.tensor([0.0, 0.0]), next_q, None, gamma=0.9)
    assert targets.tolist() == pytest.approx([0.5 + 0.9 * 3.0, 1.0 + 0.9 * 2.0])


def test_double_target_values_the_online_networks_choice_with_the_target_network():
    next_target = torch.tensor([[1.0, 3.0], [2.0, -1.0]])
    next_online = torch.tensor([[5.0, 0.0], [0.0, 4.0]])  # picks action 0, then action 1
    targets = td_targets(torch.tensor([0.5, 1.0]), torch.tensor([0.0, 0.0]), next_target, next_online, gamma=0.9)
    assert targets.tolist() == pytest.approx([0.5 + 0.9 * 1.0, 1.0 + 0.9 * -1.0])


def test_a_terminal_transition_takes_the_reward_alone():
    targets = td_targets(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([[10.0, 20.0]]), None, gamma=0.99)
    assert targets.tolist() == [2.0]


@pytest.mark.parametrize(("step", "epsilon"), [(0, 1.0), (50, 0.525), (100, 0.05), (1000, 0.05)])
def test_epsilon_falls_in_a_line_over_the_exploration_fraction_then_stays(step, epsilon):
    cfg = DQNConfig(steps=1000, exploration_fraction=0.1, epsilon_start=1.0, epsilon_end=0.05)
    assert linear_epsilon(step, cfg) == pytest.approx(epsilon)


def test_dueling_head_is_value_plus_advantage_minus_its_mean():
    net = QNetwork((2,), 3, (4,), "relu", dueling=True)
    obs = torch.randn(5, 2)
    features = net.trunk(obs)
    value, advantage = net.value(features), net.advantage(features)
    q = net(obs)
    torch.testing.assert_close(q, value + advantage - advantage.mean(-1, keepdim=True))
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)  # the advantages' mean is taken out


def agent(**settings):
    cfg = DQNConfig(steps=1000, hidden=(8,), **settings)
    return DQN(cfg, gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(4), 1, torch.device("cpu"))


def test_acting_is_greedy_at_epsilon_zero_and_uniform_at_one():
    torch.manual_seed(0)
    obs = torch.randn(4000, 3)
    greedy = agent(epsilon_start=0.0, epsilon_end=0.0)
    assert torch.equal(greedy.act(obs), greedy.q(obs).argmax(-1))
    uniform = agent(epsilon_start=1.0, epsilon_end=1.0)
    counts = torch.bincount(uniform.act(obs), minlength=4).float() / len(obs)
    assert counts.sub(0.25).abs().max() < 0.03  # 4,000 draws: a standard error of 0.007 each


def test_the_target_network_is_copied_every_target_update_every_steps():
    dqn = agent(target_update_every=2, learning_rate=1e-2)
    batch_rows = 16
    batch = (torch.randn(batch_rows, 3), torch.randint(0, 4, (batch_rows, 1)).float(), torch.randn(batch_rows),
             torch.randn(batch_rows, 3), torch.zeros(batch_rows))
    from rlcli.algos.buffers import ReplayBatch

    dqn.update(ReplayBatch(*batch))
    assert not torch.equal(dqn.q.advantage.weight, dqn.q_target.advantage.weight)  # one step: not yet
    dqn.update(ReplayBatch(*batch))
    assert torch.equal(dqn.q.advantage.weight, dqn.q_target.advantage.weight)


RAINBOW_PARTS = ["-p", "atoms=11", "-p", "v_min=0", "-p", "v_max=50", "-p", "noisy=true", "-p", "dueling=true",
                 "-p", "n_step=3", "-p", "prioritized=true"]
QR_PARTS = ["-p", "quantiles=8", "-p", "dueling=true", "-p", "n_step=3", "-p", "prioritized=true"]


@pytest.mark.parametrize("settings", [[], RAINBOW_PARTS, QR_PARTS], ids=["dqn", "rainbow-parts", "qr-parts"])
def test_a_dqn_run_trains_evaluates_exports_and_is_refused_on_continuous_actions(tmp_path, settings):
    pytest.importorskip("onnxruntime")
    exported = train_evaluate_export(tmp_path, ["CartPole-v1", "--algo", "dqn", "--steps", "2000", "--backend",
                                                "gymnasium", "-p", "learning_starts=500", *settings])
    assert "max |Δaction| = 0" in exported
    assert "DQN needs Discrete actions" in refused(tmp_path, ["Pendulum-v1", "--algo", "dqn"])


@pytest.mark.parametrize("replay", [{}, {"n_step": 3, "prioritized": True, "n_envs": 2},
                                    {"atoms": 11, "v_min": 0.0, "v_max": 50.0, "noisy": True, "n_step": 2},
                                    {"quantiles": 8, "prioritized": True, "double_q": False}],
                         ids=["uniform", "n-step-prioritized", "distributional-noisy", "quantiles-prioritized"])
def test_dqn_resumes_exactly_with_its_replay_buffer(tmp_path, monkeypatch, replay):
    from rlcli.algos import resolve
    from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
    from rlcli.training.train import TrainingInterrupted, train
    from tests.training.test_resume_exact import _assert_same_run, _interrupt_at

    cfg = resolve("dqn", "CartPole-v1", backend="gymnasium", eval_every=0, eval_episodes=1, torch_threads=1, seed=2,
                  overrides={"steps": 800, "learning_starts": 200, "log_every": 100, "batch_size": 16, "hidden": [16],
                             "target_update_every": 20, "utd_ratio": 0.5, **replay})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 5th iteration, while epsilon still falls
        _interrupt_at(patch, GymnasiumVecEnv, "step", 450 // cfg.algo.n_envs)
        with pytest.raises(TrainingInterrupted):
            train(cfg, tmp_path / "cut", save_buffer=True)
    assert json.loads((tmp_path / "cut" / "meta.json").read_text())["steps"] == 500
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")


def test_the_c51_projection_moves_each_atom_by_the_bellman_operator_and_splits_it_between_neighbours():
    support = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])
    one_hot = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0]] * 3)
    # z = -2 moved to 0.5 - 2 = -1.5 (halfway: half to -2, half to -1); terminal: every atom to 0.5; clipped at 2
    out = categorical_targets(torch.tensor([0.5, 0.5, 10.0]), torch.tensor([0.0, 1.0, 0.0]), one_hot, support, 1.0)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5, 0.0],
                                                  [0.0, 0.0, 0.0, 0.0, 1.0]]))
    uniform = torch.full((1, 5), 0.2)  # each atom one up, exactly onto the next, the top one clipped onto itself
    torch.testing.assert_close(categorical_targets(torch.tensor([1.0]), torch.zeros(1), uniform, support, 1.0),
                               torch.tensor([[0.0, 0.2, 0.2, 0.2, 0.4]]))
    # gamma 0.5 on a per-row tensor (n-step discounts): z = 2 -> 1 + 0.5 * 2 = 2, z = -2 -> 0: masses kept
    probs = torch.tensor([[0.25, 0.0, 0.0, 0.0, 0.75]])
    torch.testing.assert_close(categorical_targets(torch.tensor([1.0]), torch.zeros(1), probs, support,
                                                   torch.tensor([0.5])), torch.tensor([[0.0, 0.0, 0.25, 0.0, 0.75]]))


def test_the_c51_projection_keeps_the_top_of_an_uneven_support_on_its_last_atom():
    # (200 + 10) / (210 / 50) is 50.0000038 in float32: unclamped, its ceil indexed a 52nd atom
    support = torch.linspace(-10.0, 200.0, 51)
    probs = torch.full((2, 51), 1 / 51)
    out = categorical_targets(torch.tensor([3.0, 250.0]), torch.tensor([0.0, 1.0]), probs, support, 0.99)
    torch.testing.assert_close(out.sum(-1), torch.ones(2))
    assert out[0, -1] > 0 and out[1, -1] == 1.0  # a terminal reward above v_max: all of it on the top atom


def test_a_distributional_q_value_is_its_distributions_mean():
    torch.manual_seed(0)
    net = QNetwork((4,), 3, (8,), "relu", dueling=True, atoms=5, v_min=-2.0, v_max=2.0)
    obs = torch.randn(6, 4)
    logits = net.heads(obs)
    assert logits.shape == (6, 3, 5)
    torch.testing.assert_close(net(obs), (logits.softmax(-1) * torch.linspace(-2, 2, 5)).sum(-1))


def test_the_quantile_levels_are_the_midpoints_of_equal_slices_of_probability():
    assert quantile_levels(4).tolist() == [0.125, 0.375, 0.625, 0.875]


def test_the_quantile_huber_loss_weights_each_error_by_its_side_of_the_estimate():
    # one estimate 0 at level 0.25 against targets 2 (above: weight 0.25, Huber 2 - 0.5) and -0.5 (below: weight
    # 0.75, Huber 0.5 * 0.25); a second estimate 1 at 0.75: errors 1 (0.75 * 0.5) and -1.5 (0.25 * 1.0)
    targets = torch.tensor([[2.0, -0.5]])
    one = quantile_huber_loss(torch.tensor([[0.0]]), targets, torch.tensor([0.25]))
    assert one.tolist() == pytest.approx([(0.25 * 1.5 + 0.75 * 0.125) / 2])
    two = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), targets, torch.tensor([0.25, 0.75]))
    assert two.tolist() == pytest.approx([(0.25 * 1.5 + 0.75 * 0.125) / 2 + (0.75 * 0.5 + 0.25 * 1.0) / 2])


@pytest.mark.parametrize("level", [0.1, 0.5, 0.9])
def test_the_quantile_huber_loss_is_least_at_the_targets_quantile(level):
    # targets spread evenly over [0, 100]: the quantile at level tau is 100 tau, and with errors mostly far
    # beyond the Huber loss's kappa of 1 the loss's minimum lies within that kappa of it
    targets = torch.linspace(0.0, 100.0, 1001).expand(2001, -1)
    estimates = torch.linspace(0.0, 100.0, 2001).unsqueeze(-1)
    losses = quantile_huber_loss(estimates, targets, torch.tensor([level]))
    assert abs(float(estimates[losses.argmin(), 0]) - 100 * level) <= 1.0


def test_the_quantile_huber_loss_equals_sb3_contribs():
    from sb3_contrib.common.utils import quantile_huber_loss as sb3_loss

    torch.manual_seed(0)
    quantiles, targets = torch.randn(32, 10) * 3, torch.randn(32, 10) * 3
    ours = quantile_huber_loss(quantiles, targets, quantile_levels(10)).mean()
    torch.testing.assert_close(ours, sb3_loss(quantiles, targets, sum_over_quantiles=True))


def test_quantile_targets_move_each_quantile_by_the_bellman_operator():
    next_quantiles = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    targets = quantile_targets(torch.tensor([0.5, 3.0]), torch.tensor([0.0, 1.0]), next_quantiles, torch.tensor(
        [0.5, 0.9]))
    torch.testing.assert_close(targets, torch.tensor([[1.0, 1.5, 2.5], [3.0, 3.0, 3.0]]))


@pytest.mark.parametrize("double_q", [False, True])
def test_a_quantile_q_value_is_its_quantiles_mean_and_the_loss_follows_the_chosen_next_action(double_q):
    from rlcli.algos.buffers import ReplayBatch

    torch.manual_seed(0)
    net = QNetwork((4,), 3, (8,), "relu", dueling=True, quantiles=5)
    obs = torch.randn(6, 4)
    quantiles = net.heads(obs)
    assert quantiles.shape == (6, 3, 5)
    torch.testing.assert_close(net(obs), quantiles.mean(-1))
    dqn = agent(quantiles=5, double_q=double_q, gamma=0.9)
    rows = torch.arange(16)
    batch = ReplayBatch(torch.randn(16, 3), (rows % 4).float().unsqueeze(-1), torch.ones(16), torch.randn(16, 3),
                        (rows % 3 == 0).float())
    with torch.no_grad():
        for p in dqn.q_target.parameters():  # the target network differs from the online one
            p.add_(torch.randn_like(p))
        taken = dqn.q.heads(batch.obs)[rows, batch.actions.long().squeeze(-1)]
        next_quantiles = dqn.q_target.heads(batch.next_obs)
        # the next action by the target's means, or with double Q-learning by the online network's values
        best = (dqn.q(batch.next_obs) if double_q else next_quantiles.mean(-1)).argmax(-1)
        assert not torch.equal(best, dqn.q(batch.next_obs).argmax(-1) if not double_q else
                               next_quantiles.mean(-1).argmax(-1))  # the two choices differ on some row
        targets = 1.0 + 0.9 * (1.0 - batch.terminated).unsqueeze(-1) * next_quantiles[rows, best]
        loss, q_mean, per_row = dqn.td_loss(batch)
    torch.testing.assert_close(per_row, quantile_huber_loss(taken, targets, quantile_levels(5)))
    torch.testing.assert_close(loss, per_row.mean())
    torch.testing.assert_close(q_mean, taken.mean())


def test_atoms_and_quantiles_are_refused_together(tmp_path):
    assert "set one of them to 1" in refused(tmp_path, ["CartPole-v1", "--algo", "dqn", "-p", "atoms=11", "-p",
                                                        "quantiles=10"])


def test_noisy_layers_draw_factorised_noise_of_the_stated_scale_and_evaluate_on_their_means():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 8, std_init=0.5)
    assert torch.allclose(layer.weight_sigma, torch.full((8, 16), 0.5 / 4))
    x = torch.randn(5, 16)
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)  # no noise: the means
    squares = []
    for _ in range(2000):
        layer.reset_noise()
        assert torch.linalg.matrix_rank(layer.weight_epsilon) == 1  # an outer product
        squares.append(layer.weight_epsilon.square().mean())
    # f(x) = sign(x) sqrt(|x|) of a standard normal: E f^2 = E|x| = sqrt(2 / pi), so E eps^2 = 2 / pi
    assert abs(float(torch.stack(squares).mean()) - 2 / math.pi) < 0.02
    noisy = layer(x, noise=True)
    expected = x @ (layer.weight_mu + layer.weight_sigma * layer.weight_epsilon).T + layer.bias_mu + (
        layer.bias_sigma * layer.bias_epsilon)
    torch.testing.assert_close(noisy, expected)


def test_a_masked_action_is_never_chosen_and_the_target_maxes_over_the_allowed_ones():
    from rlcli.algos import resolve
    from rlcli.algos.buffers import ReplayBatch
    from rlcli.training.agents import build_agent, make_env, resolve_device

    cfg = resolve("dqn", "MaskedChoice-v0", overrides={"n_envs": 64, "hidden": [16]})
    env = make_env(cfg, 64, 0)
    agent = build_agent(cfg, env, resolve_device("cpu"))
    obs = torch.as_tensor(env.reset())
    env.close()
    allowed = obs[:, 8:] > 0.5  # MaskedChoice-v0: 8 values, then the mask of its 8 actions
    assert not allowed.all()
    for epsilon_steps in (0, 10**9):  # epsilon 1 (uniform among the allowed), then the end's 0.05
        agent.env_steps = epsilon_steps
        for _ in range(20):
            actions = agent.act(obs)
            assert allowed.gather(1, actions.unsqueeze(1)).all()
    assert allowed.gather(1, agent.policy()(obs).unsqueeze(1)).all()  # the greedy (evaluated, exported) one
    with torch.no_grad():  # what export's parity check reads: the allowed actions' values, the masked far below
        log_probs = agent.policy().action_log_probs(obs)[0]
    assert torch.equal(log_probs.argmax(-1), agent.policy()(obs))
    assert (log_probs.masked_select(~allowed) < -1e30).all()
    # the target's max: each row's next state allows its first action alone, whatever the values say
    next_obs = torch.cat([obs[:, :8], torch.nn.functional.one_hot(torch.zeros(64, dtype=torch.long), 8).float()], 1)
    with torch.no_grad():
        expected = 1.0 + cfg.algo.gamma * agent.q_target(agent.obs_norm(next_obs))[:, 0]
        agent.q_target.advantage.bias.data[1:] += 100.0  # the masked actions now hold the largest values
        expected_after = 1.0 + cfg.algo.gamma * agent.q_target(agent.obs_norm(next_obs))[:, 0]
    batch = ReplayBatch(obs, torch.zeros(64, 1), torch.ones(64), next_obs, torch.zeros(64))
    _, _, errors = agent.td_loss(batch)
    q = agent.q(agent.obs_norm(obs))[:, 0].detach()
    torch.testing.assert_close(errors, (q - expected_after).abs())
    assert torch.equal(expected, expected_after)  # the first action's value, untouched by the masked ones' bias
    # a next state that allows nothing bootstraps zero, where the episode was cut by a time limit too
    nothing = torch.cat([obs[:, :8], torch.zeros(64, 8)], 1)
    _, _, errors = agent.td_loss(ReplayBatch(obs, torch.zeros(64, 1), torch.ones(64), nothing, torch.zeros(64)))
    torch.testing.assert_close(errors, (q - 1.0).abs())


@pytest.mark.parametrize("double_q", [False, True])
def test_quantile_targets_take_the_next_states_allowed_action_alone(double_q):
    from rlcli.algos import resolve
    from rlcli.algos.buffers import ReplayBatch
    from rlcli.training.agents import build_agent, make_env, resolve_device

    cfg = resolve("dqn", "MaskedChoice-v0", overrides={"n_envs": 16, "hidden": [16], "quantiles": 4,
                                                       "double_q": double_q})
    env = make_env(cfg, 16, 0)
    agent = build_agent(cfg, env, resolve_device("cpu"))
    obs = torch.as_tensor(env.reset())
    env.close()
    # each row's next state allows its first action alone; the masked ones hold by far the largest quantiles
    next_obs = torch.cat([obs[:, :8], torch.nn.functional.one_hot(torch.zeros(16, dtype=torch.long), 8).float()], 1)
    with torch.no_grad():
        agent.q_target.advantage.bias.data[4:] += 100.0  # actions 1-7's quantiles ([actions, quantiles] rows)
        agent.q.advantage.bias.data[4:] += 100.0  # and the online network's, which double Q-learning asks
        next_quantiles = agent.q_target.heads(agent.obs_norm(next_obs))[:, 0]
        taken = agent.q.heads(agent.obs_norm(obs))[:, 0]
    batch = ReplayBatch(obs, torch.zeros(16, 1), torch.ones(16), next_obs, torch.zeros(16))
    _, _, per_row = agent.td_loss(batch)
    expected = quantile_huber_loss(taken, 1.0 + cfg.algo.gamma * next_quantiles, quantile_levels(4))
    torch.testing.assert_close(per_row, expected)


def test_the_cnn_trunk_reads_frames_as_the_nature_network_does():
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    net = QNetwork((4, 84, 84), 6, (512,), "relu", dueling=False, trunk="cnn", layer_norm=True)
    # (84 - 8) / 4 + 1 = 20, (20 - 4) / 2 + 1 = 9, (9 - 3) / 1 + 1 = 7: PQN's LayerNorm after each layer
    assert [tuple(m.normalized_shape) for m in net.trunk if isinstance(m, torch.nn.LayerNorm)] == [
        (32, 20, 20), (64, 9, 9), (64, 7, 7), (512,)]
    assert [m.in_features for m in net.trunk if isinstance(m, torch.nn.Linear)] == [64 * 7 * 7]
    assert net(frames.float()).shape == (2, 6)
    # frames are scaled by 1/255 inside: the network's own trunk on [0, 1] pixels gives the same values
    features = net.trunk(frames.float() / 255.0)
    assert torch.allclose(net(frames.float()), net.advantage(features), atol=1e-6)


def test_the_trunk_must_fit_the_observations(tmp_path):
    assert "add -p trunk=cnn" in refused(tmp_path, ["Breakout-v5", "--algo", "dqn", "-p", "trunk=mlp"])
    assert "drop -p trunk=cnn" in refused(tmp_path, ["CartPole-v1", "--algo", "dqn", "-p", "trunk=cnn"])
    assert "normalize_obs must be false with the cnn trunk" in refused(
        tmp_path, ["Breakout-v5", "--algo", "pqn", "-p", "normalize_obs=true"])


def test_an_atari_dqn_run_keeps_frames_as_bytes_in_its_replay_and_exports(tmp_path):
    pytest.importorskip("onnxruntime")
    from rlcli.algos import resolve
    from rlcli.algos.frames import FrameReplayBuffer
    from rlcli.algos.threads import ThreadPlan
    from rlcli.training.agents import build_agent, build_learner, make_env

    for frame_replay in (True, False):
        cfg = resolve("dqn", "Breakout-v5", overrides={"buffer_size": 1000, "learning_starts": 1000, "n_envs": 2,
                                                       "frame_replay": frame_replay})
        env = make_env(cfg, 2, 0)
        try:
            buffer = build_learner(cfg, env, build_agent(cfg, env, torch.device("cpu")), ThreadPlan(1, 1)).buffer
        finally:
            env.close()
        if frame_replay:  # each frame once: one 84 x 84 frame a transition, and a few bytes beside it
            assert isinstance(buffer, FrameReplayBuffer) and buffer.frames.dtype == torch.uint8
            assert buffer.bytes_per_transition < 84 * 84 + 64
        else:  # each transition holds its observation and the next one: 2 x 4 x 84 x 84 bytes
            assert buffer.obs.dtype == buffer.next_obs.dtype == torch.uint8
            assert (buffer.obs.nbytes + buffer.next_obs.nbytes) // 1000 == 2 * 4 * 84 * 84
    exported = train_evaluate_export(tmp_path, ["Breakout-v5", "--algo", "dqn", "--steps", "600", "-p",
                                                "learning_starts=300", "-p", "buffer_size=1000", "--threads", "1"])
    assert "max |Δaction| = 0" in exported


def test_a_replay_whose_learning_starts_is_its_size_starts_learning_once_full():
    # the zoo's Atari values (buffer 1e5, learning starts 1e5): a full replay can hold no more, so learning starts
    from rlcli.algos import resolve
    from rlcli.algos.threads import ThreadPlan
    from rlcli.errors import UsageError
    from rlcli.training.agents import build_agent, build_learner, make_env

    cfg = resolve("dqn", "CartPole-v1", overrides={"buffer_size": 300, "learning_starts": 300, "batch_size": 32,
                                                   "log_every": 100})
    env = make_env(cfg, 1, 0)
    try:
        learner = build_learner(cfg, env, build_agent(cfg, env, torch.device("cpu")), ThreadPlan(1, 1))
        filled = [(learner.iterate(step)[1]["charts/gradient_steps"], learner.buffer.size)
                  for step in range(0, 600, 100)]
    finally:
        env.close()
    assert all(updates == 0 for updates, size in filled if size < 300), filled
    # a full replay's iteration: a gradient step every 1 / utd_ratio transitions (reset rows store none)
    assert filled[-1][1] == 300 and 0.9 * 100 * cfg.algo.utd_ratio <= filled[-1][0] <= 100 * cfg.algo.utd_ratio, filled
    with pytest.raises(UsageError, match="learning_starts=301 exceeds buffer_size=300"):
        resolve("dqn", "CartPole-v1", overrides={"buffer_size": 300, "learning_starts": 301})
    with pytest.raises(UsageError, match="batch_size=301 exceeds buffer_size=300"):
        resolve("dqn", "CartPole-v1", overrides={"buffer_size": 300, "learning_starts": 100, "batch_size": 301})


def test_the_off_policy_learner_updates_with_the_plans_update_threads_and_acts_with_its_acting_threads():
    from rlcli.algos import resolve
    from rlcli.algos.threads import ThreadPlan, torch_threads
    from rlcli.training.agents import build_agent, build_learner, make_env

    cfg = resolve("dqn", "CartPole-v1", overrides={"learning_starts": 64, "batch_size": 16, "log_every": 128})
    env = make_env(cfg, 1, 0)
    seen: dict[str, set[int]] = {"act": set(), "update": set()}

    def counted(name, method):
        def call(*args):
            seen[name].add(torch.get_num_threads())
            return method(*args)
        return call

    try:
        learner = build_learner(cfg, env, build_agent(cfg, env, torch.device("cpu")), ThreadPlan(1, 3))
        learner.agent.act = counted("act", learner.agent.act)
        learner.agent.update = counted("update", learner.agent.update)
        with torch_threads(1):
            steps, metrics = learner.iterate(0)
            assert torch.get_num_threads() == 1
    finally:
        env.close()
    assert steps == 128 and metrics["charts/gradient_steps"] > 0
    assert seen == {"act": {1}, "update": {3}}


def test_the_rainbow_preset_turns_every_component_on_over_the_atari_group():
    from rlcli.algos import resolve

    cfg = resolve("dqn", "Pong-v5", config_file="rainbow").algo
    assert (cfg.trunk, cfg.double_q, cfg.dueling, cfg.n_step, cfg.prioritized, cfg.atoms, cfg.noisy) == (
        "cnn", True, True, 3, True, 51, True)
    assert (cfg.epsilon_start, cfg.epsilon_end, cfg.learning_rate, cfg.adam_eps) == (0.0, 0.0, 6.25e-5, 1.5e-4)
    assert cfg.frame_replay and cfg.buffer_size == 1_000_000 and cfg.steps == 2_500_000


def test_the_qr_dqn_preset_sets_the_papers_values_over_the_atari_group():
    from rlcli.algos import resolve

    cfg = resolve("dqn", "Breakout-v5", config_file="qr-dqn").algo
    assert (cfg.trunk, cfg.quantiles, cfg.atoms, cfg.double_q) == ("cnn", 200, 1, False)
    assert (cfg.learning_rate, cfg.adam_eps, cfg.steps) == (5e-5, 3.125e-4, 2_500_000)


class _CartPoleFromOne(gym.Wrapper):
    """CartPole with its actions numbered 1 and 2 (gymnasium's ``Discrete(2, start=1)``); any other is refused."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.action_space = gym.spaces.Discrete(2, start=1)

    def step(self, action):
        assert action in (1, 2), action
        return self.env.step(int(action) - 1)


gym.register("CartPoleFromOne-v0", entry_point=_CartPoleFromOne)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_an_env_numbering_its_actions_from_one_gets_them_so_from_every_agent(algo, tmp_path):
    # the agents number choices from 0; the env layer adds the env's start, before and after learning starts
    budget = ["--steps", "600", "-p", "learning_starts=200", "-p", "batch_size=32"] if algo == "dqn" else \
        ["--steps", "512", "-p", "n_envs=2", "-p", "n_steps=128", "-p", "minibatch_size=64"]
    output = train_evaluate_export(tmp_path, ["CartPoleFromOne-v0", "--algo", algo, "--backend", "gymnasium",
                                              "--seed", "1", "--eval-every", "0", *budget])
    assert "max |Δaction| = 0" in output
    spec = json.loads((tmp_path / "exported.json").read_text())["action_space"]
    assert (spec["n"], spec["start"]) == (2, 1)  # a deployment adds it to the file's output
