"""PQN: the rollout's advantages plus its max-Q values are Peng's Q(lambda) returns (the claim PQN's update
rests on), acting is epsilon-greedy on a LayerNorm network, and a short run goes through every command and
resumes exactly."""

import gymnasium as gym
import pytest
import torch

from rlcli.algos.buffers import compute_gae
from rlcli.algos.pqn import PQN, PQNConfig
from tests.algos.roundtrip import refused, train_evaluate_export


def test_advantages_over_max_q_values_are_the_q_lambda_returns():
    gamma, lam = 0.9, 0.6
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0]])
    values = torch.tensor([[0.5], [1.5], [-1.0], [2.0], [0.25], [3.0]])  # max_a Q(s_t), the last the bootstrap
    terminated = torch.tensor([[False], [False], [True], [False], [False]])  # an episode ends at step 2
    dones = terminated.clone()
    dones[3] = True  # and the next one at step 3, by a time limit: bootstrapped from values[4], the final obs
    returns = compute_gae(rewards=rewards, values=values, terminated=terminated, dones=dones, gamma=gamma,
                          gae_lambda=lam) + values[:-1]
    # G_t = r_t + gamma ((1 - lam) V_t+1 + lam G_t+1), cut where the episode ends
    g4 = 5.0 + gamma * 3.0
    g3 = 4.0 + gamma * 0.25
    g2 = 3.0
    g1 = 2.0 + gamma * ((1 - lam) * -1.0 + lam * g2)
    g0 = 1.0 + gamma * ((1 - lam) * 1.5 + lam * g1)
    torch.testing.assert_close(returns.squeeze(-1), torch.tensor([g0, g1, g2, g3, g4]))


def test_pqn_acts_epsilon_greedy_on_a_layer_normed_network():
    cfg = PQNConfig(steps=1000, exploration_fraction=0.5, epsilon_end=0.0)
    agent = PQN(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), 8, torch.device("cpu"))
    assert any(isinstance(m, torch.nn.LayerNorm) for m in agent.q.modules())
    obs = torch.randn(256, 4)
    greedy = agent.q(obs).argmax(-1)
    agent.env_steps = 500  # past the exploration phase: epsilon 0
    sample = agent.sample(obs)
    assert torch.equal(sample.actions, greedy)
    torch.testing.assert_close(agent.value_of(sample), agent.q(obs).max(-1).values)
    agent.env_steps = 0  # epsilon 1: uniform
    counts = torch.bincount(agent.sample(torch.randn(3000, 4)).actions, minlength=3)
    assert counts.min() > 900


def test_a_pqn_run_trains_evaluates_exports_and_resumes_exactly(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from rlcli.algos import resolve
    from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
    from rlcli.training.train import TrainingInterrupted, train
    from tests.training.test_resume_exact import _assert_same_run, _interrupt_at

    exported = train_evaluate_export(tmp_path, ["CartPole-v1", "--algo", "pqn", "--steps", "4096", "--backend",
                                                "gymnasium", "-p", "n_envs=8", "-p", "n_steps=32"])
    assert "max |Δaction| = 0" in exported
    assert "PQN needs Discrete actions" in refused(tmp_path, ["Pendulum-v1", "--algo", "pqn"])

    cfg = resolve("pqn", "CartPole-v1", backend="gymnasium", eval_every=0, eval_episodes=1, torch_threads=1, seed=2,
                  overrides={"steps": 2048, "n_envs": 4, "n_steps": 64, "minibatch_size": 64})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 5th rollout, epsilon still falling
        _interrupt_at(patch, GymnasiumVecEnv, "step", 4 * 64 + 10)
        with pytest.raises(TrainingInterrupted):
            train(cfg, tmp_path / "cut")
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")
