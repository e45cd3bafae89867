"""Pins Atari preprocessing: the gymnasium backend's Python pipeline (rlcli/envs/atari.py) must behave
exactly like envpool's C++ one, and episode statistics must see the real, unclipped game."""

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from rlcli.algos.learners import EpisodeTracker  # noqa: E402
from rlcli.envs import make_vec_env  # noqa: E402

NO_NOOPS = {"noop_max": 0}  # deterministic starts on both backends (envpool gets noop_max=1)
FIELDS = ("reward", "terminated", "truncated", "raw_reward", "game_over")


def _envpool():
    pytest.importorskip("envpool")


@pytest.fixture(params=["gymnasium", "envpool"])
def backend(request):
    if request.param == "envpool":
        _envpool()
    return request.param


def _actions(n_actions: int, steps: int, n_envs: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, size=(steps, n_envs))


def _play(env, actions: np.ndarray, games: int):
    """Steps ``actions`` until env 0 has finished ``games`` real games; returns every StepResult and
    per game (raw return, clipped return, length in steps, life ends)."""
    results, per_game = [], []
    raw = clipped = 0.0
    length = life_ends = 0
    for a in actions:
        r = env.step(a)
        results.append(r)
        raw += float(r.raw_reward[0])
        clipped += float(r.reward[0])
        length += 1
        life_ends += int(r.terminated[0])
        if r.game_over[0]:
            per_game.append((raw, clipped, length, life_ends))
            raw = clipped = 0.0
            length = life_ends = 0
            if len(per_game) == games:
                return results, per_game
    raise AssertionError(f"only {len(per_game)} of {games} games ended in {len(actions)} steps")


@pytest.mark.parametrize("game, games, lives", [("Breakout-v5", 2, 5), ("Pong-v5", 1, 0),
                                                ("MsPacman-v5", 1, 3)])
def test_backends_agree_frame_for_frame(game, games, lives):
    """Without no-op starts the emulator is deterministic: a fixed action sequence gives the same
    per-game returns, lengths, life losses and the same observations, pixel for pixel, at every step.
    Breakout and Pong press FIRE on reset; MsPacman has no FIRE (envpool's single no-op frame)."""
    _envpool()
    envs = {be: make_vec_env(game, 1, 0, be, kwargs=NO_NOOPS) for be in ("envpool", "gymnasium")}
    n_actions = envs["envpool"].single_action_space.n
    assert envs["gymnasium"].single_action_space.n == n_actions
    first = {be: env.reset() for be, env in envs.items()}
    np.testing.assert_array_equal(first["envpool"], first["gymnasium"])
    actions = _actions(n_actions, 6000)
    played = {be: _play(env, actions, games) for be, env in envs.items()}
    (ep_results, ep_games), (gym_results, gym_games) = played["envpool"], played["gymnasium"]
    assert gym_games == ep_games
    assert all(g[3] == max(lives, 1) for g in ep_games)  # Pong has no lives: only the game end
    for t, (a, b) in enumerate(zip(ep_results, gym_results, strict=True)):
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(b, field), getattr(a, field), err_msg=f"{field} @ {t}")
        np.testing.assert_array_equal(b.obs, a.obs, err_msg=f"obs @ {t}")
    for env in envs.values():
        env.close()


def test_backends_agree_on_time_limit_and_options():
    """``max_episode_steps`` counts agent steps over all lives and truncates (never terminates) the
    same way; envpool's option names (episodic_life, reward_clip) work on gymnasium too."""
    _envpool()
    kwargs = {**NO_NOOPS, "max_episode_steps": 120, "episodic_life": False, "reward_clip": False}
    envs = [make_vec_env("Breakout-v5", 2, 0, be, kwargs=kwargs) for be in ("envpool", "gymnasium")]
    for env in envs:
        env.reset()
    truncations = 0
    for t, a in enumerate(_actions(4, 400, n_envs=2, seed=3)):
        ep, gy = (env.step(a) for env in envs)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(gy, field), getattr(ep, field), err_msg=f"{field} @ {t}")
        np.testing.assert_array_equal(gy.obs, ep.obs, err_msg=f"obs @ {t}")
        assert not (gy.truncated & gy.terminated).any()
        assert (gy.game_over[gy.truncated]).all()
        truncations += int(gy.truncated.sum())
    assert truncations > 0
    for env in envs:
        env.close()


@pytest.mark.parametrize("game, lives", [("Breakout-v5", 5), ("MsPacman-v5", 3)])
def test_episode_statistics_count_the_whole_unclipped_game(backend, game, lives):
    """A lost life terminates the learning episode but not the game: ``game_over`` comes once, at the
    last life, and the tracked return is the sum of the raw (unclipped) rewards over all lives."""
    env = make_vec_env(game, 1, 0, backend)  # default no-op starts
    env.reset()
    tracker = EpisodeTracker(1)
    prev_done = np.zeros(1, dtype=bool)
    raws, clipped, terminated, game_over = [], [], [], []
    for a in _actions(env.single_action_space.n, 5000, seed=1):
        r = env.step(a)
        tracker.add(r.raw_reward, ~prev_done, r.game_over)
        if prev_done[0]:  # reset row after a life loss: no reward, not done
            assert r.reward[0] == r.raw_reward[0] == 0 and not r.terminated[0] and not r.game_over[0]
        prev_done = r.terminated | r.truncated
        raws.append(float(r.raw_reward[0]))
        clipped.append(float(r.reward[0]))
        terminated.append(bool(r.terminated[0]))
        game_over.append(bool(r.game_over[0]))
        if game_over[-1]:  # the whole game ended (one env)
            break
    env.close()
    assert game_over[-1] and sum(game_over) == 1, "game_over only at the real end of the game"
    assert terminated[-1] and sum(terminated) == lives, "terminated on every life lost"
    raws_a, clipped_a = np.array(raws), np.array(clipped)
    np.testing.assert_array_equal(clipped_a, np.sign(raws_a))
    returns, lengths = tracker.drain()
    assert returns == [pytest.approx(raws_a.sum())]
    assert lengths == [len(raws) - (lives - 1)]  # the reset rows between lives are not counted
    if game == "MsPacman-v5":  # pellets are worth 10: the clipped sum is not the score
        assert raws_a.max() >= 10 and clipped_a.sum() < raws_a.sum()


def test_observations_are_four_stacked_84x84_uint8_frames(backend):
    env = make_vec_env("Breakout-v5", 2, 0, backend)
    space = env.single_observation_space
    assert space.shape == (4, 84, 84) and space.dtype == np.uint8
    obs = env.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    # the first observation of a game fills the whole stack with the same frame
    assert all(np.array_equal(obs[:, 0], obs[:, k]) for k in range(1, 4))
    r = env.step(np.array([1, 1]))
    assert r.obs.shape == (2, 4, 84, 84) and r.obs.dtype == np.uint8
    assert r.reward.dtype == r.raw_reward.dtype == np.float32
    assert r.terminated.dtype == r.game_over.dtype == bool
    np.testing.assert_array_equal(r.obs[:, :3], obs[:, 1:])  # the stack shifts by one frame
    env.close()


def test_noop_max_zero_is_accepted_by_envpool_and_means_no_noops():
    """envpool crashes on its own noop_max=0; rlcli maps it to 1 (no random no-ops), so every seed
    starts from the same frame, as on gymnasium."""
    _envpool()
    starts = [make_vec_env("Breakout-v5", 2, seed, "envpool", kwargs=NO_NOOPS).reset() for seed in (0, 7)]
    gym_start = make_vec_env("Breakout-v5", 1, 5, "gymnasium", kwargs=NO_NOOPS).reset()
    for s in starts:
        for i in range(2):
            np.testing.assert_array_equal(s[i], gym_start[0])
