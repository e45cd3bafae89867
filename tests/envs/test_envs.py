"""Pins the auto-reset and truncation behaviour the training loop relies on, on every backend (the torch
backend's envs as the training loop takes them: tensors on their device)."""

import warnings
from importlib.util import find_spec

import numpy as np
import pytest
import torch

from rlcli.algos.ppo import PPOConfig
from rlcli.envs import ManyAgentEnv, SavableEnv, TurnBasedEnv, agents_per_env, make_vec_env
from rlcli.errors import UsageError

BACKENDS = ["gymnasium", pytest.param("envpool", marks=pytest.mark.skipif(
    find_spec("envpool") is None, reason="envpool is not installed")), "torch"]


def _make(env_id, num_envs, backend):
    return make_vec_env(env_id, num_envs, 0, backend, device="cpu" if backend == "torch" else None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_step_auto_reset(backend):
    """After a done, the next step ignores its action, returns reward 0 and a fresh first observation."""
    env = _make("CartPole-v1", 1, backend)
    env.reset()
    push = np.ones(1, dtype=np.int64)
    for _ in range(100):
        result = env.step(push)
        if result.terminated[0]:
            break
    assert result.terminated[0] and result.game_over[0]
    final_obs = result.obs[0]
    assert abs(final_obs[2]) > 0.2 or abs(final_obs[0]) > 2.4  # the real terminal state, not a reset
    reset = env.step(push)
    assert reset.reward[0] == 0.0 and not reset.terminated[0] and not reset.truncated[0]
    assert (abs(reset.obs[0]) <= 0.05).all()  # CartPole starts within +-0.05
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_is_a_truncation_with_the_real_final_observation(backend):
    env = _make("Pendulum-v1", 2, backend)
    env.reset()
    zeros = np.zeros((2, 1), dtype=np.float32)
    for t in range(200):
        result = env.step(zeros)
        assert not result.terminated.any()
        assert result.truncated.all() == (t == 199)
    # Pendulum's observation is (cos, sin, velocity): the final one is a real state, not a reset
    assert np.allclose(np.linalg.norm(result.obs[:, :2], axis=1), 1.0, atol=1e-4)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_collector_masks_reset_rows_and_bootstraps_from_final_value(backend):
    from rlcli.algos.learners import RolloutCollector
    from rlcli.algos.ppo import PPO

    env = _make("CartPole-v1", 4, backend)
    cfg = PPOConfig(n_envs=4, n_steps=64, minibatch_size=64)
    agent = PPO(cfg, env.single_observation_space, env.single_action_space, 4, torch.device("cpu"))
    buf = RolloutCollector(env, agent, cfg.n_steps, overlap=False).collect()
    dones = buf.dones
    assert dones.any(), "64 random-policy CartPole steps end some episodes"
    # every row right after a done is a reset row, and only those
    expected_valid = torch.ones_like(buf.valid)
    expected_valid[1:] = ~dones[:-1]
    assert torch.equal(buf.valid, expected_valid)
    # the value in row t+1 is the critic's value of the observation returned at step t; one row alone sums in
    # another order than the batch of 4 (and a busy machine's BLAS may split the batch differently): atol
    t, i = (dones[:-1]).nonzero()[0].tolist()
    with torch.no_grad():
        assert torch.allclose(buf.values[t + 1, i], agent.net.value(buf.obs[t + 1, i][None])[0], atol=1e-6)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_async_then_wait_is_step(backend):
    envs = [_make("CartPole-v1", 3, backend) for _ in range(2)]
    for env in envs:
        env.reset()
    rng = np.random.default_rng(0)
    for _ in range(120):  # random CartPole episodes end within this, so auto-resets are included
        actions = rng.integers(0, 2, size=3)
        stepped = envs[0].step(actions)
        envs[1].step_async(actions)
        waited = envs[1].step_wait()
        for a, b in zip(stepped, waited, strict=True):
            assert np.array_equal(a, b)
    for env in envs:
        env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollouts_are_the_same_whether_the_critic_overlaps_the_env_or_not(backend, monkeypatch):
    """The collector evaluates the critic while the env steps only when told to (acting on one thread)."""
    from rlcli.algos.learners import RolloutCollector
    from rlcli.algos.ppo import PPO

    buffers, orders = [], []
    for overlap in (True, False):
        torch.manual_seed(0)
        env = _make("CartPole-v1", 4, backend)
        cfg = PPOConfig(n_envs=4, n_steps=48, minibatch_size=64)
        agent = PPO(cfg, env.single_observation_space, env.single_action_space, 4, torch.device("cpu"))
        calls: list[str] = []
        for obj, name in ((env, "step_wait"), (agent, "value_of")):
            monkeypatch.setattr(obj, name, lambda *a, f=getattr(obj, name), n=name, c=calls: c.append(n) or f(*a))
        buf = RolloutCollector(env, agent, cfg.n_steps, overlap).collect()
        orders.append(calls[:2])
        buffers.append({name: value.clone() for name, value in vars(buf).items() if torch.is_tensor(value)})
        env.close()
    assert orders == [["value_of", "step_wait"], ["step_wait", "value_of"]]
    assert buffers[0].keys() == buffers[1].keys() and len(buffers[0]) >= 8
    for name, value in buffers[0].items():
        assert torch.equal(value, buffers[1][name]), name


def test_unknown_env_id_suggests_close_matches():
    with pytest.raises(UsageError, match="did you mean CartPole-v1"):
        make_vec_env("CartPol-v1", 1, 0)


def test_custom_env_module_registers_ids(tmp_path, monkeypatch):
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MyCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from rlcli.envs import import_env_module

    import_env_module("my_envs")
    env = make_vec_env("MyCartPole-v0", 2, 0, "auto")
    assert env.backend == "gymnasium" and env.reset().shape == (2, 4)
    with pytest.raises(UsageError, match="--env-module: no module named .no_such_module_here."):
        import_env_module("no_such_module_here")


def test_a_missing_simulator_is_one_line_naming_the_extra():
    import subprocess
    import sys

    # a fresh process in which MuJoCo cannot be imported, as on a machine without the extra
    code = ("import sys; sys.modules['mujoco'] = None; sys.argv = ['rlcli', 'train', 'Hopper-v5', "
            "'--backend', 'gymnasium']; from rlcli.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "error: Hopper-v5 needs MuJoCo, which is not installed: pip install 'rlcli[mujoco]'"


def test_env_capabilities_are_protocols_checked_by_isinstance():
    pytest.importorskip("pettingzoo")
    single, spread, game = (make_vec_env("CartPole-v1", 2, 0, backend="gymnasium"),
                            make_vec_env("mpe2.simple_spread_v3", 2, 0), make_vec_env("tictactoe_v3", 2, 0))
    try:
        assert isinstance(single, SavableEnv) and not isinstance(single, ManyAgentEnv | TurnBasedEnv)
        assert isinstance(spread, ManyAgentEnv) and not isinstance(spread, SavableEnv | TurnBasedEnv)
        assert isinstance(game, TurnBasedEnv) and not isinstance(game, ManyAgentEnv | SavableEnv)
        assert (agents_per_env(single), agents_per_env(spread), agents_per_env(game)) == (1, 3, 1)
        assert spread.num_envs == 2 * 3 and spread.agents == ["agent_0", "agent_1", "agent_2"]
    finally:
        for env in (single, spread, game):
            env.close()


def test_mujoco_warnings_become_python_warnings_not_a_log_in_the_working_directory(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium.envs.mujoco")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = make_vec_env("HalfCheetah-v5", 1, 0, "gymnasium")
        env.reset()
        env.close()
    assert list(tmp_path.iterdir()) == []  # MuJoCo's own handler would have written MUJOCO_LOG.TXT here
    mujoco = [str(w.message) for w in caught if str(w.message).startswith("MuJoCo: ")]
    assert all(w.category is RuntimeWarning for w in caught if str(w.message).startswith("MuJoCo: "))
    assert mujoco, "gymnasium's HalfCheetah-v5 model warns as it loads (a deprecated compiler attribute)"


def test_gymnasium_envs_take_seeds_past_int32_as_they_are():
    import gymnasium as gym

    env = make_vec_env("CartPole-v1", 1, 2**31 + 5, "gymnasium")
    expected, _ = gym.make("CartPole-v1").reset(seed=2**31 + 5)
    np.testing.assert_array_equal(env.reset()[0], expected)
    env.close()
