import copy
import subprocess
import sys

import pytest
import torch

from rlcli.optim import Adam


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in ((7, 5), (5,), ())]


def _train(opt, params: list[torch.nn.Parameter], steps: int, lr_at=None) -> None:
    gen = torch.Generator().manual_seed(99)
    for t in range(steps):
        if lr_at is not None:
            lr_at(opt, t)
        opt.zero_grad()
        x = torch.randn(3, 7, generator=gen)
        loss = ((x @ params[0] + params[1]).tanh().sum() * params[2]).square()
        loss.backward()
        opt.step()


def _set_lr(opt, t: int) -> None:
    lr = 1e-2 / (1 + t)
    if isinstance(opt, Adam):
        opt.lr = lr
    else:
        for group in opt.param_groups:
            group["lr"] = lr


def test_same_bits_as_torch_fused_adam_with_a_changing_learning_rate():
    ours, theirs = _params(0), _params(0)
    _train(Adam(ours, lr=1e-2, eps=1e-5), ours, 25, _set_lr)
    _train(torch.optim.Adam(theirs, lr=1e-2, eps=1e-5, fused=True), theirs, 25, _set_lr)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


def test_foreach_fallback_matches_torch_adam():
    ours, theirs = _params(1), _params(1)
    opt = Adam(ours, lr=3e-3)
    opt.fused = False
    _train(opt, ours, 25)
    _train(torch.optim.Adam(theirs, lr=3e-3, foreach=False), theirs, 25)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_state_dicts_cross_between_torch_adam_and_ours():
    """A run saved by torch.optim.Adam resumes here, and the other way round, to the same bits."""
    first, second = _params(2), _params(2)
    torch_opt = torch.optim.Adam(first, lr=1e-2, fused=True)
    _train(torch_opt, first, 5)
    ours = Adam(second, lr=1e-2)
    with torch.no_grad():
        for a, b in zip(second, first, strict=True):
            a.copy_(b)
    ours.load_state_dict(torch_opt.state_dict())
    _train(torch_opt, first, 5)
    _train(ours, second, 5)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)

    third = _params(3)
    with torch.no_grad():
        for a, b in zip(third, second, strict=True):
            a.copy_(b)
    back = torch.optim.Adam(third, lr=1e-2, fused=True)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))  # torch keeps the tensors it is given
    assert all(float(state["step"]) == 10.0 for state in back.state_dict()["state"].values())
    _train(back, third, 5)
    _train(ours, second, 5)
    for a, b in zip(third, second, strict=True):
        assert torch.equal(a, b)


def test_parameters_without_gradients_are_left_alone():
    params = _params(4)
    before = params[2].detach().clone()
    opt = Adam(params, lr=1e-2)
    params[0].sum().backward()
    opt.step()
    assert torch.equal(params[2], before)
    assert float(opt.steps[0]) == 1.0 and float(opt.steps[2]) == 0.0
    assert set(opt.state_dict()["state"]) == {0}


def test_a_state_of_the_wrong_shape_is_refused():
    opt = Adam(_params(5), lr=1e-2)
    bad = {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(3), "exp_avg_sq": torch.zeros(3)}}}
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(bad)


def test_training_imports_no_compiler_stack():
    """torch.optim's constructor imports torch._dynamo (about 0.9 s a process); an agent must not."""
    code = ("import sys, torch, gymnasium as gym; from rlcli.algos.ppo import PPO, PPOConfig;"
            "a = PPO(PPOConfig(), gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, torch.device('cpu'));"
            "a.net.evaluate(torch.zeros(4, 3), torch.zeros(4, 1))[0].sum().backward(); a.optimizer.step();"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # clipped, and left as it was
def test_gradient_clipping_gives_torchs_bits(max_norm):
    ours, theirs = _params(1), _params(1)
    for params in (ours, theirs):
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 3
    ours[1].grad = None  # a parameter without a gradient is skipped, as torch skips it
    theirs[1].grad = None
    norm = Adam(ours, lr=1e-3).clip_grad_norm_(max_norm)
    torch_norm = torch.nn.utils.clip_grad_norm_(theirs, max_norm, foreach=True)
    assert torch.equal(norm, torch_norm)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)
    assert (norm > max_norm) == (max_norm == 0.5)
