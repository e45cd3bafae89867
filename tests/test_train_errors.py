"""What `rlcli train` does with a run that diverges, a disk that fills, a resume that names no run, and a bare
env name: one line each, and nothing lost."""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

from rlcli import checkpoint
from rlcli.cli import app
from rlcli.errors import StorageError
from rlcli.rundir import RunDir

runner = CliRunner()
NAN_ENV = '''\
import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv


class NaNRewardCartPole(CartPoleEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.nan, terminated, truncated, info


gym.register("NaNRewardCartPole-v0", entry_point=NaNRewardCartPole, max_episode_steps=200)
'''
SMALL = ["-p", "n_envs=4", "-p", "n_steps=32", "-p", "minibatch_size=64", "--eval-episodes", "2", "--threads", "1"]


@pytest.mark.filterwarnings("ignore:.*reward is a NaN value")
def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_finite_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "nan_reward_env.py").write_text(NAN_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "NaNRewardCartPole-v0", "--env-module", "nan_reward_env",
                                 "--run-dir", str(run), "--steps", "1024", *SMALL])
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: training diverged at step 128: losses/") and "is not finite" in line, line
    assert f"--resume {run} continues from it" in line and "Traceback" not in result.output
    saved = RunDir.open(run)  # the step-0 checkpoint: loadable, finite, resumable
    assert saved.steps == 0 and not saved.meta["finished"]
    assert all(torch.isfinite(t).all() for t in saved.model(resuming=True).values())
    assert saved.optimizer() is not None


def test_a_write_that_fails_is_one_line_and_leaves_the_run_loadable(tmp_path, monkeypatch):
    run = tmp_path / "run"
    stage, calls = checkpoint._stage, []

    def fills_up(path, data):
        calls.append(path)
        if path == run / "model.safetensors" and calls.count(path) > 1:  # the checkpoint after step 0
            raise StorageError(f"cannot write {path}: No space left on device")
        return stage(path, data)

    monkeypatch.setattr(checkpoint, "_stage", fills_up)
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--steps", "512",
                                 "--eval-every", "256", *SMALL])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == \
        f"error: cannot write {run / 'model.safetensors'}: No space left on device"
    saved = RunDir.open(run)
    assert saved.steps == 0 and (run / "config.yaml").is_file() and saved.model(resuming=True)
    assert not saved.history, "the evaluation whose checkpoint failed is not recorded either"
    assert not list(run.glob(".*")), "no temporary file is left behind"


def test_resume_of_a_missing_run_says_there_is_none(tmp_path):
    result = runner.invoke(app, ["train", "CartPole-v1", "--resume", str(tmp_path / "nosuchdir")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --resume {tmp_path / 'nosuchdir'}: there is no run directory there"


def test_resume_accepts_the_runs_own_env_and_algo_and_refuses_others(tmp_path):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--steps", "128", *SMALL]).exit_code == 0
    result = runner.invoke(app, ["train", "Acrobot-v1", "--resume", str(run)])
    assert result.exit_code == 2 and "drop ENV (Acrobot-v1; the run trains CartPole-v1)" in result.output
    result = runner.invoke(app, ["train", "CartPole", "--algo", "ppo", "--resume", str(run), "--steps", "256"])
    assert result.exit_code == 0, result.output
    assert RunDir.open(run).steps == 256


def test_a_bare_env_name_resolves_to_its_newest_version_and_says_so(tmp_path):
    result = runner.invoke(app, ["train", "CartPole", "--run-dir", str(tmp_path / "r"), "--steps", "128", *SMALL])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "CartPole resolves to CartPole-v1"
    assert RunDir.open(tmp_path / "r").cfg.env.id == "CartPole-v1"
    assert math.isfinite(RunDir.open(tmp_path / "r").history[-1]["mean_return"])


def test_resume_with_weights_that_do_not_fit_is_one_line(tmp_path):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--steps", "128", *SMALL]).exit_code == 0
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("- 64\n    - 64", "- 32\n    - 32"))
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "256"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"error: {run}: weights do not fit the configured network")
    assert "Traceback" not in result.output
