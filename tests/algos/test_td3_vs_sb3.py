"""rlcli's TD3 update against Stable-Baselines3's, part by part, on the same weights, batch and target noise:
the smoothed target actions, the twin critics' loss (both sum the two mean squared errors), the policy delay
counted over every gradient step, the actor's loss on the first critic, Adam and the Polyak update of both
targets on the delayed steps only. Whole updates agree to float rounding."""

import pytest
import torch

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.td3 import TD3, TD3Config
from tests.algos.test_sac_vs_sb3 import ACT_DIM, BATCH, CPU, BoxEnv, critic_layers, random_batch, sb3_runs_script

pytest.importorskip("stable_baselines3")
from stable_baselines3 import TD3 as SB3TD3  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402


def actor_pairs(actor, mu) -> list:
    """(rlcli layer, SB3 layer): SB3's actor is Linear, ReLU, Linear, ReLU, Linear, Tanh."""
    return [(actor.trunk[0], mu[0]), (actor.trunk[2], mu[2]), (actor.mean, mu[4])]


def network_pairs(agent: TD3, model) -> dict[str, list]:
    pairs = {"actor": actor_pairs(agent.actor, model.actor.mu),
             "actor_target": actor_pairs(agent.actor_target, model.actor_target.mu)}
    for name, ours, theirs in (("critic", agent.critic, model.critic), ("critic_target", agent.critic_target,
                                                                        model.critic_target)):
        # rlcli's critics are stacked [n, in, out]; SB3's are separate Linear layers, [out, in]
        pairs[name] = [((layer, i), linear) for i, q in enumerate(theirs.q_networks)
                       for layer, linear in zip(critic_layers(ours), q[0::2], strict=True)]
    return pairs


def ours_of(layer) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(layer, tuple):
        stacked, i = layer
        return stacked.weight[i].T, stacked.bias[i, 0]
    return layer.weight, layer.bias


def copy_weights(agent: TD3, model) -> None:
    with torch.no_grad():
        for pairs in network_pairs(agent, model).values():
            for ours, theirs in pairs:
                weight, bias = ours_of(ours)
                theirs.weight.copy_(weight)
                theirs.bias.copy_(bias)


def largest_differences(agent: TD3, model) -> dict[str, float]:
    return {name: max(max((ours_of(ours)[0] - theirs.weight).abs().max().item(),
                          (ours_of(ours)[1] - theirs.bias).abs().max().item()) for ours, theirs in pairs)
            for name, pairs in network_pairs(agent, model).items()}


def make_pair(**overrides):
    """rlcli's TD3 with the entry's defaults and SB3's from the same config (``sb3_td3_kwargs``), equal weights."""
    torch.manual_seed(0)
    cfg = TD3Config(learning_starts=0, batch_size=BATCH, **overrides)
    env = BoxEnv(1.0)
    agent = TD3(cfg, env.observation_space, env.action_space, 1, CPU)
    kwargs = sb3_runs_script().sb3_td3_kwargs(cfg)
    kwargs.pop("action_noise_std")  # exploration: acting, not the update
    model = SB3TD3("MlpPolicy", env, device="cpu", seed=0, **kwargs)
    model.set_logger(Logger(None, []))  # configure() makes a folder in /tmp
    copy_weights(agent, model)
    return agent, model


def update_both(agent: TD3, model, batch: ReplayBatch, noise: torch.Tensor, monkeypatch):
    """One gradient step of each side on ``batch``, both drawing ``noise`` (standard normal) as the target
    policy's noise; (rlcli's metrics, SB3's logged values)."""
    ours, theirs = [noise], [noise]
    samples = ReplayBufferSamples(batch.obs, batch.actions, batch.next_obs, batch.terminated[:, None],
                                  batch.rewards[:, None])

    def sb3_normal(tensor, mean=0.0, std=1.0, **_):
        return tensor.copy_(theirs.pop(0) * std + mean)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "randn_like", lambda x, **_: ours.pop(0))
        patch.setattr(torch.Tensor, "normal_", sb3_normal)
        patch.setattr(model.replay_buffer, "sample", lambda *_, **__: samples)
        metrics = agent.update(batch)
        model.train(gradient_steps=1, batch_size=BATCH)
    assert not ours and not theirs, "each side draws the target noise once an update"
    return metrics, dict(model.logger.name_to_value)


def test_whole_updates_agree_with_sb3s_td3(monkeypatch):
    agent, model = make_pair(target_noise=0.3, target_noise_clip=0.4)
    generator = torch.Generator().manual_seed(1)
    moved = []
    for step in range(1, 5):
        batch = random_batch(generator)
        before = model.actor.mu[0].weight.detach().clone()
        metrics, logged = update_both(agent, model, batch, torch.randn(BATCH, ACT_DIM, generator=generator),
                                      monkeypatch)
        assert metrics["losses/critic"].item() == pytest.approx(logged["train/critic_loss"], rel=1e-5)
        moved.append(not torch.equal(before, model.actor.mu[0].weight))
        if step % 2 == 0:  # the policy delay of 2: the actor and both targets move on every second step
            assert metrics["losses/actor"].item() == pytest.approx(logged["train/actor_loss"], rel=1e-5, abs=1e-6)
        else:
            assert "losses/actor" not in metrics
        differences = largest_differences(agent, model)
        assert max(differences.values()) < 1e-6, differences
    assert moved == [False, True, False, True]

