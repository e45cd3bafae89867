"""rlcli.algos.optim: torch's fused Adam with a tensor learning rate, and its state through a checkpoint."""

import pytest
import torch

from rlcli.algos.optim import adam, set_lr
from rlcli.runs.checkpoint import load_optimizer_tensors, optimizer_tensors


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in ((7, 5), (5,), ())]


def _train(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int, lr_at=None) -> None:
    gen = torch.Generator().manual_seed(99)
    for t in range(steps):
        if lr_at is not None:
            lr_at(opt, t)
        opt.zero_grad()
        x = torch.randn(3, 7, generator=gen)
        loss = ((x @ params[0] + params[1]).tanh().sum() * params[2]).square()
        loss.backward()
        opt.step()


def test_adam_is_torchs_fused_adam_with_a_tensor_learning_rate():
    opt = adam(_params(0), lr=1e-3, eps=1e-5)
    group = opt.param_groups[0]
    assert type(opt) is torch.optim.Adam and group["fused"] and group["eps"] == 1e-5
    assert isinstance(group["lr"], torch.Tensor) and float(group["lr"]) == pytest.approx(1e-3)


def test_a_changing_learning_rate_matches_plain_adam():
    ours, theirs = _params(0), _params(0)
    _train(adam(ours, lr=1e-2, eps=1e-5), ours, 25, lambda opt, t: set_lr(opt, 1e-2 / (1 + t)))

    def plain_lr(opt, t):
        opt.param_groups[0]["lr"] = 1e-2 / (1 + t)
    _train(torch.optim.Adam(theirs, lr=1e-2, eps=1e-5), theirs, 25, plain_lr)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_state_goes_through_a_checkpoints_tensors_and_training_continues_alike():
    params, copy = _params(1), _params(1)
    opt = adam(params, lr=1e-2)
    _train(opt, params, 5)
    tensors = optimizer_tensors({"policy": opt})
    assert {k.split(".", 2)[2] for k in tensors} == {"step", "exp_avg", "exp_avg_sq"}
    with torch.no_grad():
        for c, p in zip(copy, params, strict=True):
            c.copy_(p)
    restored = adam(copy, lr=1e-2)
    load_optimizer_tensors({"policy": restored}, tensors)
    _train(opt, params, 5)
    _train(restored, copy, 5)
    for a, b in zip(params, copy, strict=True):
        assert torch.equal(a, b)
