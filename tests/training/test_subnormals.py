"""Subnormal floats flushed to zero in a training process (``flush_denormal``, on by default): from the run's
set-up on, or kept where it is set false or where a run saved before the setting resumes. Adam's moments of
weights whose gradient stays zero decay into the subnormal range, where each operation on them costs the CPU
about ten times a normal one. Flushing them changes no trained weight here: the weights of a DQN run on two
threads are the same bits both ways."""

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlcli.algos import resolve, run_config
from rlcli.training.train import train

TINY = torch.finfo(torch.float32).tiny
DQN = {"steps": 3000, "learning_starts": 500, "log_every": 500}


def flushed_now() -> bool:
    return float(torch.tensor(1e-40) * 1.0) == 0.0  # 1e-40: below float32's smallest normal


def subnormals(tensors: dict[str, torch.Tensor]) -> int:
    return sum(int(((t != 0) & (t.abs() < TINY)).sum()) for t in tensors.values() if t.is_floating_point())


@pytest.fixture(autouse=True)
def kept_after():
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU has no flush-to-zero flag")
    yield
    torch.set_flush_denormal(False)  # the process's setting: the next test starts as pytest did


def test_the_flag_holds_from_set_up_as_the_run_says(tmp_path):
    for flush in (True, False):
        cfg = resolve("dqn", "CartPole-v1", overrides={**DQN, "steps": 1000, "flush_denormal": flush}, seed=3,
                      device="cpu", torch_threads=1)
        seen: list[bool] = []
        train(cfg, tmp_path / str(flush), [lambda state, seen=seen: seen.append(flushed_now()) and False])
        assert seen and set(seen) == {flush}  # in every iteration


def test_a_run_saved_before_the_setting_keeps_subnormals_when_resumed():
    saved = resolve("dqn", "CartPole-v1", overrides=DQN).model_dump(mode="json")
    assert saved["algo"].pop("flush_denormal") is True  # new runs flush
    assert run_config(saved).algo.flush_denormal is False


def test_two_threads_of_a_training_process_flush_from_its_set_up(tmp_path):
    """``rlcli train`` in a process of its own with two torch threads: no subnormal moment survives."""
    moments = {}
    for flush in ("true", "false"):
        run = tmp_path / flush
        subprocess.run([sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--algo", "dqn", "--seed", "3",
                        "--threads", "2", "--eval-every", "0", "--run-dir", str(run), "-p", "flush_denormal=" + flush,
                        *[f"-p{key}={value}" for key, value in DQN.items()]], check=True, capture_output=True)
        moments[flush] = (load_file(run / "optimizer.safetensors"), load_file(run / "model.safetensors"))
    (flushed_moments, flushed_weights), (kept_moments, kept_weights) = moments["true"], moments["false"]
    assert subnormals(kept_moments) > 1000 and subnormals(flushed_moments) == 0
    assert all(torch.equal(flushed_weights[k], kept_weights[k]) for k in kept_weights)
    for key, moment in kept_moments.items():  # the moments differ only where one side kept a subnormal
        normal = (moment == 0) | (moment.abs() >= TINY)
        assert torch.equal(flushed_moments[key][normal], moment[normal])
