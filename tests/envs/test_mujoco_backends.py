"""envpool's MuJoCo tasks against gymnasium's, through rlcli's two backends: started from the model's
initial state (no reset noise, so that the two random generators do not matter) and given the same
actions, they play the same episodes: observations, rewards (a v5 Hopper earns no healthy reward on the
step that ends it, on both), terminations and the 1,000-step time limit."""

from importlib.util import find_spec

import numpy as np
import pytest

from rlcli.envs import make_vec_env

pytestmark = pytest.mark.skipif(find_spec("envpool") is None or find_spec("mujoco") is None,
                                reason="needs envpool and mujoco")


def play_both(env_id: str, steps: int, action_scale: float, seed: int):
    """(envpool, gymnasium) StepResults of ``steps`` steps with the same uniform random actions."""
    envs = [make_vec_env(env_id, 1, 0, backend, {"reset_noise_scale": 0.0}) for backend in ("envpool", "gymnasium")]
    rng = np.random.default_rng(seed)
    shape = envs[0].single_action_space.shape
    results: tuple[list, list] = ([], [])
    first = [env.reset() for env in envs]
    assert np.array_equal(first[0], first[1])
    for _ in range(steps):
        actions = (rng.uniform(-1, 1, (1, *shape)) * action_scale).astype(np.float32)
        for env, out in zip(envs, results, strict=True):
            out.append(env.step(actions))
    for env in envs:
        env.close()
    return results


def test_hopper_v5_episodes_are_the_same_on_both_backends():
    ours, theirs = play_both("Hopper-v5", 400, 1.0, 0)
    ends = [t for t, r in enumerate(theirs) if r.terminated[0] or r.truncated[0]]
    assert len(ends) >= 5, "several episodes, and the auto-reset between them"
    for a, b in zip(ours, theirs, strict=True):
        assert np.allclose(a.obs, b.obs, rtol=1e-6, atol=1e-6)
        assert np.allclose(a.reward, b.reward, rtol=1e-6, atol=1e-6)
        assert (a.terminated == b.terminated).all() and (a.truncated == b.truncated).all()
    assert not any(r.truncated[0] for r in theirs), "random Hopper episodes end by falling"


def test_halfcheetah_v5_truncates_at_1000_steps_on_both_backends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # gymnasium's model warns of a deprecated attribute into ./MUJOCO_LOG.TXT
    ours, theirs = play_both("HalfCheetah-v5", 1001, 1.0, 0)
    for side in (ours, theirs):
        assert [t for t, r in enumerate(side) if r.truncated[0] or r.terminated[0]] == [999]
        assert side[999].truncated[0] and not side[999].terminated[0]
    # the same states at first; full random actions make HalfCheetah chaotic, so that rounding
    # differences of 1e-15 grow tenfold every ten steps or so, and its trajectories part after about 80
    for a, b in zip(ours[:40], theirs[:40], strict=True):
        assert np.allclose(a.obs, b.obs, rtol=1e-5, atol=1e-5)
        assert np.allclose(a.reward, b.reward, rtol=1e-5, atol=1e-5)
