"""The velocity-hidden tasks: the same dynamics as their full task, with the velocities read as 0;
CartPoleNoVel-v1's vector env gives the episodes of the per-env task to the bit."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlcli.envs import make_vec_env
from rlcli.envs.partial import CartPoleNoVelVector
from rlcli.envs.registry import env_group, resolve_backend, resolve_env_id


@pytest.mark.parametrize("env_id, full_id, hidden, limit", [
    ("CartPoleNoVel-v1", "CartPole-v1", [1, 3], 500),
    ("PendulumNoVel-v1", "Pendulum-v1", [2], 200),
])
def test_velocities_are_hidden_and_the_rest_is_the_full_task(env_id, full_id, hidden, limit):
    partial, full = gym.make(env_id), gym.make(full_id)
    assert partial.spec.max_episode_steps == limit and partial.observation_space == full.observation_space
    obs, _ = partial.reset(seed=3)
    full_obs, _ = full.reset(seed=3)
    partial.action_space.seed(0)
    for step in range(50):
        assert np.all(obs[hidden] == 0.0)
        shown = [i for i in range(len(obs)) if i not in hidden]
        assert np.array_equal(obs[shown], full_obs[shown])
        assert step == 0 or np.any(full_obs[hidden] != 0.0), "the full task's velocities are not all 0"
        action = partial.action_space.sample()
        obs, reward, terminated, truncated, _info = partial.step(action)
        full_obs, full_reward, full_terminated, full_truncated, _ = full.step(action)
        assert reward == full_reward and (terminated, truncated) == (full_terminated, full_truncated)
        if terminated or truncated:
            break


def test_the_ids_resolve_train_on_gymnasium_and_use_the_classic_group():
    assert resolve_env_id("CartPoleNoVel") == ("CartPoleNoVel-v1", "CartPoleNoVel resolves to CartPoleNoVel-v1")
    assert resolve_backend("PendulumNoVel-v1", "auto") == "gymnasium" and env_group("PendulumNoVel-v1") == "classic"
    env = make_vec_env("CartPoleNoVel-v1", 2, 0)
    obs = env.reset()
    assert obs.shape == (2, 4) and np.all(obs[:, [1, 3]] == 0.0)
    env.close()


@pytest.mark.parametrize("env_id", ["CartPoleNoVel-v1", "MaskedChoice-v0"])
def test_rlclis_own_tasks_resolve_and_step_without_importing_envpool(env_id):
    """envpool cannot have them, and importing it to ask costs a process 1.5-2 s."""
    code = (f"import sys; from rlcli.envs import make_vec_env; from rlcli.envs.registry import resolve_backend; "
            f"assert resolve_backend({env_id!r}, 'auto') == 'gymnasium'; env = make_vec_env({env_id!r}, 2, 0); "
            f"env.reset(); env.close(); print(sorted(m for m in sys.modules if m.split('.')[0] == 'envpool'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_state_variant_shows_the_hidden_observation_and_the_full_state_as_two_keys():
    env, full = gym.make("CartPoleNoVelState-v1"), gym.make("CartPole-v1")
    obs, _ = env.reset(seed=4)
    full_obs, _ = full.reset(seed=4)
    for t in range(20):  # alternate pushes: the pole stays up, and no step follows the episode's end
        assert np.array_equal(obs["state"], full_obs) and np.array_equal(obs["observation"], full_obs * [1, 0, 1, 0])
        obs, _, terminated, *_ = env.step(t % 2)
        full_obs, *_ = full.step(t % 2)
        assert not terminated
    vec = make_vec_env("CartPoleNoVelState-v1", 2, 0)
    assert vec.obs_layout.fields == (("observation", 4), ("state", 4)) and vec.reset().shape == (2, 8)
    vec.close()


def _same_bits(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()  # -0.0 is not 0.0


@pytest.mark.parametrize("kwargs", [{}, {"max_episode_steps": 20}, {"sutton_barto_reward": True}])
def test_the_vector_env_gives_the_per_env_tasks_episodes_to_the_bit(kwargs):
    """Seeds, dynamics, ends, the time limit (20 steps: many truncations), Sutton and Barto's rewards,
    next-step auto-resets, resets of some rows (seeded, and with CartPole's reset bounds) and unseeded
    resets that go on drawing, over 3,000 steps of 8 envs that mostly act at random."""
    vector = gym.make_vec("CartPoleNoVel-v1", 8, vectorization_mode="vector_entry_point", **kwargs)
    per_env = SyncVectorEnv([lambda: gym.make("CartPoleNoVel-v1", **kwargs) for _ in range(8)],
                            autoreset_mode=AutoresetMode.NEXT_STEP)
    assert isinstance(vector, CartPoleNoVelVector)
    assert (vector.single_observation_space, vector.single_action_space) == (
        per_env.single_observation_space, per_env.single_action_space)
    _same_bits(vector.reset(seed=7)[:1], per_env.reset(seed=7)[:1])
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(3_000):
        if t in (1_000, 2_000):
            mask = rng.random(8) < 0.5
            options = {"reset_mask": mask, **({"low": -0.2, "high": 0.2} if t == 2_000 else {})}
            _same_bits(vector.reset(seed=t, options=dict(options))[:1],
                       per_env.reset(seed=t, options=dict(options))[:1])
        if t == 1_500:
            _same_bits(vector.reset()[:1], per_env.reset()[:1])
        actions = rng.integers(0, 2, 8) if t % 3 else np.full(8, t % 2)
        ours, theirs = vector.step(actions), per_env.step(actions)
        _same_bits(ours[:4], theirs[:4])
        ends += int(ours[2].sum() + ours[3].sum())
    assert ends > 500


def test_the_vector_env_refuses_what_the_per_env_task_refuses():
    vector = gym.make_vec("CartPoleNoVel-v1", 2, vectorization_mode="vector_entry_point")
    with pytest.raises(gym.error.ResetNeeded):
        vector.step(np.array([0, 1]))
    with pytest.raises(ValueError, match="3 seeds for 2 envs"):
        vector.reset(seed=[1, 2, 3])
    vector.reset(seed=0)
    for bad in (np.array([0, 2]), np.array([0.0, 1.0])):
        with pytest.raises(ValueError, match="the integers 0 and 1"):
            vector.step(bad)


def test_a_reset_mask_starts_new_episodes_in_those_rows_only():
    vector = gym.make_vec("CartPoleNoVel-v1", 3, vectorization_mode="vector_entry_point")
    vector.reset(seed=0)
    for _ in range(5):
        obs, *_ = vector.step(np.array([1, 1, 1]))
    again, _ = vector.reset(options={"reset_mask": np.array([False, True, False])})
    assert np.array_equal(again[[0, 2]], obs[[0, 2]]) and not np.array_equal(again[1], obs[1])
    assert np.all(np.abs(again[1]) <= 0.05) and vector.elapsed.tolist() == [5, 0, 5]


def test_the_gymnasium_backend_steps_the_vector_env_except_to_render():
    env = make_vec_env("CartPoleNoVel-v1", 2, 0, "gymnasium")
    assert isinstance(env._env, CartPoleNoVelVector)
    env.close()
    rendering = make_vec_env("CartPoleNoVel-v1", 1, 0, "gymnasium", render_mode="rgb_array")
    rendering.reset()
    assert rendering.render().ndim == 3
    rendering.close()
