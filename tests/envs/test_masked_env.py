"""MaskedChoice-v0's vector env (rlcli/envs/masked.py): the task of the per-env MaskedChoice stepped as
arrays, next-step auto-reset, the time limit, partial resets, and rlcli's gymnasium backend stepping it."""

import gymnasium as gym
import numpy as np
import pytest

from rlcli.envs import make_vec_env
from rlcli.envs.masked import LENGTH, MaskedChoice, MaskedChoiceVector


def vector(n: int, **kwargs) -> MaskedChoiceVector:
    env = gym.make_vec("MaskedChoice-v0", n, vectorization_mode="vector_entry_point", **kwargs)
    assert isinstance(env, MaskedChoiceVector)
    return env


def best_allowed(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask > 0, values, -1.0).argmax(1)


def test_the_best_allowed_action_earns_the_length_and_the_time_limit_truncates():
    env = vector(8)
    obs, info = env.reset(seed=0)
    returns, ended = np.zeros(8), []
    for _ in range(2 * (LENGTH + 1)):  # two episodes, each followed by its reset step
        assert info["action_mask"].shape == (8, 8) and info["action_mask"].any(1).all() and info["_action_mask"].all()
        obs, reward, terminated, truncated, info = env.step(best_allowed(obs, info["action_mask"]))
        returns += reward
        assert not terminated.any()
        ended += [returns[i] for i in np.flatnonzero(truncated)]
        returns[truncated] = 0.0
    assert len(ended) == 16 and ended == pytest.approx([LENGTH] * 16)


def test_a_forbidden_action_ends_the_episode_and_the_next_step_starts_a_new_one():
    env = vector(4, delayed=True)
    obs, info = env.reset(seed=3)
    mask = info["action_mask"].astype(bool)
    assert (obs["state"] == 0).all() and not mask.all(1).any()  # seed 3: every env forbids some action
    good, forbidden = best_allowed(obs["observation"], mask), (~mask).argmax(1)
    obs, reward, terminated, truncated, info = env.step(np.where(np.arange(4) < 2, good, forbidden))
    assert terminated.tolist() == [False, False, True, True] and not truncated.any()
    # delayed: an episode's rewards arrive when it ends (a forbidden first step earns nothing)
    assert reward.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert obs["state"][:2] == pytest.approx(np.full((2, 2), 1.0 / LENGTH))  # score 1 (the best), step 1
    # the next step ignores the ended envs' actions: reward 0, not done, a fresh state
    obs, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.int64))
    assert reward[2:].tolist() == [0.0, 0.0] and not terminated[2:].any() and not truncated[2:].any()
    assert (obs["state"][2:] == 0).all() and env.t.tolist()[2:] == [0, 0]


def test_a_reset_mask_starts_new_episodes_in_those_rows_only():
    env = vector(3)
    obs, info = env.reset(seed=1)
    obs, *_ = env.step(best_allowed(obs, info["action_mask"]))
    before = obs.copy()
    again, _ = env.reset(options={"reset_mask": np.array([False, True, False])})
    assert env.t.tolist() == [1, 0, 1]
    assert np.array_equal(again[[0, 2]], before[[0, 2]]) and not np.array_equal(again[1], before[1])


def test_the_vector_env_has_the_spaces_of_the_per_env_task():
    for kwargs in ({}, {"mask": "obs"}, {"delayed": True}, {"mask": "hidden", "n_actions": 5}):
        env, single = vector(2, **kwargs), MaskedChoice(**kwargs)
        assert env.single_observation_space == single.observation_space
        assert env.single_action_space == single.action_space


def test_the_gymnasium_backend_steps_the_vector_env_with_the_mask_from_info():
    env = make_vec_env("MaskedChoice-v0", 4, 0, backend="gymnasium")
    assert isinstance(env._env, MaskedChoiceVector)
    assert env.obs_layout is not None and env.obs_layout.mask_key == "action_mask"
    obs = env.reset()
    mask = obs[:, env.obs_layout.span("action_mask")]
    result = env.step(best_allowed(obs[:, :8], mask))
    assert (result.reward == 1.0).all() and not result.terminated.any()
    env.close()
    # a video renders one env: the per-env path
    single = make_vec_env("MaskedChoice-v0", 1, 0, backend="gymnasium", render_mode="rgb_array")
    assert not isinstance(single._env, MaskedChoiceVector) and single.render().shape == (64, 128, 3)
    single.close()


def test_a_bad_keyword_is_one_line_naming_the_env():
    from rlcli.errors import UsageError

    with pytest.raises(UsageError, match="environment 'MaskedChoice-v0' could not be made: ValueError: mask must be"):
        make_vec_env("MaskedChoice-v0", 2, 0, backend="gymnasium", kwargs={"mask": "nowhere"})
