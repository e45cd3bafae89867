"""Agents of different spaces in one env: each group its own columns, mask and policy network."""

import numpy as np
import pytest
import torch

from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.envs import make_vec_env
from rlcli.nets.grouped import GroupedActorCritic

pytest.importorskip("mpe2")
SPEAKER_LISTENER = "mpe2.simple_speaker_listener_v4"


@pytest.fixture(scope="module")
def env():
    env = make_vec_env(SPEAKER_LISTENER, 4, 0)
    yield env
    env.close()


def test_each_group_has_its_own_columns_and_mask_over_the_shared_actions(env):
    layout = env.obs_layout
    assert [(g.name, g.actions) for g in layout.groups] == [("speaker", 3), ("listener", 5)]
    assert env.single_action_space.n == 5
    obs = env.reset()
    speaker, listener = obs[0::2], obs[1::2]
    assert (speaker[:, layout.span("observation/listener")] == 0).all()
    assert (listener[:, layout.span("observation/speaker")] == 0).all()
    assert (speaker[:, layout.span("group")] == [1, 0]).all() and (listener[:, layout.span("group")] == [0, 1]).all()
    assert (speaker[:, layout.span("action_mask/speaker")] == 1).all()
    assert np.array_equal(speaker[:, layout.span("observation/speaker")],
                          np.stack([e.aec_env.unwrapped.observe("speaker_0") for e in env.envs]))


def test_groups_act_within_their_own_actions_read_only_their_own_inputs_and_replay_their_log_probs(env):
    torch.manual_seed(0)
    agent = PPO(PPOConfig(), env.single_observation_space, env.single_action_space, env.num_envs,
                torch.device("cpu"), obs_layout=env.obs_layout)
    assert isinstance(agent.net, GroupedActorCritic) and len(agent.net.groups) == 2
    obs = torch.as_tensor(env.reset())
    sample = agent.net.sample(obs)
    assert sample.actions.shape == (8, 1) and (sample.actions[0::2] < 3).all()
    log_probs, entropy, values = agent.net.evaluate(obs, sample.actions)
    assert torch.allclose(log_probs, sample.log_probs, atol=1e-6)
    assert torch.allclose(values, agent.net.value_of(sample), atol=1e-6)
    # a speaker's outputs do not move with the listener's columns, and the other way round
    layout = env.obs_layout
    x = obs.clone().requires_grad_(True)
    _, _, v = agent.net.evaluate(x, sample.actions)
    v[0::2].sum().backward()
    assert (x.grad[:, layout.span("observation/listener")] == 0).all()
    assert x.grad[0::2, layout.span("observation/speaker")].abs().sum() > 0
    # the deterministic policy never picks an action beyond a speaker's three
    logits = agent.net.actor_output(obs)
    assert (logits[0::2, 3:] <= -1e7).all()
    assert (agent.policy(True)(obs)[0::2] < 3).all()


def test_a_grouped_agent_learns_through_the_one_ppo_update(env):
    from rlcli.algos.learners import OnPolicyLearner
    from rlcli.algos.threads import ThreadPlan

    torch.manual_seed(0)
    cfg = PPOConfig(n_steps=25, minibatch_size=100, n_epochs=2, n_envs=4)
    agent = PPO(cfg, env.single_observation_space, env.single_action_space, env.num_envs, torch.device("cpu"),
                obs_layout=env.obs_layout)
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    steps, metrics = OnPolicyLearner(env, agent, cfg, ThreadPlan(1, 1)).iterate(0)
    assert steps == 100 and np.isfinite(metrics["losses/policy"])
    moved = [k for k, v in agent.state_dict().items() if not torch.equal(v, before[k])]
    assert any(".groups.0." in k or "groups.0." in k for k in moved) and any("groups.1." in k for k in moved)


def test_random_play_keeps_each_agent_within_its_own_actions():
    from rlcli.benchmark.scores import random_policy_return

    mean, std = random_policy_return(SPEAKER_LISTENER, episodes=3)
    assert np.isfinite(mean) and mean < 0 and std >= 0
