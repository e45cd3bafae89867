"""MuJoCo Playground's MJX tasks on JAX's CPU device, through the device-resident contract: rlcli's auto-reset
rule (the final observation kept, the reset on the next step, fresh first states), tensors shared with JAX, a
rollout that reads nothing back to the host, a state that a checkpoint restores exactly, and a run that
resumes after Ctrl-C to the bit."""

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_playground")

from rlcli.algos import resolve  # noqa: E402
from rlcli.envs import ResidentEnv, make_vec_env  # noqa: E402
from rlcli.envs.host import HostArrays  # noqa: E402
from rlcli.envs.playground_backend import PlaygroundVecEnv, playground_name  # noqa: E402
from rlcli.envs.registry import env_group, resolve_backend  # noqa: E402
from rlcli.errors import UsageError  # noqa: E402
from tests.envs.test_torch_backend import rollout_host_reads  # noqa: E402
from tests.training.test_resume_exact import ITERATION, assert_resumed_after_ctrl_c_is_exact  # noqa: E402

LIMIT = {"episode_length": 12}


@pytest.fixture(scope="module")
def env():
    made = make_vec_env("CartpoleBalance-v1", 4, 7, "playground", kwargs=LIMIT, device="cpu")
    assert isinstance(made, ResidentEnv) and made.device == torch.device("cpu")
    return made


def test_the_time_limit_is_a_truncation_with_the_real_final_observation_and_the_next_step_resets(env):
    first = env.reset()
    assert first.shape == (4, 5) and first.dtype == torch.float32
    pushes = torch.ones(4, 1)
    seen = [first]
    for t in range(12):
        result = env.step(pushes)
        assert not result.terminated.any() and bool(result.truncated.all()) == (t == 11)
        assert torch.equal(result.game_over, result.terminated | result.truncated)
        seen.append(result.obs)
    # the final observation continues the episode: the cart, pushed for 12 steps, moved on from the step before
    assert (seen[-1] - seen[-2]).abs().max() < 0.5 and not torch.allclose(seen[-1], first)
    reset = env.step(pushes)
    assert torch.equal(reset.reward, torch.zeros(4)) and not (reset.terminated | reset.truncated).any()
    # a new first state, drawn with a new key: not the first episode's
    assert not torch.allclose(reset.obs, first) and (reset.obs - first).abs().max() < 1.0
    after = env.step(pushes)
    assert (after.reward > 0).all()


def test_a_step_shares_jaxs_memory_and_async_then_wait_is_step(env):
    env.reset()
    snapshot = env.state()
    rng = np.random.default_rng(0)
    actions = [torch.from_numpy(rng.uniform(-1, 1, (4, 1)).astype(np.float32)) for _ in range(20)]
    stepped = [env.step(a) for a in actions]
    env.load_state(snapshot)
    for a, expected in zip(actions, stepped, strict=True):
        env.step_async(a)
        waited = env.step_wait()
        for x, y in zip(waited, expected, strict=True):
            assert torch.equal(x, y)
    import jax.numpy as jnp

    shared = jnp.arange(3.0)
    assert torch.from_dlpack(shared).data_ptr() == shared.unsafe_buffer_pointer()


def test_envs_of_one_task_config_and_size_share_one_trace_and_keep_their_own_seeds(env):
    from rlcli.envs.playground_backend import batch_of

    env.step(torch.zeros(4, 1))
    batch = env._batch
    other = PlaygroundVecEnv("CartpoleBalance", 4, 8, kwargs=dict(LIMIT))
    other.step(torch.zeros(4, 1))
    assert other._batch is batch and (batch.reset._cache_size(), batch.step._cache_size()) == (1, 1)  # no new trace
    assert not torch.allclose(other.reset(), env.reset())  # the seed is the reset's argument, not traced in
    assert batch_of("CartpoleBalance", {"impl": "jax", **LIMIT}, 2, env._jax_device) is not batch


def test_a_saved_state_mid_episode_steps_on_exactly_as_the_envs_did(env):
    env.reset()
    for _ in range(5):
        env.step(torch.full((4, 1), 0.3))
    saved = env.state()
    later = [env.step(torch.full((4, 1), -0.5)) for _ in range(10)]  # through a truncation and its reset
    assert any(bool(r.truncated.any()) for r in later)
    env.reset()
    env.load_state(saved)
    for expected in later:
        again = env.step(torch.full((4, 1), -0.5))
        assert all(torch.equal(x, y) for x, y in zip(again, expected, strict=True))


def test_a_ppo_rollout_on_it_reads_nothing_back_to_the_host(monkeypatch, env):
    reads, buffer, _ = rollout_host_reads(env, monkeypatch, n_steps=30)
    assert reads == [] and buffer.dones.any()


def test_ctrl_c_in_a_rollout_then_resume_equals_an_uninterrupted_run_evaluated_through_numpy(tmp_path,
                                                                                            monkeypatch):
    small = {"steps": 4 * ITERATION, "n_envs": 4, "n_steps": 32, "minibatch_size": 64, "n_epochs": 1,
             "env_kwargs": {"episode_length": 50}}
    cfg = resolve("ppo", "CartpoleBalance", backend="playground", torch_threads=1, seed=1, eval_every=0,
                  eval_episodes=2, overrides=small)
    assert cfg.algo.normalize_obs and cfg.algo.clip_value == 0.2  # the dmc group's entry
    whole = assert_resumed_after_ctrl_c_is_exact(cfg, tmp_path, monkeypatch, PlaygroundVecEnv, 2 * 32 + 5,
                                                 3 * ITERATION)
    assert whole.eval_return is not None and 0 < whole.eval_return <= 50  # evaluated through numpy
    env = make_vec_env("CartpoleBalance", 2, 0, "playground", kwargs={"episode_length": 5})
    assert isinstance(env, HostArrays) and isinstance(env.step(np.zeros((2, 1), np.float32)).obs, np.ndarray)


def test_its_names_are_playgrounds_and_envpools_and_auto_picks_it_only_for_its_own():
    assert [playground_name(n) for n in ("CartpoleBalance", "CartpoleBalance-v1", "Hopper-v5",
                                         "MuJoCoPlayground/Go1JoystickFlatTerrain-v1")] == [
        "CartpoleBalance", "CartpoleBalance", None, "Go1JoystickFlatTerrain"]
    assert resolve_backend("CartpoleBalance", "auto") == "playground"
    assert resolve_backend("CartpoleBalance-v1", "playground") == "playground"
    assert env_group("CartpoleBalance") == "dmc" and env_group("Go1JoystickFlatTerrain") == "playground"


def test_unknown_tasks_and_rendering_are_one_line():
    with pytest.raises(UsageError, match="MuJoCo Playground has no task 'Hopper-v5'"):
        make_vec_env("Hopper-v5", 1, 0, "playground")
    with pytest.raises(UsageError, match="does not render MuJoCo Playground's tasks"):
        make_vec_env("CartpoleBalance", 1, 0, "playground", render_mode="rgb_array")


def test_a_menagerie_robot_is_made_from_envpools_copy_when_playground_has_none(tmp_path, monkeypatch):
    from etils import epath
    from mujoco_playground._src import mjx_env

    from rlcli.envs import playground_backend
    from rlcli.envs.playground_backend import envpool_menagerie_robots, load_task, menagerie_from_envpool

    robots = envpool_menagerie_robots()
    if "unitree_go1" not in robots:
        pytest.skip("envpool's MuJoCo Playground assets are not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(playground_backend, "_playgrounds_menagerie", None)
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", epath.Path(tmp_path / "not-cloned"))
    task = load_task("Go1JoystickFlatTerrain", {"impl": "jax"})
    assert task.action_size == 12 and dict(task.observation_size) == {"state": (48,), "privileged_state": (123,)}
    folder = tmp_path / "rlcli" / "mujoco_menagerie"
    assert mjx_env.MENAGERIE_PATH == epath.Path(folder) and not (tmp_path / "not-cloned").exists()
    assert {p.name: p.readlink() for p in folder.iterdir()} == robots  # a link to each robot, nothing copied
    menagerie_from_envpool()  # again: the links are there, nothing changes
    assert sorted(p.name for p in folder.iterdir()) == sorted(robots)


def test_playgrounds_own_menagerie_stays_its_source_and_serves_what_envpools_copy_lacks(tmp_path, monkeypatch):
    from etils import epath
    from mujoco_playground import registry
    from mujoco_playground._src import mjx_env

    from rlcli.envs import playground_backend
    from rlcli.envs.playground_backend import envpool_menagerie_robots, load_task, menagerie_from_envpool

    if not envpool_menagerie_robots():
        pytest.skip("envpool's MuJoCo Playground assets are not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(playground_backend, "_playgrounds_menagerie", None)
    own = tmp_path / "own"
    own.mkdir()
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", epath.Path(own))
    menagerie_from_envpool()
    assert mjx_env.MENAGERIE_PATH == epath.Path(own) and not (tmp_path / "rlcli").exists()

    # no copy of Playground's: envpool's is used, and a robot it lacks is looked for in Playground's own place
    playgrounds = epath.Path(tmp_path / "not-cloned")
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", playgrounds)
    tried = []

    def load(name, config_overrides):
        tried.append(mjx_env.MENAGERIE_PATH)
        if mjx_env.MENAGERIE_PATH != playgrounds:
            raise FileNotFoundError("robots/absent.xml")
        return "made from Playground's own Menagerie"

    monkeypatch.setattr(registry, "load", load)
    assert load_task("SomeRobotTask", {}) == "made from Playground's own Menagerie"
    assert tried == [epath.Path(tmp_path / "rlcli" / "mujoco_menagerie"), playgrounds]
    assert mjx_env.MENAGERIE_PATH == tried[0]  # envpool's copy stays the source of the robots it has


def test_a_cache_rlcli_cannot_write_leaves_playground_as_it_is(tmp_path, monkeypatch):
    from etils import epath
    from mujoco_playground._src import mjx_env

    from rlcli.envs import playground_backend
    from rlcli.envs.playground_backend import envpool_menagerie_robots, menagerie_from_envpool

    if not envpool_menagerie_robots():
        pytest.skip("envpool's MuJoCo Playground assets are not installed")
    (tmp_path / "rlcli").write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(playground_backend, "_playgrounds_menagerie", None)
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", epath.Path(tmp_path / "not-cloned"))
    menagerie_from_envpool()
    assert mjx_env.MENAGERIE_PATH == epath.Path(tmp_path / "not-cloned")
