"""User stop conditions (--stop-at, --stop-when) and the torch thread policy."""

import json
import sys

import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.algos.threads import torch_threads
from rlcli.cli import app
from rlcli.training.agents import thread_plan as choose_threads

runner = CliRunner()
# 4 envs x 64 steps: one iteration is 256 env steps
TINY = ["--steps", "4096", "--n-envs", "4", "-p", "n_steps=64", "-p", "minibatch_size=128",
        "-p", "n_epochs=2", "--eval-episodes", "2"]

HOOK = '''
seen = []


def after_1000(state):
    seen.append((state.step, state.total_steps, state.run_dir.name))
    return state.step >= 1000
'''


def _meta(run):
    return json.loads((run / "meta.json").read_text())


def test_stop_at_ends_at_the_first_evaluation_that_reaches_it(tmp_path):
    run = tmp_path / "r"
    # every CartPole episode lasts at least 8 steps, so the first evaluation reaches 8
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--eval-every", "512",
                                 "--stop-at", "8", *TINY])
    assert result.exit_code == 0, result.output
    assert _meta(run)["steps"] == 512 and _meta(run)["finished"]
    history = json.loads((run / "eval.json").read_text())["history"]
    assert [h["step"] for h in history] == [512] and history[0]["mean_return"] >= 8


def test_stop_when_hook_gets_the_state_and_stops_the_run(tmp_path, monkeypatch):
    (tmp_path / "my_stop.py").write_text(HOOK)
    monkeypatch.chdir(tmp_path)  # the hook's module sits in the working directory, as a user's would
    run = tmp_path / "r"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--eval-every", "0",
                                 "--stop-when", "my_stop:after_1000", *TINY])
    assert result.exit_code == 0, result.output
    import my_stop

    assert my_stop.seen == [(s, 4096, "r") for s in (256, 512, 768, 1024)]
    assert _meta(run)["steps"] == 1024 and _meta(run)["finished"]
    # the stopped run is evaluated once, at the step it stopped
    assert json.loads((run / "eval.json").read_text())["latest"]["step"] == 1024
    # and the hook is part of the run's config, so a resume keeps it unless told otherwise
    result = runner.invoke(app, ["train", "--resume", str(run), "--stop-when", "my_stop:never"])
    assert result.exit_code == 2 and "has no attribute 'never'" in result.output
    # a saved hook that no longer loads is named as the run's, with the ways on
    (tmp_path / "my_stop.py").unlink()
    sys.modules.pop("my_stop")
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "2048"])
    assert result.exit_code == 2 and "the run's saved --stop-when 'my_stop:after_1000'" in result.output
    assert "or --stop-when '' to train on without one" in result.output
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "2048", "--stop-when", ""])
    assert result.exit_code == 0 and _meta(run)["steps"] == 2048, result.output


@pytest.mark.parametrize("spec, expected", [
    ("my_stop", "--stop-when takes module:function (e.g. mystop:reached), got 'my_stop'"),
    ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
    ("json:no_such_function", "module 'json' has no attribute 'no_such_function'"),
    ("json:__name__", "'__name__' is a str, not a function"),
])
def test_bad_stop_hook_is_one_line_exit_2(spec, expected, tmp_path):
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(tmp_path / "r"), "--stop-when", spec])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and expected in result.output
    assert not (tmp_path / "r").exists()  # failed before building anything


def _cfg(algo, env_id, **run):
    return resolve(algo, env_id, **run)


def test_thread_policy(monkeypatch):
    monkeypatch.setattr("rlcli.training.agents.available_cores", lambda: 2)
    assert choose_threads(_cfg("sac", "Pendulum-v1")) == (2, 2)  # update-bound: every core
    # acting leaves cores to the envs; a 64-wide update gains nothing from a second thread
    assert choose_threads(_cfg("ppo", "CartPole-v1")) == (1, 1)
    assert choose_threads(resolve("ppo", "Hopper-v5")) == (1, 2)  # 2,048 rows of 256: every core
    assert choose_threads(_cfg("ppo", "CartPole-v1", torch_threads=3)) == (3, 3)
    pong = resolve("ppo", "Pong-v5")
    assert choose_threads(pong) == (2, 2)  # a CNN's acting is convolutions over every env's frames
    # value-based: a CNN never switches counts (a switch cost ~9 ms a gradient step), an MLP's one-row
    # acting stays on one thread and its update takes every core once a batch is large enough to share
    assert choose_threads(resolve("dqn", "Pong-v5")) == choose_threads(resolve("pqn", "Pong-v5")) == (2, 2)
    assert choose_threads(resolve("dqn", "CartPole-v1")) == (1, 2)  # 64 rows of 256
    assert choose_threads(resolve("dqn", "CartPole-v1", overrides={"hidden": [64, 64]})) == (1, 1)
    assert choose_threads(resolve("pqn", "CartPole-v1")) == (1, 2)
    # an LSTM of 64 updates on one thread; of 256, on every core
    assert choose_threads(_cfg("ppo", "CartPoleNoVel-v1")) == (1, 1)
    wide = {"network": {"recurrent": "lstm", "recurrent_size": 256}}
    assert choose_threads(resolve("ppo", "CartPoleNoVel-v1", overrides=wide)) == (1, 2)
    # where auto resolves to a GPU, the update runs there: no CPU rule applies
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert choose_threads(_cfg("ppo", "CartPoleNoVel-v1")) == (1, 2)
    assert choose_threads(pong) == (1, 2)
    monkeypatch.setattr("rlcli.training.agents.available_cores", lambda: 64)
    assert choose_threads(_cfg("sac", "Pendulum-v1")) == (16, 16)


def test_torch_threads_context_restores_the_count():
    before = torch.get_num_threads()
    with torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
