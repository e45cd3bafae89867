"""Partially observed tasks beyond the velocity-hidden ones: POPGym's ids, symbol observations observed
one-hot, and the shipped presets that --config names."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcli.algos import resolve
from rlcli.envs import make_vec_env
from rlcli.envs.gymnasium_backend import one_hot_observations
from rlcli.errors import UsageError


class Symbols(gym.Env):
    """Observes a Tuple of a Discrete and a MultiDiscrete symbol, as POPGym's tasks do."""

    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([2, 4])))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (2, np.array([1, 3])), {}

    def step(self, action):
        return (0, np.array([0, 1])), 1.0, True, False, {}


def test_symbol_observations_are_one_hot_float32_vectors():
    env = one_hot_observations(Symbols())
    assert env.observation_space.shape == (3 + 2 + 4,) and env.observation_space.dtype == np.float32
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [0, 0, 1, 0, 1, 0, 0, 0, 1])
    assert obs.dtype == np.float32
    box = gym.make("CartPole-v1")
    assert one_hot_observations(box) is box  # a Box observation is left as it is


def test_popgym_ids_train_on_the_gymnasium_backend():
    pytest.importorskip("popgym")
    env = make_vec_env("popgym-RepeatPreviousEasy-v0", 2, 0)
    assert env.single_observation_space.shape == (4,)  # Discrete(4), one-hot
    env.close()
    cfg = resolve("ppo", "popgym-RepeatPreviousEasy-v0", eval_episodes=1)
    assert cfg.algo.network.recurrent == "gru"


def test_config_names_a_shipped_preset_and_an_unknown_one_is_one_line():
    cfg = resolve("ppo", "Pong-v5", config_file=Path("atari-lstm"), eval_episodes=1)
    assert (cfg.algo.network.recurrent, cfg.algo.network.recurrent_size) == ("lstm", 128)
    assert cfg.env.kwargs["stack_num"] == 1 and cfg.algo.minibatch_size % cfg.algo.n_steps == 0
    shipped = r"\(or a shipped preset: atari-lstm, ippo, mappo, pqn-atari-128, pqn-atari-lstm, qr-dqn, rainbow\)"
    with pytest.raises(UsageError, match=r"^config file not found: atari-lstn " + shipped + "$"):
        resolve("ppo", "Pong-v5", config_file=Path("atari-lstn"), eval_episodes=1)
