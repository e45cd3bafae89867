"""The torch backend: gymnasium's classic-control physics in torch, on the training device. Its steps agree
with gymnasium's; a rollout on it reads nothing back to the host; a run on it learns, resumes exactly and is
evaluated through numpy arrays. (The auto-reset and truncation rules every backend keeps are in test_envs.py.)"""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.algos.learners import RolloutCollector
from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.cli import app
from rlcli.envs import ResidentEnv, make_vec_env
from rlcli.envs.host import HostArrays
from rlcli.envs.torch_backend import TorchVecEnv
from rlcli.errors import UsageError
from rlcli.training.train import train
from tests.training.test_resume_exact import ITERATION, assert_resumed_after_ctrl_c_is_exact


@pytest.mark.parametrize(("env_id", "actions"), [
    ("CartPole-v1", [0, 1, 1, 0]),
    ("Pendulum-v1", [[-2.0], [0.7], [3.5], [0.0]]),  # 3.5 beyond the bound: clipped to 2 as gymnasium does
])
def test_a_step_from_any_state_is_gymnasiums_to_float32_rounding(env_id, actions):
    env = make_vec_env(env_id, 4, 3, "torch", device="cpu")
    assert isinstance(env, TorchVecEnv)
    rng = np.random.default_rng(0)
    reference = gym.make(env_id).unwrapped
    reference.reset(seed=0)
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == reference.action_space
    for _ in range(20):
        states = rng.uniform(-1.0, 1.0, (4, env.physical.shape[1])).astype(np.float32)
        env.physical, env.done = torch.from_numpy(states), torch.zeros(4, dtype=torch.bool)  # mid-episode
        result = env.step(torch.as_tensor(actions))
        for i, action in enumerate(actions):
            reference.state, reference.steps_beyond_terminated = states[i].astype(np.float64), None
            obs, reward, terminated, _, _ = reference.step(np.asarray(action) if env_id != "CartPole-v1" else action)
            np.testing.assert_allclose(result.obs[i].numpy(), obs, rtol=1e-5, atol=1e-6)
            assert float(result.reward[i]) == pytest.approx(float(reward), rel=1e-5, abs=1e-6)
            assert bool(result.terminated[i]) == terminated


def test_its_first_states_are_gymnasiums_ranges_and_a_seed_repeats_them():
    first = [make_vec_env("CartPole-v1", 256, seed, "torch", device="cpu").reset() for seed in (1, 1, 2)]
    assert torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])
    assert first[0].abs().max() <= 0.05 and first[0].abs().max() > 0.045  # uniform on [-0.05, 0.05]
    pendulum = make_vec_env("Pendulum-v1", 256, 1, "torch", device="cpu")
    angle = pendulum.physical[:, 0]
    assert angle.min() < -3.0 and angle.max() > 3.0 and pendulum.physical[:, 1].abs().max() <= 1.0


def rollout_host_reads(env, monkeypatch, n_steps=64):
    """What a PPO rollout of ``n_steps`` on the resident ``env`` read of its tensors on the host (``.item()``,
    ``bool()``, ``.numpy()``, ``.tolist()``, ``__array__``), with its buffer and collector."""
    n = env.num_envs
    cfg = PPOConfig(n_envs=n, n_steps=n_steps, minibatch_size=n * n_steps // 4, normalize_obs=True,
                    normalize_reward=True)
    agent = PPO(cfg, env.single_observation_space, env.single_action_space, n, torch.device("cpu"))
    collector = RolloutCollector(env, agent, cfg.n_steps, overlap=True)
    reads: list[str] = []

    class HostReads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                reads.append("a scalar")
            return func(*args, **(kwargs or {}))

    with monkeypatch.context() as patch:
        for name in ("numpy", "tolist", "__array__"):
            original = getattr(torch.Tensor, name)
            patch.setattr(torch.Tensor, name, lambda self, *a, f=original, n=name, **k: reads.append(n) or f(
                self, *a, **k))
        with HostReads():
            buffer = collector.collect()
    return reads, buffer, collector


def test_a_rollout_on_a_resident_env_reads_nothing_back_to_the_host(monkeypatch):
    """No value of a tensor is read on the host while the collector steps a resident env: on a GPU, nothing
    would wait for the device in the loop."""
    env = make_vec_env("CartPole-v1", 8, 0, "torch", device="cpu")
    reads, buffer, collector = rollout_host_reads(env, monkeypatch)
    assert reads == []
    assert buffer.dones.any()  # 64 steps of a random policy end episodes: the resets were on the device too
    returns, lengths = collector.episodes.drain()
    assert len(returns) == int(buffer.dones.sum()) and returns == [float(n) for n in lengths]


def test_ppo_learns_cartpole_on_it_and_the_run_is_evaluated_through_numpy(tmp_path):
    # seed 1 on one thread: 500 from 30k steps
    cfg = resolve("ppo", "CartPole-v1", backend="torch", overrides={"steps": 50_000}, seed=1, eval_every=10_000,
                  eval_episodes=10, torch_threads=1)
    state = train(cfg, tmp_path / "run")
    assert state.best_eval is not None and state.best_eval >= 475, state.best_eval
    shown = CliRunner().invoke(app, ["eval", str(tmp_path / "run"), "-n", "4", "--json"])
    assert shown.exit_code == 0, shown.output
    result = json.loads(shown.output)
    assert result["mean_return"] >= 475 and len(result["returns"]) == 4, result


def test_ctrl_c_in_a_rollout_then_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    """The envs mid-episode, their steps into the time limit and the generator go into the checkpoint."""
    cfg = resolve("ppo", "CartPole-v1", backend="torch", eval_every=4 * ITERATION, eval_episodes=2, torch_threads=1,
                  seed=5, overrides={"n_envs": 4, "n_steps": 32, "minibatch_size": 64, "n_epochs": 2,
                                     "normalize_obs": True, "normalize_reward": True, "steps": 12 * ITERATION})
    assert_resumed_after_ctrl_c_is_exact(cfg, tmp_path, monkeypatch, TorchVecEnv, 5 * 32 + 7, 6 * ITERATION)


def test_without_a_device_it_is_numpy_and_off_policy_learners_take_it(tmp_path):
    env = make_vec_env("Pendulum-v1", 2, 0, "torch")
    assert isinstance(env, HostArrays) and not isinstance(env, ResidentEnv)
    assert isinstance(env.reset(), np.ndarray) and isinstance(env.step(np.zeros((2, 1), np.float32)).obs, np.ndarray)
    cfg = resolve("sac", "Pendulum-v1", backend="torch", torch_threads=1, seed=1, eval_every=0, eval_episodes=1,
                  overrides={"steps": 1000, "learning_starts": 500})
    state = train(cfg, tmp_path / "sac")
    assert state.step == 1000 and state.recent_return is not None  # five 200-step episodes, read on the host


def test_an_id_it_lacks_is_one_line_naming_what_it_has():
    with pytest.raises(UsageError, match="the torch backend has no environment 'Hopper-v5' .*CartPole-v1, "
                                         "Pendulum-v1.*use --backend auto"):
        make_vec_env("Hopper-v5", 1, 0, "torch")
    with pytest.raises(UsageError, match="takes max_episode_steps alone, not gravity"):
        make_vec_env("CartPole-v1", 1, 0, "torch", kwargs={"gravity": 3.0})
