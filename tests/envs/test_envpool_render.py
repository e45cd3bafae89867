"""Videos of the MuJoCo tasks only envpool has (DM Control, MuJoCo Playground's robots): envpool's C++ MuJoCo
renders them off-screen into a context rlcli makes current, and ``rlcli play --video`` records them."""

import os

import numpy as np
import pytest
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.envs import RenderedEnv, make_vec_env
from rlcli.errors import UsageError

pytest.importorskip("envpool")
os.environ.setdefault("MUJOCO_GL", "egl")  # as ``rlcli play`` sets it before any env is made
runner = CliRunner()


def test_an_envpool_only_task_renders_its_frames_and_they_move():
    env = make_vec_env("CartpoleSwingup-v1", 1, seed=0, render_mode="rgb_array", kwargs={"max_episode_steps": 20})
    assert isinstance(env, RenderedEnv) and env.backend == "envpool"
    env.reset()
    first = env.render()
    for _ in range(10):
        env.step(np.ones((1, 1), np.float32))
    later = env.render()
    assert first.shape == later.shape and first.shape[-1] == 3 and first.dtype == np.uint8
    assert first.std() > 0 and not np.array_equal(first, later)  # a picture of a moving cart
    assert env.render_fps == 50  # DM Control's spec states no control step
    env.close()


def test_a_robot_renders_at_its_control_rate():
    env = make_vec_env("Go1JoystickFlatTerrain-v1", 1, seed=0, render_mode="rgb_array")
    env.reset()
    assert env.render().std() > 0 and env.render_fps == 50  # ctrl_dt 0.02 s
    env.close()


def test_a_window_is_refused_in_one_line():
    with pytest.raises(UsageError, match=r"renders off-screen only: record it with --video FILE"):
        make_vec_env("CartpoleSwingup-v1", 1, seed=0, render_mode="human")


def test_play_records_an_envpool_only_task(tmp_path):
    import imageio.v2 as imageio

    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "CartpoleSwingup-v1", "--steps", "512", "--n-envs", "2", "--threads", "1",
                                 "--run-dir", str(run), "-p", "n_steps=256", "-p", "minibatch_size=256",
                                 "-p", "env_kwargs={max_episode_steps: 30}", "--eval-every", "0"])
    assert result.exit_code == 0, result.output
    video = tmp_path / "swingup.mp4"
    result = runner.invoke(app, ["play", str(run), "--video", str(video)])
    assert result.exit_code == 0, result.output
    assert "episode 1: return" in result.output and "length 30" in result.output
    with imageio.get_reader(str(video)) as reader:
        frames = [frame for frame in reader]  # its length is unknown (inf) to list()
    assert len(frames) >= 30 and frames[0].shape[-1] == 3 and frames[0].std() > 0


def test_a_machine_without_an_off_screen_context_is_told_in_one_line(monkeypatch):
    import mujoco

    from rlcli.envs import envpool_backend

    def no_display(*_):
        raise RuntimeError("cannot initialize EGL display")

    monkeypatch.setattr(envpool_backend, "_gl_context", None)
    monkeypatch.setattr(mujoco, "GLContext", no_display)
    with pytest.raises(UsageError, match=r"no off-screen OpenGL context for envpool's renderer \(MUJOCO_GL=egl; "
                                         r"egl needs libEGL, osmesa libOSMesa\): RuntimeError: cannot initialize EGL"):
        make_vec_env("CartpoleSwingup-v1", 1, seed=0, render_mode="rgb_array")
