"""TD3's pieces against hand-computed cases: target policy smoothing, the clipped double-Q target, the delayed
actor and target updates, DDPG as its settings; and a short run through every command."""

import json

import gymnasium as gym
import pytest
import torch

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.td3 import TD3, TD3Config, smoothed_target_actions, td3_targets
from tests.algos.roundtrip import refused, train_evaluate_export


def test_target_smoothing_clips_the_noise_then_the_action():
    actions = torch.tensor([0.0, 0.9, -0.5, 0.2])
    noise = torch.tensor([1.0, 1.0, -5.0, -1.0])  # standard normal draws, scaled by 0.2: 0.2, 0.2, -1.0, -0.2
    smoothed = smoothed_target_actions(actions, noise, scale=0.2, clip=0.5)
    # 0 + 0.2; 0.9 + 0.2 = 1.1 -> 1; -0.5 + (-1.0 clipped to -0.5) = -1.0; 0.2 - 0.2 = 0
    assert smoothed.tolist() == pytest.approx([0.2, 1.0, -1.0, 0.0])


def test_target_takes_the_smaller_critic_and_stops_at_a_terminal():
    next_q = torch.tensor([[5.0, 1.0], [3.0, 2.0]])  # [critics, batch]
    targets = td3_targets(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0]), next_q, gamma=0.5)
    assert targets.tolist() == pytest.approx([1.0 + 0.5 * 3.0, 1.0])


def agent(**settings):
    cfg = TD3Config(actor_hidden=(8,), critic_hidden=(8,), **settings)
    return TD3(cfg, gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-2.0, 2.0, (2,)), 1, torch.device("cpu"))


def batch(rows=16):
    g = torch.Generator().manual_seed(0)
    return ReplayBatch(torch.randn(rows, 3, generator=g), torch.rand(rows, 2, generator=g) * 4 - 2,
                       torch.randn(rows, generator=g), torch.randn(rows, 3, generator=g), torch.zeros(rows))


def test_the_actor_and_the_targets_move_every_policy_delay_critic_steps():
    td3 = agent(policy_delay=2, actor_lr=1e-2, critic_lr=1e-2)
    actor, target = td3.actor.mean.weight.clone(), td3.critic_target.out.weight.clone()
    first = td3.update(batch())
    assert "losses/actor" not in first
    assert torch.equal(td3.actor.mean.weight, actor) and torch.equal(td3.critic_target.out.weight, target)
    second = td3.update(batch())
    assert "losses/actor" in second
    assert not torch.equal(td3.actor.mean.weight, actor) and not torch.equal(td3.critic_target.out.weight, target)


def test_ddpg_is_one_critic_no_smoothing_and_no_delay():
    ddpg = agent(twin_critics=False, target_noise=0.0, policy_delay=1)
    assert ddpg.critic.n == 1
    assert "losses/actor" in ddpg.update(batch())


def test_the_actor_climbs_the_first_critic_alone():
    td3, obs = agent(), torch.randn(16, 3)
    expected = torch.autograd.grad(-td3.critic(obs, td3.actor(obs))[0].mean(), list(td3.actor.parameters()))
    with torch.no_grad():
        for param in td3.critic.parameters():
            param[1:] = float("nan")  # the second critic: nothing of it may reach the actor's step
    td3.critic.requires_grad_(False)
    td3.actor_step(obs)
    for param, grad in zip(td3.actor.parameters(), expected, strict=True):
        assert torch.isfinite(param.grad).all() and torch.allclose(param.grad, grad)


def test_actions_stay_within_the_bounds_and_the_policy_is_the_actor_scaled():
    td3, obs = agent(exploration_noise=5.0), torch.randn(256, 3)
    noisy = td3.act(obs)
    assert noisy.abs().max() <= 2.0 and (noisy.abs() == 2.0).any()  # wide noise: clipped at the bounds
    torch.testing.assert_close(td3.policy()(obs), torch.tanh(td3.actor.mean(td3.actor.trunk(obs))) * 2.0)


def test_a_td3_run_trains_evaluates_exports_and_is_refused_on_discrete_actions(tmp_path):
    pytest.importorskip("onnxruntime")
    exported = train_evaluate_export(tmp_path, ["Pendulum-v1", "--algo", "td3", "--steps", "600", "-p",
                                                "learning_starts=300", "-p", "actor_hidden=[16]", "-p",
                                                "critic_hidden=[16]"])
    assert "max |Δaction|" in exported
    assert "TD3 needs continuous (Box) actions" in refused(tmp_path, ["CartPole-v1", "--algo", "td3"])


def test_td3_resumes_exactly_with_its_replay_buffer(tmp_path, monkeypatch):
    from rlcli.algos import resolve
    from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
    from rlcli.training.train import TrainingInterrupted, train
    from tests.training.test_resume_exact import _assert_same_run, _interrupt_at

    cfg = resolve("td3", "Pendulum-v1", backend="gymnasium", eval_every=0, eval_episodes=1, torch_threads=1, seed=2,
                  overrides={"steps": 600, "learning_starts": 200, "log_every": 100, "batch_size": 32,
                             "actor_hidden": [16], "critic_hidden": [16]})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 4th iteration, with the policy delay mid-phase
        _interrupt_at(patch, GymnasiumVecEnv, "step", 350)
        with pytest.raises(TrainingInterrupted):
            train(cfg, tmp_path / "cut", save_buffer=True)
    assert json.loads((tmp_path / "cut" / "meta.json").read_text())["steps"] == 400
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")
