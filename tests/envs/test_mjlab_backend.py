"""MJLab's tasks (MuJoCo Warp, torch tensors) through the device-resident contract: rlcli's auto-reset rule (the
final observation kept, the reset on the next step with its action ignored and reward 0), a time limit as a
truncation, tensors on the device, the observation groups as ``actor`` and the privileged ``state``, one-line
errors, and a short run through the CLI. The tests that step MJLab are skipped where it is not installed (it
pins torchvision, and so torch, so the test extra leaves it out); its first use compiles Warp's kernels, 1-2
minutes on a CPU, cached after."""

from importlib.util import find_spec

import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos import build_algo_config, hyperparams_for, resolve
from rlcli.cli import app
from rlcli.envs import ResidentEnv, make_vec_env
from rlcli.envs.registry import env_group, resolve_backend, resolve_env_id
from rlcli.envs.snapshot import EnvStateUnreadable
from rlcli.errors import UsageError

GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
needs_mjlab = pytest.mark.skipif(find_spec("mjlab") is None, reason="mjlab is not installed")
LAST_ACTION = slice(33, 45)  # Go1's actor group: velocities, gravity, joint positions and speeds, then the last action


@pytest.fixture(scope="module")
def env():
    made = make_vec_env(GO1, 3, 7, "mjlab", kwargs={"episode_length_s": 0.2}, device="cpu")  # 10 steps of 0.02 s
    yield made
    made.close()


@needs_mjlab
def test_the_time_limit_is_a_truncation_with_the_real_final_observation_and_the_next_step_ignores_its_action(env):
    assert isinstance(env, ResidentEnv) and env.device == torch.device("cpu")
    assert env.obs_layout.fields == (("actor", 48), ("state", 72)) and env.single_action_space.shape == (12,)
    first = env.reset()
    assert first.shape == (3, 120) and first.dtype == torch.float32
    assert (first[:, LAST_ACTION] == 0).all()
    action = torch.full((3, 12), 0.25)
    for t in range(10):
        result = env.step(action)
        assert all(isinstance(x, torch.Tensor) and x.device == env.device for x in result)
        assert result.obs.dtype == result.reward.dtype == torch.float32 and result.terminated.dtype == torch.bool
        assert not result.terminated.any() and bool(result.truncated.all()) == (t == 9)
        assert torch.equal(result.game_over, result.terminated | result.truncated)
    # the final observation is the episode's: it holds the action just taken, and MJLab has not reset the envs
    assert (result.obs[:, LAST_ACTION] == 0.25).all() and (env._env.episode_length_buf == 10).all()
    reset = env.step(torch.full((3, 12), 0.75))
    assert torch.equal(reset.reward, torch.zeros(3)) and not reset.game_over.any()
    # a first observation: no last action, though 0.75 was sent; and a new episode's count
    assert (reset.obs[:, LAST_ACTION] == 0).all() and (env._env.episode_length_buf == 0).all()
    after = env.step(action)
    assert (after.reward != 0).all() and (after.obs[:, LAST_ACTION] == 0.25).all()


@needs_mjlab
def test_under_random_actions_every_row_after_a_done_is_a_first_observation_with_reward_0(env):
    env.reset()
    generator = torch.Generator().manual_seed(0)
    done = torch.zeros(3, dtype=torch.bool)
    ended = 0
    for _ in range(25):
        actions = torch.rand(3, 12, generator=generator) * 6 - 3
        result = env.step(actions)
        assert torch.equal(result.reward[done], torch.zeros(int(done.sum())))
        assert not result.game_over[done].any() and (result.obs[done][:, LAST_ACTION] == 0).all()
        assert torch.equal(result.obs[~done][:, LAST_ACTION], actions[~done])
        assert torch.equal(result.game_over, result.terminated | result.truncated)
        done = result.game_over
        ended += int(done.sum())
    assert ended >= 3  # every env has met its 10-step limit at least once


@needs_mjlab
def test_its_state_cannot_be_saved_and_says_why(env):
    with pytest.raises(EnvStateUnreadable, match="MuJoCo Warp"):
        env.state()


@needs_mjlab
def test_names_errors_and_rendering_are_one_line():
    assert resolve_backend(GO1, "auto") == "mjlab" and env_group(GO1) == "mjlab"
    with pytest.raises(UsageError, match="MJLab has no task 'Mjlab-Velocity-Flat-Unitree-Go2'; did you mean "
                                         "Mjlab-Velocity-Flat-Unitree-Go1") as error:
        make_vec_env("Mjlab-Velocity-Flat-Unitree-Go2", 1, 0, "mjlab")
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="MJLab has no task 'CartPole-v1'"):
        resolve_backend("CartPole-v1", "mjlab")
    with pytest.raises(UsageError, match="takes no keyword 'episode_length'; did you mean episode_length_s"):
        make_vec_env(GO1, 1, 0, "mjlab", kwargs={"episode_length": 5})
    with pytest.raises(UsageError, match="does not render MJLab's tasks"):
        make_vec_env(GO1, 1, 0, "mjlab", render_mode="rgb_array")


@needs_mjlab
def test_a_short_run_through_the_cli_trains_and_evaluates(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", GO1, "--backend", "mjlab", "--steps", "192", "--n-envs", "4",
                                      "--threads", "1", "-p", "env_kwargs.episode_length_s=0.2",
                                      "--eval-every", "0", "--eval-episodes", "1", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "model.safetensors").exists() and (run / "eval.json").exists()


def test_without_mjlab_its_ids_say_what_to_install(monkeypatch):
    from rlcli.envs import mjlab_backend

    monkeypatch.setattr(mjlab_backend, "mjlab_available", lambda: False)
    with pytest.raises(UsageError, match=r"needs MJLab, which is not installed: pip install 'rlcli\[mjlab\]'"):
        resolve_backend(GO1, "auto")
    with pytest.raises(UsageError, match="needs MJLab"):
        make_vec_env(GO1, 1, 0, "mjlab")


def test_go1s_entry_is_mjlabs_rsl_rl_settings_with_the_critic_on_the_privileged_group():
    assert resolve_env_id(GO1) == (GO1, None) and env_group(GO1) == "mjlab"
    cfg = build_algo_config("ppo", hyperparams_for("ppo", GO1, "mjlab"))
    assert (cfg.n_steps, cfg.n_epochs, cfg.batch_size // cfg.minibatch_size) == (24, 5, 4)
    assert cfg.lr_schedule.value == "adaptive_kl" and cfg.learning_rate == 1e-3 and cfg.kl_target == 0.01
    assert cfg.network.actor_keys == ("actor",) and cfg.network.critic_keys == ("state",)
    assert cfg.network.hidden == (512, 256, 128) and cfg.normalize_obs


@needs_mjlab
def test_resolve_takes_a_smaller_rollout_with_the_entrys_minibatch_count():
    cfg = resolve("ppo", GO1, backend="mjlab", overrides={"n_envs": 4})
    assert cfg.env.backend == "mjlab" and cfg.algo.minibatch_size == 24
