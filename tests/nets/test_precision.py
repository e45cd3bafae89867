"""precision: bf16 runs the hidden layers of the training passes in bfloat16; outputs, losses, weights
and evaluation stay float32 (DQN's heads run in bfloat16 too; its losses are float32)."""

import gymnasium as gym
import numpy as np
import torch

from rlcli.algos.buffers import ReplayBatch, RolloutBatch
from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.algos.sac import SAC, SACConfig
from rlcli.config import NetworkConfig
from rlcli.nets.models import ActorCritic, scaled_pixels

OBS = gym.spaces.Box(-1, 1, (6,), np.float32)
CPU = torch.device("cpu")


def _rollout(n: int, actions: torch.Tensor) -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    return RolloutBatch(torch.randn(n, 6, generator=gen), actions, torch.randn(n, generator=gen) - 1.0,
                        torch.randn(n, generator=gen), torch.randn(n, generator=gen), torch.randn(n, generator=gen))


def test_bf16_heads_and_losses_are_float32_and_hidden_layers_are_not():
    net = ActorCritic(OBS, gym.spaces.Box(-1, 1, (2,), np.float32), NetworkConfig(hidden=(32, 32)))
    seen = {}
    net.actor_trunk.register_forward_hook(lambda m, i, o: seen.__setitem__("trunk", o.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net.act(torch.randn(4, 6))
        log_probs, entropy, values = net.evaluate(torch.randn(4, 6), out.actions)
    assert seen["trunk"] == torch.bfloat16
    for t in (out.actions, out.log_probs, out.values, log_probs, entropy, values):
        assert t.dtype == torch.float32


def test_a_bf16_ppo_update_stays_close_to_the_fp32_one_and_weights_stay_float32():
    metrics = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        agent = PPO(PPOConfig(precision=precision, n_envs=4, n_steps=16, minibatch_size=32, n_epochs=2),
                    OBS, gym.spaces.Discrete(3), 4, CPU)
        torch.manual_seed(1)
        metrics[precision] = agent.update(_rollout(64, torch.randint(0, 3, (64, 1))), progress=0.0)
        assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in agent.parameters())
    for key in ("losses/policy", "losses/value", "losses/entropy"):
        assert abs(metrics["bf16"][key] - metrics["fp32"][key]) < 0.02 * max(1.0, abs(metrics["fp32"][key])), key


def test_evaluation_is_float32_whatever_the_training_precision():
    torch.manual_seed(0)
    fp32 = PPO(PPOConfig(), OBS, gym.spaces.Box(-1, 1, (2,), np.float32), 2, CPU)
    bf16 = PPO(PPOConfig(precision="bf16"), OBS, gym.spaces.Box(-1, 1, (2,), np.float32), 2, CPU)
    bf16.load_state_dict(fp32.state_dict())
    obs = torch.randn(8, 6)
    assert torch.equal(bf16.predict(obs), fp32.predict(obs))


def test_a_bf16_sac_update_gives_finite_float32_results():
    torch.manual_seed(0)
    agent = SAC(SACConfig(precision="bf16", actor_hidden=(32, 32), critic_hidden=(32, 32)), OBS,
                gym.spaces.Box(-1, 1, (2,), np.float32), 1, CPU)
    gen = torch.Generator().manual_seed(2)
    batch = ReplayBatch(torch.randn(16, 6, generator=gen), torch.rand(16, 2, generator=gen) * 2 - 1,
                        torch.randn(16, generator=gen), torch.randn(16, 6, generator=gen), torch.zeros(16))
    before = [p.detach().clone() for p in agent.critic.parameters()]
    stats = agent.update(batch)
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in stats.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.critic.parameters(), strict=True))
    assert all(p.dtype == torch.float32 for p in agent.parameters())


def test_a_bf16_dqn_update_stays_close_to_the_fp32_one_with_each_kind_of_value():
    from rlcli.algos.dqn import DQN, DQNConfig

    gen = torch.Generator().manual_seed(3)
    batch = ReplayBatch(torch.randn(32, 6, generator=gen), torch.randint(0, 3, (32, 1), generator=gen).float(),
                        torch.randn(32, generator=gen), torch.randn(32, 6, generator=gen), torch.zeros(32))
    for values in ({}, {"atoms": 11}, {"quantiles": 8}):
        losses = {}
        for precision in ("fp32", "bf16"):
            torch.manual_seed(0)
            agent = DQN(DQNConfig(precision=precision, hidden=(32, 32), **values), OBS, gym.spaces.Discrete(3), 1, CPU)
            stats = agent.update(batch)
            assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in stats.values()), values
            assert all(p.dtype == torch.float32 for p in agent.parameters())
            losses[precision] = stats["losses/td"].item()
        assert abs(losses["bf16"] - losses["fp32"]) < 0.02 * max(1.0, abs(losses["fp32"])), values


def test_frames_scaled_in_bf16_are_the_bits_autocast_gives_the_float32_quotient():
    frames = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    assert torch.equal(scaled_pixels(frames), frames.float() / 255.0)  # no autocast: float32, as ever
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scaled = scaled_pixels(frames)
        assert scaled.dtype == torch.bfloat16
        assert torch.equal(scaled.view(torch.int16), (frames.float() / 255.0).bfloat16().view(torch.int16))
        conv = torch.nn.Conv2d(1, 2, 3)  # what the first convolution then sees: the same values either way
        assert torch.equal(conv(scaled_pixels(frames)), conv(frames.float() / 255.0))
        # frames given as floats (not necessarily whole numbers) keep the float32 quotient
        assert scaled_pixels(frames.float() + 0.3).dtype == torch.float32
