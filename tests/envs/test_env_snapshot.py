"""Gymnasium envs saved as data and loaded into fresh ones step on exactly as the originals; what cannot be
saved, or does not fit, is said, and nothing is changed."""

import random
from collections import OrderedDict, deque

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcli.envs import make_vec_env
from rlcli.envs.snapshot import EnvStateUnreadable, capture, restore


@pytest.mark.parametrize("env_id", ["CartPole-v1", "CartPoleNoVel-v1", "CartPoleNoVelState-v1", "Hopper-v5", "Ant-v5"])
def test_an_env_snapshot_loaded_into_fresh_envs_steps_on_the_same(env_id):
    """Ant reads a body's position, which MuJoCo derives from the state, before it steps: the snapshot keeps
    the derived arrays too. CartPoleNoVelState-v1's observations are dicts; CartPoleNoVel-v1 steps arrays,
    each env's generator among them."""
    if env_id in ("Hopper-v5", "Ant-v5"):
        pytest.importorskip("mujoco")
    envs = make_vec_env(env_id, 3, 0, "gymnasium")
    envs.reset()
    rng = np.random.default_rng(0)
    space = envs.single_action_space

    def actions():
        if isinstance(space, gym.spaces.Discrete):
            return rng.integers(0, space.n, 3)
        return rng.uniform(space.low, space.high, (3, *space.shape)).astype(np.float32)

    for _ in range(30):
        envs.step(actions())
    fresh = make_vec_env(env_id, 3, 99, "gymnasium")
    fresh.reset()
    fresh.load_state(envs.state())
    for _ in range(200):  # through episode ends and auto-resets
        step = actions()
        for a, b in zip(envs.step(step), fresh.step(step), strict=True):
            assert np.array_equal(a, b)


def test_a_snapshot_fits_only_envs_like_those_it_was_taken_from():
    saved = make_vec_env("CartPole-v1", 2, 0, "gymnasium")
    saved.reset()
    for other in (make_vec_env("CartPole-v1", 3, 0, "gymnasium"), make_vec_env("PendulumNoVel-v1", 2, 0, "gymnasium")):
        other.reset()
        before = other.state()
        with pytest.raises(EnvStateUnreadable, match="the saved envs were 2 of TimeLimit < OrderEnforcing"):
            other.load_state(saved.state())
        assert other.state().values == before.values  # nothing changed
        assert torch.equal(other.state().tensors["bytes"], before.tensors["bytes"])


def test_a_snapshot_of_a_vector_env_that_steps_arrays_fits_only_as_many_envs():
    saved, other = (make_vec_env("CartPoleNoVel-v1", count, 0, "gymnasium") for count in (3, 2))
    saved.reset(), other.reset()
    before = other.state()
    with pytest.raises(EnvStateUnreadable, match="the saved envs were 3, these are 2"):
        other.load_state(saved.state())
    assert other.state().values == before.values


def test_a_snapshot_of_a_vector_env_that_steps_arrays_fits_only_that_kind_of_vector_env():
    arrays, objects = (make_vec_env(env_id, 2, 0, "gymnasium") for env_id in ("MaskedChoice-v0", "CartPole-v1"))
    arrays.reset(), objects.reset()
    with pytest.raises(EnvStateUnreadable, match="the saved envs were a MaskedChoiceVector, this is a SyncVectorEnv"):
        objects.load_state(arrays.state())
    with pytest.raises(EnvStateUnreadable, match="the saved envs were a SyncVectorEnv, this is a MaskedChoiceVector"):
        arrays.load_state(objects.state())


def test_state_that_is_not_data_is_named():
    class Holder(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.rng = random.Random(0)  # its state is not plain data to the walker

    envs = gym.vector.SyncVectorEnv([lambda: Holder(gym.make("CartPole-v1"))])
    with pytest.raises(EnvStateUnreadable, match=r"^Holder.rng \(Random\) cannot be saved as data$"):
        capture(envs)


class Kept(gym.Wrapper):
    """A wrapper holding one of each kind of data the walker saves, and configuration it passes over."""

    def __init__(self, env):
        super().__init__(env)
        self.values = self.made()
        self.settings = {"scale": 2.0, "transform": np.sqrt}  # holds a callable: configuration, passed over

    @staticmethod
    def made():
        return {"list": [1, 2.5, None, "a"], "tuple": (np.float32(0.1), np.int64(7), np.bool_(True)),
                "deque": deque([np.zeros(2), np.ones(2)], maxlen=3), "ordered": OrderedDict(b=1, a=(2, 3)),
                "mt": np.random.Generator(np.random.MT19937(3)), "legacy": np.random.RandomState(4),
                "grid": np.arange(6, dtype=np.uint16).reshape(2, 3)}


def test_each_kind_of_data_comes_back_as_it_was():
    envs = gym.vector.SyncVectorEnv([lambda: Kept(gym.make("CartPole-v1"))])
    envs.reset(seed=0)
    kept = envs.envs[0]
    saved = capture(envs)
    expected = Kept.made()
    kept.values = {"list": [], "tuple": (), "deque": deque(), "ordered": {}, "mt": np.random.default_rng(0),
                   "legacy": np.random.RandomState(0), "grid": np.zeros(1)}
    kept.settings = "untouched"
    restore(envs, saved)
    assert kept.settings == "untouched"
    values = kept.values
    assert values.keys() == expected.keys() and type(values["ordered"]) is OrderedDict
    assert values["list"] == expected["list"] and values["ordered"] == expected["ordered"]
    assert [(type(v), v) for v in values["tuple"]] == [(type(v), v) for v in expected["tuple"]]
    assert values["deque"].maxlen == 3 and all(map(np.array_equal, values["deque"], expected["deque"]))
    assert values["grid"].dtype == np.uint16 and np.array_equal(values["grid"], expected["grid"])
    assert values["mt"].random() == expected["mt"].random()
    assert values["legacy"].random_sample() == expected["legacy"].random_sample()
