"""MuJoCo Playground's robots as envpool ships them (C++ on the CPU): the playground group, whose actor reads
the robot's `state` and whose critic reads `privileged_state`, and a Go1 run that trains and exports an actor
that takes the state alone."""

import json

import pytest
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.cli import app
from rlcli.envs.registry import env_group

pytest.importorskip("envpool")


def test_playground_robots_take_the_playground_group():
    for env_id in ("Go1JoystickFlatTerrain-v1", "MuJoCoPlayground/G1JoystickFlatTerrain-v1", "SpotGetup-v1"):
        assert env_group(env_id) == "playground", env_id
    network = resolve("ppo", "Go1JoystickFlatTerrain-v1").algo.network
    assert network.actor_keys == ("state",) and network.critic_keys == ("privileged_state",)
    assert network.hidden == (512, 256, 128) and network.activation == "elu"


def test_go1_trains_and_its_exported_actor_reads_the_state_alone(tmp_path):
    runner, run = CliRunner(), tmp_path / "run"
    result = runner.invoke(app, ["train", "Go1JoystickFlatTerrain-v1", "--steps", "1536", "--threads", "1",
                                 "-p", "n_envs=16", "-p", "n_steps=48", "-p", "minibatch_size=384",
                                 "--eval-every", "0", "--eval-episodes", "1", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "go1.onnx")])
    assert result.exit_code == 0, result.output
    assert "max |Δaction|" in result.output
    (obs,) = json.loads((tmp_path / "go1.onnx.json").read_text())["inputs"]
    assert obs["keys"] == [{"key": "state", "width": 48}] and obs["shape"] == ["batch", 48]
