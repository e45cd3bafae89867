"""The hand-written log-probabilities and entropies agree with torch.distributions; the CPU ELU and
the CPU Linear agree with torch's."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal
from torch.nn import functional as F

from rlcli.config import NetworkConfig
from rlcli.nets import ELU, MLP, ActorCritic, Linear, mlp_trunk

OBS = gym.spaces.Box(-1, 1, (5,), np.float32)


def test_continuous_log_prob_and_entropy_match_normal():
    net = ActorCritic(OBS, gym.spaces.Box(-2, 2, (3,), np.float32), NetworkConfig(log_std_init=-0.5))
    obs = torch.randn(7, 5)
    out = net.act(obs)
    mean = net.actor_head(net.actor_trunk(obs))
    dist = Normal(mean, net.log_std.exp())
    assert torch.allclose(out.log_probs, dist.log_prob(out.actions).sum(-1), atol=1e-5)
    log_probs, entropy, values = net.evaluate(obs, out.actions)
    assert torch.allclose(log_probs, out.log_probs, atol=1e-6)
    assert torch.allclose(entropy, dist.entropy().sum(-1), atol=1e-5)
    assert torch.allclose(values, out.values)


def test_continuous_env_actions_are_clipped_to_bounds():
    net = ActorCritic(OBS, gym.spaces.Box(-2, 2, (3,), np.float32), NetworkConfig())
    assert net.env_actions(torch.tensor([[-5.0, 0.5, 9.0]])).tolist() == [[-2.0, 0.5, 2.0]]


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2, 5])])
def test_categorical_log_prob_and_entropy_match(space):
    net = ActorCritic(OBS, space, NetworkConfig(shared=True))
    obs = torch.randn(9, 5)
    out = net.act(obs)
    logits = net.actor_head(net.actor_trunk(obs))
    nvec = [space.n] if isinstance(space, gym.spaces.Discrete) else list(space.nvec)
    dists = [Categorical(logits=p) for p in logits.split(nvec, -1)]
    expected = sum(d.log_prob(out.actions[:, i]) for i, d in enumerate(dists))
    assert torch.allclose(out.log_probs, expected, atol=1e-5)
    _, entropy, _ = net.evaluate(obs, out.actions)
    assert torch.allclose(entropy, sum(d.entropy() for d in dists), atol=1e-5)
    assert net.env_actions(out.actions).shape == ((9,) if len(nvec) == 1 else (9, len(nvec)))


def test_sampling_follows_the_distribution():
    torch.manual_seed(0)
    net = ActorCritic(OBS, gym.spaces.Discrete(3), NetworkConfig())
    with torch.no_grad():
        net.actor_head.weight.zero_()
        net.actor_head.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    actions = net.act(torch.zeros(20000, 5)).actions.squeeze(-1)
    freq = torch.bincount(actions, minlength=3).float() / 20000
    assert torch.allclose(freq, torch.tensor([0.2, 0.3, 0.5]), atol=0.015)


def test_nature_cnn_takes_uint8_frames():
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    net = ActorCritic(space, gym.spaces.Discrete(6), NetworkConfig(trunk="cnn", hidden=(512,), shared=True))
    out = net.act(torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8))
    assert out.actions.shape == (2, 1) and out.values.shape == (2,)
    assert net.critic_trunk is None


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2, 5]),
                                   gym.spaces.Box(-2, 2, (3,), np.float32)])
@pytest.mark.parametrize("deterministic", [True, False])
def test_actor_only_inference_draws_the_actions_act_draws(space, deterministic):
    """Evaluation skips the critic: the same actions as the full forward pass, from the same RNG state."""
    net = ActorCritic(OBS, space, NetworkConfig(log_std_init=-0.5))
    obs = torch.randn(16, 5)
    torch.manual_seed(3)
    full = net.act(obs, deterministic).actions
    torch.manual_seed(3)
    alone = net.policy_actions(obs, deterministic)
    assert torch.equal(alone, full)


def test_cpu_elu_matches_torchs_in_value_and_its_gradient_to_the_bit():
    x = torch.cat([torch.linspace(-30, 30, 8001),
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30, -1e-7, 88.0, -90.0, -1e4])])
    assert x.numel() >= ELU.SMALL
    assert torch.allclose(ELU()(x), F.elu(x), rtol=1e-6, atol=1e-7)
    assert torch.equal(ELU()(x[:100]), F.elu(x[:100]))  # few elements: torch's kernel itself
    assert torch.equal(ELU()(x.bfloat16()), F.elu(x.bfloat16()))  # and in bfloat16
    # the gradient is torch's own, from the input: exact even where exp(x) underflows y + 1
    x = (torch.randn(64, 128) * 8).requires_grad_()
    upstream = torch.randn(64, 128)
    (ours,) = torch.autograd.grad(ELU()(x), x, upstream)
    (torchs,) = torch.autograd.grad(F.elu(x), x, upstream)
    assert torch.equal(ours, torchs)
    x64 = (torch.randn(64, 64, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(ELU(), (x64,), fast_mode=True)


@pytest.mark.parametrize("shape", [(11, 256), (4, 64), (256, 128)])
def test_cpu_linear_matches_nn_linear(shape, monkeypatch):
    monkeypatch.setattr(Linear, "WIDE", 0)  # the faster weight gradient at every size
    torch.manual_seed(0)
    ours, theirs = Linear(*shape), torch.nn.Linear(*shape)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(300, shape[0], requires_grad=True)
    upstream = torch.randn(300, shape[1])
    outputs = []
    for layer in (ours, theirs):
        y = layer(x)
        outputs.append((y, *torch.autograd.grad(y, (x, layer.weight, layer.bias), upstream)))
    (y, gx, gw, gb), (ty, tgx, tgw, tgb) = outputs
    # the output, input and bias gradients to the bit; the weight gradient summed in another order
    assert torch.equal(y, ty) and torch.equal(gx, tgx) and torch.equal(gb, tgb)
    exact = upstream.double().t() @ x.detach().double()
    assert torch.allclose(gw.double(), exact, rtol=1e-4, atol=1e-4)
    assert (gw.double() - exact).abs().mean() <= 1.5 * (tgw.double() - exact).abs().mean()
    assert list(ours.state_dict()) == ["weight", "bias"]
    x64 = torch.randn(20, shape[0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(Linear(*shape).double(), (x64,))


@pytest.mark.parametrize("rows,faster", [(256, False), (1024, True)])
def test_the_cpu_linear_takes_the_faster_weight_gradient_from_wide_outputs_up(rows, faster):
    torch.manual_seed(0)
    ours, theirs = Linear(8, 64), torch.nn.Linear(8, 64)
    theirs.load_state_dict(ours.state_dict())
    x, upstream = torch.randn(rows, 8), torch.randn(rows, 64)
    y = ours(x)
    assert (type(y.grad_fn).__name__ == "_LinearTransposedWeightGradBackward") is faster  # 1,024 x 64 = WIDE
    grads = [torch.autograd.grad(layer(x), (layer.weight, layer.bias), upstream) for layer in (ours, theirs)]
    assert torch.equal(grads[0][1], grads[1][1])
    if faster:  # the same sums in another order
        assert torch.allclose(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-4)
    else:  # nn.Linear's own backward: every bit the same
        assert torch.equal(grads[0][0], grads[1][0])
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast keeps torch's layer at any size
        assert type(ours(x).grad_fn).__name__ != "_LinearTransposedWeightGradBackward"


def test_cpu_elu_runs_on_a_torch_without_compiler_is_exporting(monkeypatch):
    monkeypatch.delattr(torch.compiler, "is_exporting", raising=False)  # torch < 2.6
    x = torch.linspace(-5, 5, 8192)
    assert torch.allclose(ELU()(x), F.elu(x), rtol=1e-6, atol=1e-7)


def test_an_mlp_trunk_saves_loads_and_computes_as_a_sequential_of_its_layers():
    trunk, _ = mlp_trunk(3, NetworkConfig(hidden=(8, 8)))
    plain = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh())
    assert isinstance(trunk, MLP) and list(trunk.state_dict()) == list(plain.state_dict())
    trunk.load_state_dict(plain.state_dict())
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert torch.equal(trunk(x), plain(x))
