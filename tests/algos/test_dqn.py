"""DQN's pieces against hand-computed cases: the TD targets (plain and double), epsilon's schedule, the
dueling head, epsilon-greedy acting; and a short run through every command."""

import json

import gymnasium as gym
import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos.dqn import DQN, DQNConfig, QNetwork, linear_epsilon, td_targets
from rlcli.cli import app


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
    net = QNetwork(2, 3, (4,), "relu", dueling=True)
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


def test_a_dqn_run_trains_evaluates_exports_and_is_refused_on_continuous_actions(tmp_path):
    pytest.importorskip("onnxruntime")
    runner, run = CliRunner(), tmp_path / "run"
    result = runner.invoke(app, ["train", "CartPole-v1", "--algo", "dqn", "--steps", "2000", "--backend", "gymnasium",
                                 "--eval-episodes", "2", "--run-dir", str(run), "-p", "learning_starts=500"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["eval", str(run), "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["episodes"] == 2
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "exported")])
    assert result.exit_code == 0, result.output
    assert "max |Δaction| = 0" in result.output
    result = runner.invoke(app, ["train", "Pendulum-v1", "--algo", "dqn", "--steps", "100",
                                 "--run-dir", str(tmp_path / "no")])
    assert result.exit_code == 2
    assert "DQN needs Discrete actions" in result.output


def test_dqn_resumes_exactly_with_its_replay_buffer(tmp_path, monkeypatch):
    from rlcli.algos import resolve
    from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
    from rlcli.training.train import TrainingInterrupted, train
    from tests.training.test_resume_exact import _assert_same_run, _interrupt_at

    cfg = resolve("dqn", "CartPole-v1", backend="gymnasium", eval_every=0, eval_episodes=1, torch_threads=1, seed=2,
                  overrides={"steps": 800, "learning_starts": 200, "log_every": 100, "batch_size": 16, "hidden": [16],
                             "target_update_every": 20, "utd_ratio": 0.5})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 5th iteration, while epsilon still falls
        _interrupt_at(patch, GymnasiumVecEnv, "step", 450)
        with pytest.raises(TrainingInterrupted):
            train(cfg, tmp_path / "cut", save_buffer=True)
    assert json.loads((tmp_path / "cut" / "meta.json").read_text())["steps"] == 500
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")
