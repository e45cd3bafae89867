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


def test_a_recurrent_pqn_replays_a_rollout_to_the_values_it_acted_on_and_learns_from_its_valid_rows():
    torch.manual_seed(0)
    cfg = PQNConfig(steps=1000, recurrent="lstm", recurrent_size=8, hidden=(16,), n_steps=6, minibatch_size=12)
    agent = PQN(cfg, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), 2, torch.device("cpu"))
    steps, envs = 6, 2
    obs = torch.randn(steps, envs, 3)
    starts = torch.zeros(steps, envs, dtype=torch.bool)
    starts[0], starts[3, 1] = True, True  # env 1 starts a new episode at step 3
    state = first = torch.randn(envs, agent.q.state_size)  # carried in from the previous rollout
    acted = []
    with torch.no_grad():
        for t in range(steps):
            state = state.masked_fill(starts[t].unsqueeze(-1), 0.0)
            sample = agent.sample(obs[t], state)
            acted.append(sample.critic_input)
            state = sample.state
        torch.testing.assert_close(agent.q.replay(obs, first, starts), torch.stack(acted))

    actions = torch.randint(0, 4, (steps, envs))
    returns = torch.randn(steps, envs)
    valid = torch.ones(steps, envs, dtype=torch.bool)
    valid[2, 1] = False  # a reset row: its action did nothing, so it teaches nothing
    with torch.no_grad():
        q = torch.stack(acted).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        expected = (q - returns)[valid].square().mean()
    before = [p.clone() for p in agent.q.parameters()]
    loss, q_mean = agent.q_sequence_step(obs, actions, returns, valid, starts, first).tolist()
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    assert q_mean == pytest.approx(q[valid].mean().item(), rel=1e-5)
    moved = [not torch.equal(a, b) for a, b in zip(before, agent.q.parameters(), strict=True)]
    assert all(moved)  # one step moved every weight


def test_a_recurrent_pqn_learns_whole_sequences_and_goes_through_every_command(tmp_path):
    pytest.importorskip("onnxruntime")
    exported = train_evaluate_export(tmp_path, ["CartPoleNoVel-v1", "--algo", "pqn", "--steps", "2048", "-p",
                                                "recurrent=gru", "-p", "n_envs=8", "-p", "n_steps=32", "-p",
                                                "minibatch_size=64"])
    assert "max |Δaction| = 0" in exported
    assert "must be a multiple of n_steps=32" in refused(tmp_path, ["CartPoleNoVel-v1", "--algo", "pqn", "-p",
                                                                    "recurrent=lstm", "-p", "n_steps=32", "-p",
                                                                    "minibatch_size=48"])


def test_the_pqn_atari_lstm_preset_reads_single_frames_into_an_lstm():
    from rlcli.algos import resolve

    cfg = resolve("pqn", "Pong-v5", config_file="pqn-atari-lstm", eval_episodes=1)
    assert (cfg.algo.trunk, cfg.algo.recurrent, cfg.algo.recurrent_size, cfg.env.kwargs["stack_num"]) == (
        "cnn", "lstm", 128, 1)
    assert cfg.algo.minibatch_size // cfg.algo.n_steps == 2 and cfg.algo.max_grad_norm == 0.5


def test_the_pqn_atari_128_preset_takes_the_authors_rollout_and_epochs_over_the_atari_group():
    from rlcli.algos import resolve

    cfg = resolve("pqn", "Pong-v5", config_file="pqn-atari-128", eval_episodes=1).algo
    assert (cfg.n_envs, cfg.n_steps, cfg.n_epochs, cfg.minibatch_size) == (128, 32, 2, 128)
    assert (cfg.n_envs * cfg.n_steps) // cfg.minibatch_size == 32  # the authors' NUM_MINIBATCHES
    assert (cfg.lr_schedule, cfg.learning_rate, cfg.epsilon_end, cfg.exploration_fraction) == (
        "constant", 2.5e-4, 0.001, 0.1)
    assert (cfg.trunk, cfg.layer_norm, cfg.steps, cfg.gae_lambda) == ("cnn", True, 2_500_000, 0.65)
