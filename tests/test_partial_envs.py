"""The velocity-hidden tasks: the same dynamics as their full task, with the velocities read as 0."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from rlcli.envs import make_vec_env
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
