"""Subnormal floats flushed to zero while training (``flush_denormal``, on by default): on during the run,
off after it and when it is set false; Adam's moments of weights whose gradient stays zero decay into the
subnormal range, where each operation on them costs the CPU about ten times a normal one. Flushing them
changes no trained weight: the weights of a DQN run are the same bits both ways."""

import pytest
import torch
from safetensors.torch import load_file

from rlcli.algos import resolve
from rlcli.training.train import train

SUBNORMAL = 1e-40  # below float32's smallest normal, 1.18e-38
TINY = torch.finfo(torch.float32).tiny


def flushed_now() -> bool:
    return float(torch.tensor(SUBNORMAL) * 1.0) == 0.0


def run(tmp_path, name: str, flush: bool, seen: list[bool]):
    cfg = resolve("dqn", "CartPole-v1", overrides={"steps": 3000, "learning_starts": 500, "log_every": 500,
                                                     "flush_denormal": flush},
                  seed=3, device="cpu", torch_threads=1)
    train(cfg, tmp_path / name, [lambda state: seen.append(flushed_now()) and False])
    return load_file(tmp_path / name / "model.safetensors"), load_file(tmp_path / name / "optimizer.safetensors")


def test_flushing_holds_during_training_alone_and_changes_no_weight(tmp_path):
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU has no flush-to-zero flag")
    assert not flushed_now()
    during: list[bool] = []
    flushed_weights, flushed_moments = run(tmp_path, "flushed", True, during)
    assert during and all(during) and not flushed_now()  # on in every iteration, off after the run
    kept: list[bool] = []
    kept_weights, kept_moments = run(tmp_path, "kept", False, kept)
    assert kept and not any(kept)
    assert all(torch.equal(flushed_weights[k], kept_weights[k]) for k in kept_weights)
    subnormals = sum(int(((m != 0) & (m.abs() < TINY)).sum()) for m in kept_moments.values() if m.is_floating_point())
    assert subnormals > 1000  # 1,000 gradient steps leave tens of thousands of Adam's moments subnormal
    for key, moment in kept_moments.items():  # the moments differ only where one side kept a subnormal
        subnormal = (moment != 0) & (moment.abs() < TINY)
        assert torch.equal(flushed_moments[key][~subnormal], moment[~subnormal])
        assert not ((flushed_moments[key] != 0) & (flushed_moments[key].abs() < TINY)).any()
