"""Action masks and Dict observations: the layout of the flat observation, masked sampling, argmax,
log-probabilities and entropy in closed form, both mask conventions through the env backends, an
all-false mask as one line naming the step, and the critic's privileged keys out of the actor's reach."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.config import NetworkConfig
from rlcli.envs import make_vec_env
from rlcli.envs.layout import ObsFlattener, ObsLayout, check_masks, network_keys
from rlcli.envs.masked import LENGTH
from rlcli.errors import UsageError
from rlcli.nets.models import MASKED_LOGIT, ActorCritic
from rlcli.nets.recurrent import RecurrentActorCritic
from rlcli.training.agents import check_spaces

CPU = torch.device("cpu")


def masked_net(nvec: list[int], logits: list[float], obs_width: int = 2, **network) -> ActorCritic:
    """An actor whose logits are ``logits`` whatever it sees (zero weights, the logits as the bias)."""
    layout = ObsLayout((("observation", obs_width), ("action_mask", sum(nvec))), "action_mask")
    action_space = gym.spaces.Discrete(nvec[0]) if len(nvec) == 1 else gym.spaces.MultiDiscrete(nvec)
    net = ActorCritic(gym.spaces.Box(-1, 1, (layout.size,)), action_space,
                      NetworkConfig(hidden=(8,), **network), layout)
    with torch.no_grad():
        net.actor_head.weight.zero_()
        net.actor_head.bias.copy_(torch.tensor(logits))
    return net


def rows(mask: list[list[int]], obs_width: int = 2) -> torch.Tensor:
    """Flat observations: random observation columns, then the mask's."""
    mask_t = torch.tensor(mask, dtype=torch.float32)
    return torch.cat([torch.randn(len(mask), obs_width), mask_t], 1)


def test_the_layout_names_each_keys_columns_and_the_default_keys_of_each_trunk():
    layout = ObsLayout((("action_mask", 3), ("observation", 2), ("state", 4)), "action_mask")
    assert layout.size == 9 and layout.span("state") == slice(5, 9) and layout.mask_columns() == [0, 1, 2]
    assert layout.columns(["state", "observation"]) == [3, 4, 5, 6, 7, 8]
    assert network_keys(layout, None, None) == (("observation",), ("observation", "state"))
    assert network_keys(layout, ["state", "observation"], ["state"]) == (("observation", "state"), ("state",))
    with pytest.raises(UsageError, match="network.critic_keys has no key 'velocity'; .* keys are observation, state"):
        network_keys(layout, None, ["velocity"])
    with pytest.raises(UsageError, match="network.actor_keys has no key 'action_mask'"):
        network_keys(layout, ["action_mask"], None)


def test_masked_actions_are_never_sampled_and_the_rest_keep_their_softmax_odds():
    torch.manual_seed(0)
    logits = [2.0, 0.0, 1.0, 3.0]
    net = masked_net([4], logits)
    obs = rows([[1, 1, 1, 0]] * 20_000)  # the best logit, 3.0, is forbidden
    with torch.no_grad():
        actions, log_probs, _ = net.act(obs)
    counts = np.bincount(actions.squeeze(-1).numpy(), minlength=4) / len(obs)
    allowed = np.exp([2.0, 0.0, 1.0]) / np.exp([2.0, 0.0, 1.0]).sum()
    assert counts[3] == 0 and np.allclose(counts[:3], allowed, atol=0.01), counts
    # the stored log-probability is that of the masked distribution
    assert torch.allclose(log_probs, torch.log(torch.tensor(allowed, dtype=torch.float32))[actions.squeeze(-1)])
    assert torch.isfinite(log_probs).all()


def test_the_deterministic_policy_takes_the_best_allowed_action():
    net = masked_net([4], [2.0, 0.0, 1.0, 3.0])
    obs = rows([[1, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]])
    with torch.no_grad():
        assert net.policy_actions(obs).squeeze(-1).tolist() == [0, 2, 1, 3]
        assert net.act(obs, deterministic=True).actions.squeeze(-1).tolist() == [0, 2, 1, 3]


def test_log_probs_and_entropy_are_those_over_the_allowed_actions():
    logits = torch.tensor([2.0, 0.0, 1.0, 3.0])
    net = masked_net([4], logits.tolist())
    obs = rows([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    log_probs, entropy, _ = net.evaluate(obs, torch.tensor([[2], [1], [3]]))
    expected_lp, expected_h = [], []
    for allowed, action in (([0, 2, 3], 2), ([0, 1, 2, 3], 1), ([3], 3)):
        logp = torch.log_softmax(logits[allowed], 0)
        expected_lp.append(float(logp[allowed.index(action)]))
        expected_h.append(float(-(logp.exp() * logp).sum()))
    assert torch.allclose(log_probs, torch.tensor(expected_lp)) and torch.allclose(entropy, torch.tensor(expected_h))
    assert entropy[2] == 0.0  # one allowed action: a certain choice


def test_uniform_logits_give_the_entropy_of_the_allowed_count_per_dimension():
    net = masked_net([3, 4], [0.0] * 7)  # MultiDiscrete: a flat mask of 3 + 4 entries
    obs = rows([[1, 1, 0, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0, 0]])
    log_probs, entropy, _ = net.evaluate(obs, torch.tensor([[0, 2], [2, 0]]))
    assert torch.allclose(entropy, torch.tensor([math.log(2) + math.log(3), 0.0]))
    assert torch.allclose(log_probs, torch.tensor([-math.log(2) - math.log(3), 0.0]))
    with torch.no_grad():
        for _ in range(20):
            actions = net.act(rows([[0, 1, 0, 0, 0, 1, 0]] * 50)).actions
            assert (actions == torch.tensor([1, 2])).all()


def test_masked_logits_take_no_gradient_and_nothing_is_nan():
    net = masked_net([4], [2.0, 0.0, 1.0, 3.0])
    obs = rows([[1, 0, 1, 0], [0, 0, 0, 1]])
    log_probs, entropy, _ = net.evaluate(obs, torch.tensor([[0], [3]]))
    (log_probs.sum() + entropy.sum()).backward()
    grad = net.actor_head.bias.grad
    assert torch.isfinite(grad).all() and grad[1] == 0.0  # action 1 is forbidden in both rows
    assert net.actor_output(obs)[0, 1] == MASKED_LOGIT


def test_an_all_false_mask_is_one_line_naming_the_step_and_the_env():
    check_masks(np.array([[True, False, False, True]]), [2, 2], 4)
    with pytest.raises(UsageError, match="action mask of env 1 allows no action in action dimension 1 at step 7"):
        check_masks(np.array([[True, False, True, True], [True, True, False, False]]), [2, 2], 7)


def test_the_flat_observation_takes_each_key_and_allows_every_action_where_no_mask_was_published():
    layout = ObsLayout((("observation", 2), ("state", 1), ("action_mask", 3)), "action_mask")
    flatten = ObsFlattener(layout, gym.spaces.Discrete(3))
    obs = {"observation": np.array([[0.5, -1.0], [2.0, 3.0]]), "state": np.array([7, 8], np.int64)}
    mask = np.array([[1, 0, 0], [0, 0, 0]], np.int8)  # row 1 is not published: its zeros are no mask
    flat = flatten(obs, {"action_mask": mask, "_action_mask": np.array([True, False])})
    assert flat.dtype == np.float32
    assert flat.tolist() == [[0.5, -1.0, 7.0, 1.0, 0.0, 0.0], [2.0, 3.0, 8.0, 1.0, 1.0, 1.0]]
    assert flatten(obs, {})[:, 3:].tolist() == [[1.0] * 3] * 2  # no mask at all this step
    assert flatten(obs, {"action_mask": mask[[0, 0]]})[:, 3:].tolist() == [[1.0, 0.0, 0.0]] * 2
    with pytest.raises(UsageError, match="env 1 allows no action at step 3"):
        flatten(obs, {"action_mask": mask})


class _EmptyMaskAtStep2(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"action_mask": np.ones(3, np.int8)}

    def step(self, action):
        self.t += 1
        mask = np.zeros(3, np.int8) if self.t == 2 else np.ones(3, np.int8)
        return np.zeros(2, np.float32), 0.0, False, False, {"action_mask": mask}


def test_an_env_that_allows_nothing_stops_with_the_step():
    gym.register("EmptyMaskAtStep2-v0", entry_point=_EmptyMaskAtStep2)
    try:
        env = make_vec_env("EmptyMaskAtStep2-v0", 2, 0, backend="gymnasium")
        env.reset()
        env.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(UsageError, match="env 0 allows no action at step 2"):
            env.step(np.zeros(2, dtype=np.int64))
        env.close()
    finally:
        del gym.registry["EmptyMaskAtStep2-v0"]


@pytest.mark.parametrize("convention", ["info", "obs"])
def test_both_mask_conventions_become_the_same_flat_observation(convention):
    env = make_vec_env("MaskedChoice-v0", 3, 5, kwargs={"mask": convention})
    layout = env.obs_layout
    assert layout is not None and layout.mask_key == "action_mask" and layout.size == 16
    assert env.single_observation_space.shape == (16,)
    obs = env.reset()
    vector = gym.make_vec("MaskedChoice-v0", 3, mask=convention)  # what the backend steps
    first, info = vector.reset(seed=5)
    mask = first["action_mask"] if convention == "obs" else info["action_mask"]
    values = first["observation"] if convention == "obs" else first
    assert np.array_equal(obs[:, layout.span("action_mask")], mask)
    assert np.array_equal(obs[:, layout.span("observation")], values)
    env.close()


def test_a_box_env_without_a_mask_has_no_layout_and_is_passed_on_as_it_is():
    env = make_vec_env("CartPole-v1", 2, 0)
    assert env.obs_layout is None and env.single_observation_space.shape == (4,)
    env.close()


def test_the_normaliser_leaves_the_mask_columns_as_they_are():
    layout = ObsLayout((("observation", 2), ("action_mask", 3)), "action_mask")
    agent = PPO(PPOConfig(normalize_obs=True), gym.spaces.Box(-np.inf, np.inf, (5,)), gym.spaces.Discrete(3),
                1, CPU, obs_layout=layout)
    obs = rows([[1, 0, 1], [0, 1, 1], [1, 1, 0]]) * torch.tensor([10.0, 10.0, 1, 1, 1])
    normalized = agent.observe(obs)
    assert torch.equal(normalized[:, 2:], obs[:, 2:])
    assert not torch.allclose(normalized[:, :2], obs[:, :2])


def test_sac_refuses_a_masked_env_and_ppo_takes_it():
    env = make_vec_env("MaskedChoice-v0", 1, 0)
    with pytest.raises(UsageError, match="sac does not take an action mask; train this environment with ppo"):
        check_spaces("sac", env)
    check_spaces("ppo", env)
    env.close()


def privileged_net(**network) -> ActorCritic:
    layout = ObsLayout((("observation", 4), ("state", 4)))
    return ActorCritic(gym.spaces.Box(-np.inf, np.inf, (8,)), gym.spaces.Discrete(2),
                       NetworkConfig(hidden=(16,), **network), layout)


def test_the_actor_never_reads_the_privileged_state():
    torch.manual_seed(0)
    net = privileged_net()
    obs = torch.randn(32, 8, requires_grad=True)
    other = obs.detach().clone()
    other[:, 4:] = torch.randn(32, 4) * 100  # another state, the same actor observation
    assert torch.equal(net.actor_output(obs), net.actor_output(other))
    torch.manual_seed(1)
    first = net.act(obs.detach()).actions
    torch.manual_seed(1)
    assert torch.equal(first, net.act(other).actions)
    log_probs, entropy, values = net.evaluate(obs, torch.zeros(32, 1, dtype=torch.long))
    (log_probs.sum() + entropy.sum()).backward(retain_graph=True)
    assert obs.grad is not None and (obs.grad[:, 4:] == 0).all() and (obs.grad[:, :4] != 0).any()
    obs.grad = None
    values.sum().backward()  # the critic does read it
    assert (obs.grad[:, 4:] != 0).any()
    assert net.actor_trunk[0].in_features == 4 and net.critic_trunk[0].in_features == 8


def test_a_shared_trunk_is_refused_where_the_critic_reads_more():
    with pytest.raises(UsageError, match="network.shared is true, but the actor reads observation and the critic "
                                         "observation, state"):
        privileged_net(shared=True)
    privileged_net(shared=True, critic_keys=("observation",))  # the same keys: one trunk is fine


def test_the_masked_task_optimum_is_its_length_and_a_forbidden_action_ends_it():
    env = gym.make("MaskedChoice-v0")
    obs, info = env.reset(seed=0)
    total, steps = 0.0, 0
    while True:
        allowed = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(allowed[np.argmax(obs[allowed])]))
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            break
    assert steps == LENGTH and total == pytest.approx(LENGTH)
    obs, info = env.reset(seed=1)
    forbidden = np.flatnonzero(info["action_mask"] == 0)
    _, reward, terminated, _, _ = env.step(int(forbidden[0]))
    assert reward == 0.0 and terminated


def _masked_agent() -> PPO:
    torch.manual_seed(0)
    layout = ObsLayout((("action_mask", 5), ("observation", 3), ("state", 2)), "action_mask")
    agent = PPO(PPOConfig(normalize_obs=True, network=NetworkConfig(hidden=(16,))),
                gym.spaces.Box(-np.inf, np.inf, (10,)), gym.spaces.Discrete(5), 1, CPU, obs_layout=layout)
    agent.observe(torch.randn(100, 10) * 3 + 1)
    with torch.no_grad():
        agent.net.actor_head.weight.mul_(100.0)  # clear choices: no near ties between file and agent
    return agent


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_the_exported_file_takes_the_actor_keys_and_the_mask_and_acts_as_the_agent(tmp_path, fmt):
    pytest.importorskip("onnxruntime")
    from rlcli.share.export import ActorInputs, _export_onnx, _export_torchscript, compare, policy_module

    agent = _masked_agent()
    file_module = ActorInputs(policy_module(agent))
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(40, 10)).astype(np.float32)
    flat[:, :5] = rng.random((40, 5)) < 0.5
    flat[np.arange(40), rng.integers(0, 5, 40)] = 1.0  # at least one allowed action per row
    obs, mask = file_module.split(flat)
    assert obs.shape == (40, 3) and mask.dtype == bool and mask.shape == (40, 5)
    exporter = _export_onnx if fmt == "onnx" else _export_torchscript
    run = exporter(file_module, (torch.as_tensor(obs[:2]), torch.as_tensor(mask[:2])), tmp_path / "policy")
    assert compare(agent.policy(), lambda rows: run(*file_module.split(rows)), flat) == (0.0, 0)
    # the mask input is honoured: forbidding each row's choice moves it to another allowed action
    chosen = run(obs, mask)
    assert mask[np.arange(40), chosen].all()
    fewer = mask.copy()
    fewer[np.arange(40), chosen] = False
    movable = fewer.any(1)
    moved = run(obs, fewer)
    assert (moved[movable] != chosen[movable]).all() and fewer[np.arange(40), moved][movable].all()


def test_a_masked_run_trains_evaluates_and_exports_from_the_command_line(tmp_path):
    pytest.importorskip("onnxruntime")
    import json

    from typer.testing import CliRunner

    from rlcli.cli import app

    runner, run = CliRunner(), tmp_path / "run"
    result = runner.invoke(app, ["train", "MaskedChoice-v0", "--steps", "1024", "--n-envs", "4", "-p", "n_steps=64",
                                 "-p", "env_kwargs.mask=obs", "--eval-episodes", "2", "--threads", "1",
                                 "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    for command in (["eval", str(run), "--episodes", "2"], ["export", str(run)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, result.output
    spec = json.loads((run / "export" / "policy.onnx.json").read_text())
    assert [(i["name"], i["dtype"], i["shape"]) for i in spec["inputs"]] == [
        ("obs", "float32", ["batch", 8]), ("action_mask", "bool", ["batch", 8])]


@pytest.mark.parametrize("recurrent", [None, "lstm"])
def test_each_trunk_and_the_mask_read_their_columns_whether_side_by_side_or_apart(recurrent):
    layout = ObsLayout((("observation", 3), ("action_mask", 4), ("state", 2)), "action_mask")
    kind = RecurrentActorCritic if recurrent else ActorCritic
    net = kind(gym.spaces.Box(-1, 1, (layout.size,)), gym.spaces.Discrete(4),
               NetworkConfig(hidden=(8,), recurrent=recurrent, recurrent_size=8), layout)
    x, logits = torch.randn(5, layout.size), torch.randn(5, 4)
    assert net._spans == {"actor": (0, 3), "critic": None, "mask": (3, 4)}  # views, and a gather for the critic
    assert torch.equal(net._actor_in(x), x[:, [0, 1, 2]])
    assert torch.equal(net._critic_in(x), x[:, [0, 1, 2, 7, 8]])
    assert torch.equal(net._masked(logits, x), logits.masked_fill(x[:, 3:7] < 0.5, MASKED_LOGIT))
