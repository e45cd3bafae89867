"""The hand-written log-probabilities and entropies agree with torch.distributions; the CPU ELU and
the CPU Linear agree with torch's."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from rlcli.config import NetworkConfig
from rlcli.nets.models import ActorCritic, mlp_trunk

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


@pytest.mark.parametrize("channels", [4, 1])
def test_frames_reach_the_cnn_scaled_in_the_layout_two_passes_used_to_give(channels):
    """Frames scaled to float32, then laid out channels-last (a single channel keeps NCHW's strides): the
    same values and strides, so the same convolution outputs, to the bit."""
    space = gym.spaces.Box(0, 255, (channels, 84, 84), np.uint8)
    net = ActorCritic(space, gym.spaces.Discrete(6), NetworkConfig(trunk="cnn", hidden=(512,), shared=True))
    frames = torch.randint(0, 256, (8, channels, 84, 84), dtype=torch.uint8)
    two_passes = (frames.float() / 255.0).contiguous(memory_format=torch.channels_last)
    prepared = net._prepare(frames)
    assert torch.equal(prepared, two_passes)
    assert prepared.stride() == two_passes.stride()
    assert prepared.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(net.actor_trunk(prepared), net.actor_trunk(two_passes))


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


def test_an_mlp_trunk_is_a_sequential_of_stock_layers_whose_hooks_run():
    trunk, _ = mlp_trunk(3, NetworkConfig(hidden=(8, 8), activation="elu"))
    plain = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ELU(), torch.nn.Linear(8, 8), torch.nn.ELU())
    assert type(trunk) is torch.nn.Sequential and list(trunk.state_dict()) == list(plain.state_dict())
    assert {type(layer) for layer in trunk} == {torch.nn.Linear, torch.nn.ELU}
    seen = []
    for layer in trunk:
        layer.register_forward_hook(lambda module, args, out: seen.append(type(module).__name__))
    trunk(torch.randn(2, 3))
    assert seen == ["Linear", "ELU", "Linear", "ELU"]
    trunk.load_state_dict(plain.state_dict())
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert torch.equal(trunk(x), plain(x))
