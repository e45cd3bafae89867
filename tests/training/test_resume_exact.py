"""A run stopped by Ctrl-C and resumed equals one that was never stopped, to the bit, on the gymnasium backend:
a first Ctrl-C lets the iteration it lands in finish, and the checkpoint carries the envs mid-episode, the
random generators, a recurrent state, the reward scaler's running returns and the partial episode returns.
Where that cannot be saved, the checkpoint says why and the resume starts fresh episodes."""

import csv
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlcli.algos import resolve
from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
from rlcli.training.evaluation import Actor
from rlcli.training.train import TrainingInterrupted, train
from tests.waiting import wait_for

ITERATION = 4 * 32  # env steps of one iteration below
FEED_FORWARD = {"n_envs": 4, "n_steps": 32, "minibatch_size": 64, "n_epochs": 2, "normalize_obs": True,
                "normalize_reward": True}
SMALL_MEMORY = {"hidden": [16], "recurrent_size": 16}
RECURRENT = {"n_envs": 4, "n_steps": 32, "minibatch_size": 64, "n_epochs": 2}


def _cfg(env_id, overrides, iterations, eval_every=0, deterministic=True):
    cfg = resolve("ppo", env_id, backend="gymnasium", eval_every=eval_every, eval_episodes=2, torch_threads=1,
                  seed=5, overrides={**overrides, "steps": iterations * ITERATION})
    return cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"deterministic": deterministic})})


def _interrupt_at(monkeypatch, target, name, call, times=1):
    """Ctrl-C (``times`` of them) from inside ``target.name`` on its ``call``-th call."""
    original, calls = getattr(target, name), [0]

    def interrupted(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            for _ in range(times):
                signal.raise_signal(signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, interrupted)


def _assert_same_run(resumed, uninterrupted):
    for name in ("model.safetensors", "optimizer.safetensors"):
        a, b = load_file(resumed / name), load_file(uninterrupted / name)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert _metrics(resumed) == _metrics(uninterrupted)  # losses, returns and evaluations, row for row
    history = [json.loads((d / "eval.json").read_text())["history"] for d in (resumed, uninterrupted)]
    assert history[0] == history[1]


def _metrics(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k != "charts/SPS"} for row in csv.DictReader(f)]


def _interrupted_then_resumed(cfg, run_dir):
    with pytest.raises(TrainingInterrupted) as stopped:
        train(cfg, run_dir)
    assert stopped.value.inexact is None
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["resume"] == {"exact": True} and 0 < meta["steps"] <= cfg.algo.steps and not meta["finished"]
    return meta["steps"]


def assert_resumed_after_ctrl_c_is_exact(cfg, tmp_path, patch, env_class, call, saved_at):
    """``cfg`` trained whole, and again with a Ctrl-C in ``env_class.step_wait``'s ``call``-th call, saved at
    step ``saved_at`` and resumed: the two runs are the same to the bit. Returns the whole run's end state."""
    whole = train(cfg, tmp_path / "whole")
    with patch.context() as inner:
        _interrupt_at(inner, env_class, "step_wait", call)
        saved = _interrupted_then_resumed(cfg, tmp_path / "cut")
    assert saved == saved_at
    train(cfg, tmp_path / "cut", resume=True)
    assert json.loads((tmp_path / "cut" / "meta.json").read_text())["resumes"] == [{"step": saved, "exact": True}]
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")
    return whole


@pytest.mark.parametrize(("env_id", "overrides"), [
    ("CartPole-v1", FEED_FORWARD),
    ("CartPoleNoVel-v1", {**RECURRENT, "network": {**SMALL_MEMORY, "recurrent": "lstm"}}),
    ("CartPoleNoVel-v1", {**RECURRENT, "network": {**SMALL_MEMORY, "recurrent": "gru"}}),
    # a vector env that steps arrays (no env objects inside), its mask and privileged state in the observation
    ("MaskedChoice-v0", {**FEED_FORWARD, "env_kwargs": {"mask": "obs", "delayed": True}}),
], ids=["feed-forward", "lstm", "gru", "vector-env-masked"])
def test_ctrl_c_in_a_rollout_then_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch, env_id, overrides):
    cfg = _cfg(env_id, overrides, 12, eval_every=4 * ITERATION)
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 6th iteration's rollout, after two evaluations
        _interrupt_at(patch, GymnasiumVecEnv, "step_wait", 5 * 32 + 7)
        saved = _interrupted_then_resumed(cfg, tmp_path / "cut")
    assert saved == 6 * ITERATION  # the iteration the Ctrl-C landed in finished first
    final = train(cfg, tmp_path / "cut", resume=True)
    assert final.step == cfg.algo.steps
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert meta["resumes"] == [{"step": saved, "exact": True}]
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")


def test_ctrl_c_in_the_last_iteration_then_resume_evaluates_once_and_finishes_the_same(tmp_path, monkeypatch):
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 4, eval_every=2 * ITERATION)
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:
        _interrupt_at(patch, GymnasiumVecEnv, "step_wait", 3 * 32 + 1)
        assert _interrupted_then_resumed(cfg, tmp_path / "cut") == cfg.algo.steps  # its evaluation still due
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")  # evaluated at 2 and 4 iterations, once each


@pytest.mark.parametrize(("lost", "why"), [
    ("resume.safetensors", "resume.safetensors is missing"),  # a published run carries the model alone
    ("optimizer.safetensors", "optimizer.safetensors is missing, so the optimiser starts afresh")])
def test_a_run_without_its_resume_or_optimiser_file_resumes_with_fresh_episodes_and_says_why(tmp_path, lost, why):
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 2)
    train(cfg, tmp_path / "run")
    (tmp_path / "run" / lost).unlink()
    train(cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": 3 * ITERATION})}), tmp_path / "run",
          resume=True)
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["resumes"] == [
        {"step": 2 * ITERATION, "exact": False, "why": why}]


def test_ctrl_c_in_an_update_and_in_a_stochastic_evaluation_then_resume_is_exact(tmp_path, monkeypatch):
    """A Ctrl-C in an evaluation drops it; the resumed run evaluates again from the random generators' state
    before it, so that an evaluation drawing its actions leaves training's draws as they were."""
    from rlcli.algos.ppo import PPO
    from rlcli.training import evaluation

    cfg = _cfg("CartPole-v1", FEED_FORWARD, 9, eval_every=2 * ITERATION, deterministic=False)
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:
        _interrupt_at(patch, PPO, "update", 3)
        assert _interrupted_then_resumed(cfg, tmp_path / "cut") == 3 * ITERATION
    with monkeypatch.context() as patch:  # resumed: 5 actions into its second evaluation, after iteration 6
        evaluations, evaluate = [0], evaluation.evaluate  # what a periodic evaluation (evaluate_run) plays

        def interrupted(*args, **kwargs):
            evaluations[0] += 1
            if evaluations[0] == 2:
                _interrupt_at(patch, Actor, "__call__", 5)
            return evaluate(*args, **kwargs)

        patch.setattr(evaluation, "evaluate", interrupted)
        with pytest.raises(TrainingInterrupted):
            train(cfg, tmp_path / "cut", resume=True)
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert meta["steps"] == 6 * ITERATION and meta["resume"] == {"exact": True}
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert meta["resumes"] == [{"step": 3 * ITERATION, "exact": True}, {"step": 6 * ITERATION, "exact": True}]


def test_a_second_ctrl_c_stops_at_once_and_the_resume_starts_fresh_episodes(tmp_path, monkeypatch):
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 8)
    with monkeypatch.context() as patch:
        _interrupt_at(patch, GymnasiumVecEnv, "step_wait", 3 * 32 + 7, times=2)
        with pytest.raises(TrainingInterrupted) as stopped:
            train(cfg, tmp_path / "run")
    assert "second Ctrl-C" in stopped.value.inexact
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["steps"] == 3 * ITERATION and not meta["resume"]["exact"]  # the last finished iteration's
    assert not (tmp_path / "run" / "resume.safetensors").exists()  # the step-0 checkpoint's is gone
    train(cfg, tmp_path / "run", resume=True)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["finished"] and meta["resumes"] == [{"step": 3 * ITERATION, "exact": False,
                                                     "why": stopped.value.inexact}]


def test_sac_resumes_exactly_with_its_replay_buffer_and_says_why_not_without(tmp_path, monkeypatch):
    cfg = resolve("sac", "Pendulum-v1", backend="gymnasium", eval_every=0, eval_episodes=1, torch_threads=1,
                  seed=2, overrides={"steps": 600, "learning_starts": 200, "log_every": 100, "batch_size": 32,
                                     "actor_hidden": [32], "critic_hidden": [32]})
    train(cfg, tmp_path / "whole")
    for name, save_buffer in (("cut", True), ("no-buffer", False)):
        with monkeypatch.context() as patch:  # in the 4th iteration; the evaluation comes at the end only
            _interrupt_at(patch, GymnasiumVecEnv, "step", 350)
            with pytest.raises(TrainingInterrupted) as stopped:
                train(cfg, tmp_path / name, save_buffer=save_buffer)
        assert json.loads((tmp_path / name / "meta.json").read_text())["steps"] == 400
    assert stopped.value.inexact == "the replay buffer is not saved (train with --save-buffer)"
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")


def test_envpool_runs_say_their_resume_restarts_the_episodes(tmp_path, monkeypatch):
    pytest.importorskip("envpool")
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 3).model_copy(update={"env": _cfg(
        "CartPole-v1", FEED_FORWARD, 3).env.model_copy(update={"backend": "envpool"})})
    train(cfg, tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["resume"] == {"exact": False, "why": "envpool keeps its envs' state in C++, where it cannot be read"}
    train(cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": 4 * ITERATION})}), tmp_path / "run",
          resume=True)
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["resumes"] == [
        {"step": 3 * ITERATION, "exact": False, "why": meta["resume"]["why"]}]


def test_ctrl_c_to_the_command_then_resume_equals_an_uninterrupted_run(tmp_path):
    """The whole path: a real SIGINT to ``rlcli train`` wherever it lands, then ``rlcli train --resume``."""
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 30)
    overrides = [arg for key, value in FEED_FORWARD.items() for arg in ("-p", f"{key}={value}")]
    run = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--backend", "gymnasium",
                             "--threads", "1", "--seed", "5", "--steps", str(cfg.algo.steps), "--eval-every", "0",
                             "--eval-episodes", "2", *overrides, "--run-dir", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for(lambda: (run / "metrics.csv").is_file() and len((run / "metrics.csv").read_text().splitlines()) > 3,
             proc, 60)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130 and "(it continues exactly)" in output, output
    resumed = subprocess.run([sys.executable, "-m", "rlcli", "train", "--resume", str(run)], capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0 and "It continues exactly" in resumed.stdout, resumed.stdout + resumed.stderr
    train(cfg, tmp_path / "whole")
    _assert_same_run(run, tmp_path / "whole")
