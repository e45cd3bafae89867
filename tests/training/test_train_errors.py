"""What `rlcli train` does with a run that diverges, a disk that fills, a resume that names no run, and a bare
env name: one line each, and nothing lost."""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.errors import StorageError
from rlcli.runs import checkpoint
from rlcli.runs.rundir import RunDir

runner = CliRunner()
HUGE_REWARD_ENV = '''\
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class HugeRewardCartPole(CartPoleEnv):
    """Finite rewards whose squares overflow float32: the value loss becomes infinite."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, 3.0e38, terminated, truncated, info


gym.register("HugeRewardCartPole-v0", entry_point=HugeRewardCartPole, max_episode_steps=200)
'''
NON_FINITE_ENV = '''\
import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv, PendulumEnv


def non_finite_at(base):
    class NonFinite(base):
        """Returns a NaN or an infinity in one observation column, or as the reward, from its ``at``-th call
        of step() or reset() on: a fixed row of the run, whatever its episodes' lengths."""

        def __init__(self, at=100, column=None, value=np.nan, **kwargs):
            super().__init__(**kwargs)
            self.count, self.at, self.column, self.value = 0, at, column, value

        def reset(self, **kwargs):
            self.count += 1
            return super().reset(**kwargs)

        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            self.count += 1
            if self.count >= self.at:
                if self.column is None:
                    reward = self.value
                else:
                    obs = obs.copy()
                    obs[self.column] = self.value
            return obs, reward, terminated, truncated, info

    return NonFinite


gym.register("NonFiniteCartPole-v0", entry_point=non_finite_at(CartPoleEnv), max_episode_steps=500)
gym.register("NonFinitePendulum-v0", entry_point=non_finite_at(PendulumEnv), max_episode_steps=200)
'''
SMALL = ["-p", "n_envs=4", "-p", "n_steps=32", "-p", "minibatch_size=64", "--eval-episodes", "2", "--threads", "1"]


def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_finite_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "huge_reward_env.py").write_text(HUGE_REWARD_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "HugeRewardCartPole-v0", "--env-module", "huge_reward_env",
                                 "--run-dir", str(run), "--steps", "1024", *SMALL])
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: training diverged at step 128: losses/") and "is not finite" in line, line
    assert f"is kept in {run} (rlcli eval {run} measures it)" in line and "Traceback" not in result.output
    assert "A resume repeats the same steps exactly: train a new run with other settings" in line
    saved = RunDir.open(run)  # the step-0 checkpoint: loadable, finite, resumable
    assert saved.steps == 0 and not saved.meta["finished"]
    assert all(torch.isfinite(t).all() for t in saved.model(resuming=True).values())
    assert saved.optimizer() is not None


@pytest.mark.filterwarnings("ignore:.*is a NaN value", "ignore:.*is an infinite value")
@pytest.mark.parametrize(("algo", "env_id", "kwargs", "what", "step"), [
    # the calls before a run's first step are the resets gymnasium makes: 2 with 4 envs, so row 97 ends at
    # step 392 (an observation is named with the step that returned it); 1 with one env, so row 298 is step 299
    ("ppo", "NonFiniteCartPole-v0", "{}", "reward", 392),
    ("ppo", "NonFiniteCartPole-v0", "{column: 2, value: .inf}", "observation column 2", 392),
    ("sac", "NonFinitePendulum-v0", "{at: 300, column: 1}", "observation column 1", 299),
])
def test_a_non_finite_env_output_is_named_as_the_envs_fault(tmp_path, monkeypatch, algo, env_id, kwargs, what,
                                                            step):
    (tmp_path / "non_finite_env.py").write_text(NON_FINITE_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    sizes = SMALL if algo == "ppo" else ["-p", "learning_starts=250", "-p", "batch_size=32", "-p", "log_every=100",
                                         "--eval-episodes", "1", "--threads", "1"]
    result = runner.invoke(app, ["train", env_id, "--algo", algo, "--env-module", "non_finite_env", "--run-dir",
                                 str(run), "--steps", "2048", "-p", f"env_kwargs={kwargs}", *sizes])
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line == (f"error: the environment {env_id} returned a non-finite {what} at step {step:,}; training "
                    f"stopped, and its last checkpoint (step {RunDir.open(run).steps:,}) is kept in {run}. Check "
                    "the env's step() and reset(): a resume meets the same value"), line
    saved = RunDir.open(run)
    assert saved.steps < step and all(torch.isfinite(t).all() for t in saved.model(resuming=True).values())


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
