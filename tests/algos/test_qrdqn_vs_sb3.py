"""rlcli's DQN with ``quantiles`` against sb3-contrib's QR-DQN, on the same weights and batches: the next
action chosen by the target's mean quantiles, the quantiles moved by the Bellman operator, the quantile Huber
loss summed over the estimates and averaged over the targets, gradient clipping and Adam. Whole gradient steps
agree to float rounding."""

import gymnasium as gym
import pytest
import torch

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.dqn import DQN, DQNConfig
from tests.algos.test_sac_vs_sb3 import CPU, sb3_runs_script

pytest.importorskip("sb3_contrib")
from sb3_contrib import QRDQN  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402

OBS_DIM, ACTIONS, QUANTILES, BATCH = 4, 3, 8, 32


class DiscreteEnv(gym.Env):
    """Only spaces: SB3 builds its networks from an env."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (OBS_DIM,))
    action_space = gym.spaces.Discrete(ACTIONS)


def layer_pairs(ours, theirs) -> list:
    """(rlcli layer, SB3 layer, SB3's row order): both are Linear, ReLU, Linear, ReLU, Linear; rlcli's last
    layer lists each action's quantiles together ([actions, quantiles]), SB3's each quantile's actions."""
    order = torch.arange(ACTIONS * QUANTILES).reshape(ACTIONS, QUANTILES).T.reshape(-1)
    return [(ours.trunk[0], theirs[0], None), (ours.trunk[2], theirs[2], None), (ours.advantage, theirs[4], order)]


def pairs(agent: DQN, model) -> list:
    return layer_pairs(agent.q, model.quantile_net.quantile_net) + layer_pairs(
        agent.q_target, model.quantile_net_target.quantile_net)


def copy_weights(agent: DQN, model) -> None:
    with torch.no_grad():
        for ours, theirs, order in pairs(agent, model):
            theirs.weight.copy_(ours.weight if order is None else ours.weight[order])
            theirs.bias.copy_(ours.bias if order is None else ours.bias[order])


def largest_difference(agent: DQN, model) -> float:
    return max(max((ours.weight - (theirs.weight if order is None else theirs.weight[order.argsort()])).abs().max(),
                   (ours.bias - (theirs.bias if order is None else theirs.bias[order.argsort()])).abs().max()).item()
               for ours, theirs, order in pairs(agent, model))


def make_pair():
    """rlcli's QR-DQN and sb3-contrib's from the same config (``sb3_dqn_kwargs``), equal weights; the target
    is not copied within the test's steps on either side."""
    torch.manual_seed(0)
    cfg = DQNConfig(quantiles=QUANTILES, double_q=False, hidden=(16, 16), learning_rate=1e-2, batch_size=BATCH,
                    learning_starts=0, max_grad_norm=0.5, target_update_every=1000, utd_ratio=1.0)
    env = DiscreteEnv()
    agent = DQN(cfg, env.observation_space, env.action_space, 1, CPU)
    model = QRDQN("MlpPolicy", env, device="cpu", seed=0, **sb3_runs_script().sb3_dqn_kwargs(cfg))
    model.set_logger(Logger(None, []))  # configure() makes a folder in /tmp
    copy_weights(agent, model)
    return agent, model


def random_batch(generator: torch.Generator) -> ReplayBatch:
    """A replay batch with a quarter of its rows terminal and rewards large enough for both sides of the Huber
    loss's kink."""
    actions = torch.randint(0, ACTIONS, (BATCH, 1), generator=generator).float()
    terminated = (torch.rand(BATCH, generator=generator) < 0.25).float()
    return ReplayBatch(torch.randn(BATCH, OBS_DIM, generator=generator), actions,
                       torch.randn(BATCH, generator=generator) * 3, torch.randn(BATCH, OBS_DIM, generator=generator),
                       terminated)


def test_whole_gradient_steps_agree_with_sb3_contribs_qrdqn(monkeypatch):
    agent, model = make_pair()
    assert largest_difference(agent, model) == 0.0
    obs = torch.randn(5, OBS_DIM)
    with torch.no_grad():  # the same values before any step: each action's value is its quantiles' mean
        theirs = model.quantile_net(obs).mean(dim=1)
    torch.testing.assert_close(agent.q(obs), theirs)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        batch = random_batch(generator)
        samples = ReplayBufferSamples(batch.obs, batch.actions.long(), batch.next_obs, batch.terminated[:, None],
                                      batch.rewards[:, None])
        monkeypatch.setattr(model.replay_buffer, "sample", lambda *_, samples=samples, **__: samples)
        metrics = agent.update(batch)
        model.train(gradient_steps=1, batch_size=BATCH)
        assert metrics["losses/td"].item() == pytest.approx(model.logger.name_to_value["train/loss"], rel=1e-5)
        assert largest_difference(agent, model) < 1e-6
    assert (agent.q.trunk[0].weight - agent.q_target.trunk[0].weight).abs().max() > 1e-3  # they did learn
