"""DeepMind Control Suite tasks through envpool: their Dict observations flattened, 1000-step episodes that
only the time limit ends, the dmc group's hyperparameters, and a run that trains, evaluates and resumes."""

import json

import pytest

from rlcli.algos import resolve
from rlcli.envs.registry import env_group
from rlcli.training.train import train

pytest.importorskip("envpool")


def test_dmc_tasks_take_the_dmc_group():
    cfg = resolve("ppo", "CheetahRun-v1")
    assert env_group("CheetahRun-v1") == "dmc" and cfg.env.id == "CheetahRun-v1"
    assert cfg.algo.steps == 1_000_000 and cfg.algo.network.activation == "tanh"


def test_a_dmc_task_trains_evaluates_and_resumes(tmp_path):
    cfg = resolve("ppo", "CartpoleSwingup-v1", backend="envpool", eval_every=2_048, eval_episodes=2,
                  torch_threads=1, seed=0, overrides={"steps": 4_096, "n_envs": 2, "n_steps": 1_024})
    state = train(cfg, tmp_path / "run")
    assert state.step == 4_096
    history = json.loads((tmp_path / "run" / "eval.json").read_text())["history"]
    assert [entry["step"] for entry in history] == [2_048, 4_096]
    # episodes end only at the time limit, each step paying at most 1
    assert all(length == 1000 for entry in history for length in entry["lengths"])
    assert all(0 <= entry["mean_return"] <= 1000 for entry in history)
    more = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": 6_144})})
    assert train(more, tmp_path / "run", resume=True).step == 6_144
