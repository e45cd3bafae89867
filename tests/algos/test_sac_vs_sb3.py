"""rlcli's SAC update against Stable-Baselines3's, part by part, on the same weights, batch and noise.

The two differ by construction in two places, each pinned by a test of its own: the log-std range
(rlcli: tanh mapped onto [-5, 2], CleanRL's; SB3: a clamp to [-20, 2]) and the squash correction (rlcli
exact; SB3 adds 1e-6 inside the log). With SB3 given rlcli's log-std range and no 1e-6, whole updates
agree: targets, losses, the order of the critic, actor and temperature steps, the temperature each loss
uses, Adam and the Polyak update. rlcli's critic loss is twice SB3's (no 0.5), which Adam cancels.
"""

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.sac import SAC, SACConfig, polyak_update
from rlcli.nets.models import SquashedGaussianActor, squashed_gaussian_log_prob

pytest.importorskip("stable_baselines3")
from stable_baselines3 import SAC as SB3SAC  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402
from stable_baselines3.common.utils import polyak_update as sb3_polyak_update  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OBS_DIM, ACT_DIM, BATCH = 11, 3, 256  # Hopper's sizes
CPU = torch.device("cpu")


def sb3_runs_script():
    spec = importlib.util.spec_from_file_location("sb3_runs", REPO / "scripts/sb3_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BoxEnv(gym.Env):
    """Only spaces: SB3 builds its networks from an env."""

    def __init__(self, bound: float) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float64)
        self.action_space = gym.spaces.Box(-bound, bound, (ACT_DIM,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(OBS_DIM), {}

    def step(self, action):
        return np.zeros(OBS_DIM), 0.0, False, False, {}


class TanhLogStd(nn.Module):
    """SB3's log-std layer mapped as rlcli's (its clamp to [-20, 2] then never binds)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        low, high = SquashedGaussianActor.LOG_STD_MIN, SquashedGaussianActor.LOG_STD_MAX
        return low + 0.5 * (high - low) * (torch.tanh(self.linear(h)) + 1)


def actor_pairs(agent: SAC, model) -> list[tuple[nn.Module, nn.Module]]:
    """(rlcli layer, SB3 layer) of the actors."""
    a = model.actor
    log_std = a.log_std.linear if isinstance(a.log_std, TanhLogStd) else a.log_std
    return [(agent.actor.trunk[0], a.latent_pi[0]), (agent.actor.trunk[2], a.latent_pi[2]),
            (agent.actor.mean, a.mu), (agent.actor.log_std, log_std)]


def critic_layers(critic: nn.Module) -> list[nn.Module]:
    return [critic.first, *critic.layers, critic.out]


def copy_weights(agent: SAC, model) -> None:
    """rlcli's actor, critics, target critics and temperature into SB3's (its twin critics are separate
    networks, whose Linear weights are [out, in]: rlcli's stacked [n, in, out] transposed)."""
    with torch.no_grad():
        for ours, theirs in actor_pairs(agent, model):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        for ours, theirs in ((agent.critic, model.critic), (agent.critic_target, model.critic_target)):
            for i, q in enumerate(theirs.q_networks):
                for layer, linear in zip(critic_layers(ours), q[0::2], strict=True):
                    linear.weight.copy_(layer.weight[i].T)
                    linear.bias.copy_(layer.bias[i, 0])
        model.log_ent_coef.copy_(agent.log_alpha.detach().reshape(1))


def largest_differences(agent: SAC, model) -> dict[str, float]:
    """The largest absolute difference between the two sides' weights, per network."""
    out = {"actor": max((ours.weight - theirs.weight).abs().max().item() for ours, theirs in actor_pairs(agent, model)),
           "log_alpha": abs(agent.log_alpha.item() - model.log_ent_coef.item())}
    for name, ours, theirs in (("critic", agent.critic, model.critic),
                               ("target", agent.critic_target, model.critic_target)):
        out[name] = max((layer.weight[i].T - linear.weight).abs().max().item()
                        for i, q in enumerate(theirs.q_networks)
                        for layer, linear in zip(critic_layers(ours), q[0::2], strict=True))
    return out


def make_pair(bound: float = 1.0, **overrides):
    """rlcli's SAC with Hopper's settings and SB3's from the same config (``sb3_sac_kwargs``), equal weights."""
    torch.manual_seed(0)
    cfg = SACConfig(learning_starts=0, batch_size=BATCH, actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4, **overrides)
    env = BoxEnv(bound)
    agent = SAC(cfg, env.observation_space, env.action_space, 1, CPU)
    model = SB3SAC("MlpPolicy", env, device="cpu", seed=0, **sb3_runs_script().sb3_sac_kwargs(cfg))
    model.set_logger(Logger(None, []))  # configure() makes a folder in /tmp
    copy_weights(agent, model)
    return agent, model


def random_batch(generator: torch.Generator) -> ReplayBatch:
    """A replay batch with a quarter of its rows terminal."""
    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    actions = torch.rand(BATCH, ACT_DIM, generator=generator) * 2 - 1
    terminated = (torch.rand(BATCH, generator=generator) < 0.25).float()
    return ReplayBatch(normal(BATCH, OBS_DIM), actions, normal(BATCH), normal(BATCH, OBS_DIM), terminated)


def update_both(agent: SAC, model, batch: ReplayBatch, next_noise: torch.Tensor, pi_noise: torch.Tensor,
                monkeypatch) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One update of each side on ``batch``, with the given standard normal draws; (rlcli's metrics,
    SB3's logged values)."""
    # each side draws one sample for the next observations (the target) and one for the current ones
    # (the actor's loss, the temperature's entropy): rlcli in that order, SB3 the other way round
    ours, theirs = [next_noise, pi_noise], [pi_noise, next_noise]
    samples = ReplayBufferSamples(batch.obs, batch.actions, batch.next_obs, batch.terminated[:, None],
                                  batch.rewards[:, None])
    with monkeypatch.context() as patch:
        patch.setattr(torch, "randn_like", lambda x, **_: ours.pop(0))
        patch.setattr(torch.distributions.normal, "_standard_normal", lambda *_, **__: theirs.pop(0))
        patch.setattr(model.replay_buffer, "sample", lambda *_, **__: samples)
        metrics = agent.update(batch)
        model.train(gradient_steps=1, batch_size=BATCH)
    assert not ours and not theirs, "each side draws exactly two samples an update"
    return metrics, dict(model.logger.name_to_value)


def test_whole_updates_agree_given_rlclis_log_std_range_and_the_exact_squash(monkeypatch):
    agent, model = make_pair()
    model.actor.log_std = TanhLogStd(model.actor.log_std)
    model.actor.action_dist.epsilon = 0.0
    # rlcli's critic loss halved, as SB3's: the factor 2 is the subject of the Adam test below
    critic_loss = agent.critic_loss
    monkeypatch.setattr(agent, "critic_loss",
                        lambda *args: (lambda loss, q, errors: (0.5 * loss, q, errors))(*critic_loss(*args)))
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        batch = random_batch(generator)
        metrics, logged = update_both(agent, model, batch, *torch.randn(2, BATCH, ACT_DIM, generator=generator),
                                      monkeypatch=monkeypatch)
        assert metrics["losses/critic"].item() == pytest.approx(logged["train/critic_loss"], rel=1e-5)
        assert metrics["losses/actor"].item() == pytest.approx(logged["train/actor_loss"], rel=1e-5, abs=1e-5)
        assert metrics["losses/alpha"].item() == pytest.approx(logged["train/ent_coef_loss"], rel=1e-5, abs=1e-6)
        # the losses of both use the temperature from before the update's temperature step (the weights
        # below would differ otherwise); rlcli logs the one after it, SB3 the one the losses used
        assert metrics["charts/alpha"].item() == pytest.approx(agent.log_alpha.exp().item(), rel=1e-6)
        assert logged["train/ent_coef"] != pytest.approx(model.log_ent_coef.exp().item(), rel=1e-6)
        differences = largest_differences(agent, model)
        assert max(differences.values()) < 1e-6, differences


def test_rlclis_critic_loss_is_twice_sb3s_which_adam_cancels_except_for_gradients_near_its_eps():
    """rlcli sums the twin critics' mean squared errors, SB3 halves that sum. Adam's step,
    lr * m / (sqrt(v) + eps), is lr g / (|g| + eps) on the first step: for g and 2g the two differ by
    lr g eps / ((2g + eps)(g + eps)), below lr eps / 2|g| (5e-4 lr at |g| = 1e-5), at most lr (3 - 2 sqrt 2),
    0.17 lr, at |g| = eps / sqrt 2 (eps 1e-8)."""
    agent, _ = make_pair()
    batch = random_batch(torch.Generator().manual_seed(5))
    torch.manual_seed(6)
    loss, _, _ = agent.critic_loss(batch, batch.obs, batch.next_obs)
    torch.manual_seed(6)
    with torch.no_grad():
        next_actions, next_log_probs = agent.actor(batch.next_obs)
        next_q = agent.critic_target(batch.next_obs, next_actions).min(0).values - agent.cfg.alpha * next_log_probs
        target = batch.rewards + agent.cfg.gamma * (1 - batch.terminated) * next_q
        q = agent.critic(batch.obs, batch.actions)
        sb3_loss = 0.5 * sum(nn.functional.mse_loss(q[i], target) for i in range(2))
    assert loss.item() == pytest.approx(2 * sb3_loss.item(), rel=1e-6)
    lr, eps = 3e-4, 1e-8
    grads = torch.logspace(-12, 0, 1000, dtype=torch.float64)
    steps = []
    for scale in (1.0, 2.0):
        weights = torch.zeros(1000, dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([weights], lr=lr, eps=eps)
        weights.grad = scale * grads
        optimizer.step()
        steps.append(weights.detach().clone())
    gap = (steps[0] - steps[1]).abs()
    assert gap.max().item() == pytest.approx(lr * (3 - 2 * np.sqrt(2)), rel=0.01)
    assert (gap <= lr * eps / (2 * grads) + 1e-18).all()  # 1e-18: float64 rounding of a step of lr


def test_rlcli_maps_log_std_onto_minus_5_to_2_with_tanh_where_sb3_clamps_to_minus_20_to_2():
    agent, model = make_pair()
    obs = torch.randn(1000, OBS_DIM, generator=torch.Generator().manual_seed(2))
    mean, log_std, _ = agent.actor._pre_tanh(obs, deterministic=True)
    sb3_mean, sb3_log_std, _ = model.actor.get_action_dist_params(obs)
    raw = model.actor.log_std(model.actor.latent_pi(obs))
    assert torch.allclose(mean, sb3_mean, atol=1e-6)
    assert torch.allclose(sb3_log_std, raw.clamp(-20.0, 2.0))
    assert torch.allclose(log_std, -5.0 + 3.5 * (torch.tanh(raw) + 1), atol=1e-6)
    # the same freshly initialised weights (raw outputs near 0): rlcli starts at std e^-1.5, SB3 at 1
    assert log_std.exp().mean().item() == pytest.approx(np.exp(-1.5), rel=0.1)
    assert sb3_log_std.exp().mean().item() == pytest.approx(1.0, rel=0.1)


def sb3_squashed_log_prob(model, pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    dist = model.actor.action_dist.proba_distribution(mean, log_std)
    return dist.log_prob(torch.tanh(pre_tanh), pre_tanh)


def test_squash_corrections_agree_unless_tanh_saturates_where_sb3s_1e6_caps_it():
    _, model = make_pair()
    u = torch.linspace(-3, 3, 61)[:, None].repeat(1, ACT_DIM).requires_grad_(True)
    mean, log_std = torch.zeros_like(u), torch.zeros_like(u)
    ours, theirs = squashed_gaussian_log_prob(u, mean, log_std), sb3_squashed_log_prob(model, u, mean, log_std)
    # 1e-6 / (1 - tanh(u)^2) per dimension: at most 1e-4 for |u| <= 3
    assert (ours - theirs).abs().max().item() < 3 * 1e-4
    # saturated (|u| = 10, tanh(u) = 1 in float32): SB3's correction stops at log(1e-6) a dimension, with no
    # gradient; rlcli's goes on, -2 log(cosh u) = 2 (log 2 - |u| - softplus(-2|u|)), with gradient -2 tanh u
    u = torch.full((1, ACT_DIM), 10.0, requires_grad=True)
    ours, theirs = squashed_gaussian_log_prob(u, u.detach(), log_std[:1]), sb3_squashed_log_prob(model, u, u.detach(),
                                                                                              log_std[:1])
    per_dim = -2 * (np.log(2) - 10) + np.log(1e-6)  # rlcli's log-probability minus SB3's, per dimension: 4.8
    assert (ours - theirs).item() == pytest.approx(ACT_DIM * per_dim, rel=1e-4)
    (grad_ours,) = torch.autograd.grad(ours.sum(), u)
    (grad_theirs,) = torch.autograd.grad(theirs.sum(), u)
    assert torch.allclose(grad_ours, torch.full_like(u, 2.0), atol=1e-4), "log p rises 2 per unit of |u|"
    assert grad_theirs.abs().max().item() < 1e-6


def test_polyak_updates_agree():
    generator = torch.Generator().manual_seed(3)
    online = [torch.randn(256, 256, generator=generator) for _ in range(3)]
    target = [torch.randn(256, 256, generator=generator) for _ in range(3)]
    theirs = [t.clone() for t in target]
    polyak_update(target, online, 0.005)
    sb3_polyak_update(online, theirs, 0.005)
    assert max((a - b).abs().max().item() for a, b in zip(target, theirs, strict=True)) < 1e-6


def test_temperature_target_entropy_and_learning_rates_start_equal():
    agent, model = make_pair()
    assert model.target_entropy == agent.target_entropy == -ACT_DIM
    assert model.log_ent_coef.exp().item() == pytest.approx(agent.cfg.alpha)
    for optimizer in (model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer):
        ours = agent.actor_optimizer.param_groups[0]
        assert optimizer.param_groups[0]["lr"] == 3e-4 and optimizer.param_groups[0]["eps"] == ours["eps"]


def test_with_bounds_other_than_unit_rlclis_critic_reads_env_actions_and_sb3s_actions_scaled_to_unit():
    """The same function under a reparametrisation: SB3's first-layer action columns are rlcli's times
    the bound. Not the same learning: both initialise those columns alike and Adam steps each weight by
    about the learning rate, so rlcli's critic sees actions `bound` times stronger. Hopper's and
    HalfCheetah's bounds are 1, where the two are the same."""
    bound = 2.0
    agent, model = make_pair(bound)
    obs = torch.randn(64, OBS_DIM, generator=torch.Generator().manual_seed(4))
    env_actions = agent.actor(obs, deterministic=True)[0]
    sb3_actions, _ = model.predict(obs.numpy(), deterministic=True)
    assert np.allclose(env_actions.detach().numpy(), sb3_actions, atol=1e-6)
    with torch.no_grad():
        for q in model.critic.q_networks:
            q[0].weight[:, OBS_DIM:] *= bound
    q_ours = agent.critic(obs, env_actions)
    q_theirs = torch.cat(model.critic(obs, env_actions / bound), dim=1).T
    assert torch.allclose(q_ours, q_theirs, atol=1e-5)


def test_sb3_stores_every_env_step_and_bootstraps_truncations_from_the_final_observation():
    """SB3's DummyVecEnv resets inside the step that ends an episode, so every env step is a transition;
    rlcli's envs reset on the next step, whose row it skips (450 steps store 448 rows there, see
    tests/algos/test_sac.py): an episode end costs rlcli one env step of its budget. Truncations are alike:
    the real final observation, and no terminal flag in what is sampled."""
    from stable_baselines3.common.env_util import make_vec_env

    model = SB3SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1, seed=0), learning_starts=10_000, device="cpu",
                   seed=0)
    model.set_logger(Logger(None, []))
    model.learn(450)
    buf = model.replay_buffer
    assert buf.pos == 450
    assert buf.dones[199, 0] == 1 and buf.timeouts[199, 0] == 1, "a time limit: done, flagged a timeout"
    assert buf.dones[199, 0] * (1 - buf.timeouts[199, 0]) == 0, "what sampling hands the update"
    final = buf.next_observations[199, 0]
    assert np.linalg.norm(final[:2]) == pytest.approx(1.0, abs=1e-4), "a real (cos, sin) state"
    assert not np.array_equal(final, buf.observations[200, 0]), "the next stored obs is episode 2's first"
    assert np.array_equal(buf.next_observations[198, 0], buf.observations[199, 0])


def test_the_translation_refuses_what_sb3_cannot_express():
    script = sb3_runs_script()
    for overrides, name in ((dict(critic_lr=1e-3), "one learning rate"), (dict(policy_delay=2), "policy_delay"),
                            (dict(target_update_every=2), "target_update_every"),
                            (dict(normalize_obs=True), "normalize_obs"), (dict(precision="bf16"), "precision"),
                            (dict(utd_ratio=0.3), "utd_ratio")):
        with pytest.raises(Exception, match=name):
            script.sb3_sac_kwargs(SACConfig(**overrides))
    assert script.gradient_schedule(SACConfig(utd_ratio=0.5)) == (2, 1)
    assert script.gradient_schedule(SACConfig(utd_ratio=2.0)) == (1, 2)
