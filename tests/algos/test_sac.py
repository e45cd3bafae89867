"""SAC's maths and storage: squashed log-probabilities, twin critics, Polyak, replay ring, transitions."""

from importlib.util import find_spec

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcli.algos.buffers import ReplayBuffer
from rlcli.algos.learners import OffPolicyLearner
from rlcli.algos.sac import SAC, SACConfig, alpha_loss, polyak_update
from rlcli.algos.threads import ThreadPlan
from rlcli.envs import make_vec_env
from rlcli.errors import UsageError
from rlcli.nets.models import EnsembleLinear, QEnsemble, SquashedGaussianActor, squashed_gaussian_log_prob

BACKENDS = ["gymnasium", pytest.param("envpool", marks=pytest.mark.skipif(
    find_spec("envpool") is None, reason="envpool is not installed"))]


def test_squashed_log_prob_matches_a_numerical_change_of_variables():
    torch.manual_seed(0)
    mean, log_std = torch.tensor([[0.3, -1.2]]), torch.tensor([[-0.5, 0.4]])
    u = torch.tensor([[0.7, -2.5]], dtype=torch.float64)
    ours = squashed_gaussian_log_prob(u, mean.double(), log_std.double())
    # density of a = tanh(u): p(u) / |da/du|, the derivative taken by central differences
    h = 1e-6
    jac = (torch.tanh(u + h) - torch.tanh(u - h)) / (2 * h)
    normal = torch.distributions.Normal(mean.double(), log_std.double().exp())
    reference = (normal.log_prob(u) - jac.log()).sum(-1)
    assert ours.item() == pytest.approx(reference.item(), abs=1e-6)


def test_squashed_log_prob_stays_finite_where_tanh_saturates():
    out = squashed_gaussian_log_prob(torch.tensor([[30.0]]), torch.tensor([[30.0]]), torch.tensor([[0.0]]))
    assert torch.isfinite(out).all()


def test_actor_actions_respect_asymmetric_bounds():
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
    actor = SquashedGaussianActor(4, space, (32,), "relu")
    actions, log_probs = actor(torch.randn(1000, 4) * 10)
    assert (actions[:, 0] >= -1).all() and (actions[:, 0] <= 3).all()
    assert (actions[:, 1] >= 0).all() and (actions[:, 1] <= 0.5).all()
    assert log_probs.shape == (1000,)


def test_stacked_twin_critics_equal_two_separate_networks():
    q = QEnsemble(3, 2, (16, 8), "relu")
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    out = q(obs, act)
    x = torch.cat([obs, act], -1)
    for i in range(2):
        h = torch.relu(x @ q.first.weight[i] + q.first.bias[i])
        h = torch.relu(h @ q.layers[0].weight[i] + q.layers[0].bias[i])
        assert torch.allclose(out[i], (h @ q.out.weight[i] + q.out.bias[i]).squeeze(-1), atol=1e-6)


def test_the_first_critic_alone_equals_its_row_of_the_ensemble_and_never_reads_the_second():
    q = QEnsemble(3, 2, (16, 8), "relu").double()
    obs, act = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    both = q(obs, act)
    expected = torch.autograd.grad(both[0].square().sum(), act)[0]
    with torch.no_grad():
        for param in q.parameters():
            param[1:] = float("nan")  # whatever the second network holds must not reach the first's values
    first = q(obs, act, members=1)
    assert first.shape == (1, 5) and torch.allclose(first[0], both[0])
    alone = torch.autograd.grad(first[0].square().sum(), act)[0]
    assert torch.isfinite(alone).all() and torch.allclose(alone, expected)
    with pytest.raises(ValueError, match="members"):
        q(obs, act, members=3)


def test_one_unit_ensemble_layer_equals_a_batched_matmul_in_value_and_gradients():
    layer = EnsembleLinear(2, 8, 1).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    out = layer(x)
    grads = torch.autograd.grad(out.square().sum(), (x, layer.weight, layer.bias))
    reference = torch.baddbmm(layer.bias, x, layer.weight)
    expected = torch.autograd.grad(reference.square().sum(), (x, layer.weight, layer.bias))
    assert out.shape == (2, 5, 1) and torch.allclose(out, reference)
    for got, want in zip(grads, expected, strict=True):
        assert torch.allclose(got, want)


def test_polyak_update_is_an_exact_lerp():
    target, online = [torch.zeros(3), torch.ones(2)], [torch.ones(3) * 4, torch.zeros(2)]
    polyak_update(target, online, 0.25)
    assert target[0].tolist() == [1.0, 1.0, 1.0] and target[1].tolist() == [0.75, 0.75]


def test_acting_draws_the_same_actions_as_the_forward_that_the_losses_use():
    actor = SquashedGaussianActor(4, gym.spaces.Box(-2, 2, (3,), np.float32), (32,), "relu")
    obs = torch.randn(5, 4)
    for deterministic in (False, True):
        torch.manual_seed(7)
        expected, _ = actor(obs, deterministic)
        torch.manual_seed(7)
        assert torch.equal(actor.act(obs, deterministic), expected)


def test_the_temperature_gradient_is_the_closed_form_and_leaves_the_entropy_alone():
    log_alpha = torch.nn.Parameter(torch.tensor(-1.6094))
    for entropy in torch.randn(200) * 5:
        loss = alpha_loss(log_alpha, -3.0, entropy.requires_grad_())
        loss.backward()
        # closed form: d/d log_alpha of -log_alpha * (target - H) is H - target; nothing reaches H
        assert torch.equal(log_alpha.grad, entropy.detach() + 3.0) and entropy.grad is None
        assert torch.equal(loss.detach(), -(log_alpha.detach() * (-3.0 - entropy.detach())))
        log_alpha.grad = None


def test_replay_buffer_wraps_around_and_round_trips():
    buf = ReplayBuffer(5, (1,), 1, torch.device("cpu"))
    for start in (0, 3, 6):  # 9 rows into 5 slots
        rows = torch.arange(start, start + 3, dtype=torch.float32)[:3 if start < 6 else 3]
        buf.add(rows[:, None], rows[:, None], rows, rows[:, None] + 100, torch.zeros(3))
    assert buf.size == 5 and buf.pos == 4
    assert buf.obs[:, 0].tolist() == [5.0, 6.0, 7.0, 8.0, 4.0]  # 0-3 overwritten, oldest survivor is 4
    copy = ReplayBuffer(5, (1,), 1, torch.device("cpu"))
    copy.load_state_tensors(buf.state_tensors())
    assert torch.equal(copy.obs, buf.obs) and copy.pos == buf.pos and copy.size == buf.size
    assert set(buf.sample(64).obs[:, 0].tolist()) <= {4.0, 5.0, 6.0, 7.0, 8.0}


def test_replay_rows_that_end_exactly_at_the_capacity_wrap_the_next_write_to_row_0():
    buf = ReplayBuffer(6, (1,), 1, torch.device("cpu"))
    for start in (0, 3, 6):
        rows = torch.arange(start, start + 3, dtype=torch.float32)
        buf.add(rows[:, None], rows[:, None], rows, rows[:, None], torch.zeros(3))
        if start == 3:
            assert buf.pos == 0 and buf.size == 6
    assert buf.obs[:, 0].tolist() == [6.0, 7.0, 8.0, 3.0, 4.0, 5.0] and buf.pos == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_rows_are_never_stored_and_truncations_keep_the_real_final_observation(backend):
    env = make_vec_env("Pendulum-v1", 1, 0, backend)
    cfg = SACConfig(learning_starts=10_000, log_every=450)  # random actions, no updates
    agent = SAC(cfg, env.single_observation_space, env.single_action_space, 1, torch.device("cpu"))
    learner = OffPolicyLearner(env, agent, cfg, ThreadPlan(1, 1))
    learner.iterate(0)
    buf = learner.buffer
    # 450 env steps: two 200-step episodes, each followed by a reset row that must not be stored
    assert buf.size == 448
    assert not buf.terminated[: buf.size].any(), "time-limit ends are truncations: they bootstrap"
    final = buf.next_obs[199]  # the 200th transition ends episode 1 at the time limit
    assert torch.allclose(final[:2].norm(), torch.tensor(1.0), atol=1e-4)  # a real (cos, sin) state
    assert not torch.equal(final, buf.obs[200]), "the next stored obs is episode 2's first"
    assert torch.equal(buf.next_obs[198], buf.obs[199])  # consecutive within an episode
    env.close()


def test_sac_refuses_discrete_actions():
    with pytest.raises(UsageError, match="SAC needs continuous"):
        SAC(SACConfig(), gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 1, torch.device("cpu"))


def test_update_changes_weights_and_alpha_moves_toward_the_target_entropy():
    torch.manual_seed(0)
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,), np.float32)
    agent = SAC(SACConfig(batch_size=32, policy_delay=2), obs_space, act_space, 1, torch.device("cpu"))
    buf = ReplayBuffer(100, (3,), 2, torch.device("cpu"))
    buf.add(torch.randn(100, 3), torch.rand(100, 2) * 2 - 1, torch.randn(100), torch.randn(100, 3), torch.zeros(100))
    actor_before = agent.actor.mean.weight.clone()
    target_before = agent.critic_target.out.weight.clone()
    log_alpha_before = agent.log_alpha.item()
    first = agent.update(buf.sample(32))
    assert torch.equal(agent.actor.mean.weight, actor_before), "policy_delay=2: no actor step on update 1"
    assert agent.log_alpha.item() == log_alpha_before, "the temperature steps with the actor"
    second = agent.update(buf.sample(32))
    assert not torch.equal(agent.actor.mean.weight, actor_before)
    # Adam's first step moves by lr against the gradient's sign; the gradient is entropy - target_entropy
    assert "charts/entropy" not in first and "losses/actor" not in first, "no actor step: nothing measured"
    entropy = second["charts/entropy"].item()
    expected = log_alpha_before - agent.cfg.alpha_lr * np.sign(entropy - agent.target_entropy)
    assert agent.log_alpha.item() == pytest.approx(expected, abs=1e-7)
    assert not torch.equal(agent.critic_target.out.weight, target_before)
    assert all(torch.isfinite(v) for v in first.values()) and all(torch.isfinite(v) for v in second.values())
    # the Polyak update must not record autograd history (it would grow without bound)
    assert all(p.grad_fn is None and not p.requires_grad for p in agent.critic_target.parameters())


def test_observation_normalisation_survives_reset_rows():
    env = make_vec_env("Pendulum-v1", 1, 0, "gymnasium")
    cfg = SACConfig(learning_starts=10_000, log_every=450, normalize_obs=True)
    agent = SAC(cfg, env.single_observation_space, env.single_action_space, 1, torch.device("cpu"))
    OffPolicyLearner(env, agent, cfg, ThreadPlan(1, 1)).iterate(0)
    assert torch.isfinite(agent.obs_norm.rms.mean).all() and torch.isfinite(agent.obs_norm.rms.var).all()
    assert agent.obs_norm.rms.count.item() == pytest.approx(448, abs=1)  # reset rows are not observations
    env.close()
