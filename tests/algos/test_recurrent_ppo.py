"""Recurrent PPO: the update replays what the rollout computed (to 1e-6), the state crosses rollouts and
resets where episodes start, and every command (train, eval, play, export, resume) carries it."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.algos.learners import RolloutCollector
from rlcli.algos.ppo import PPO, PPOConfig, evaluated, sequence_rows
from rlcli.cli import app
from rlcli.config import NetworkConfig
from rlcli.errors import UsageError
from rlcli.share.export import TOLERANCE, _export_onnx, _export_torchscript, compare_episodes, policy_module
from rlcli.training.agents import build_agent, make_env, resolve_device
from rlcli.training.evaluation import Episodes

runner = CliRunner()


def _agent_and_rollouts(env_id: str, backend: str, kind: str, shared: bool, rollouts: int = 3):
    cfg = resolve("ppo", env_id, backend=backend, eval_episodes=2, overrides={
        "n_envs": 4, "n_steps": 64, "minibatch_size": 128,
        "network": {"recurrent": kind, "recurrent_size": 16, "shared": shared, "hidden": [32]}})
    torch.manual_seed(0)
    env = make_env(cfg, cfg.algo.n_envs, 0)
    agent = build_agent(cfg, env, resolve_device("cpu"))
    collector = RolloutCollector(env, agent, cfg.algo.n_steps, overlap=False)
    batches = [collector.collect().batch(cfg.algo.gamma, cfg.algo.gae_lambda) for _ in range(rollouts)]
    env.close()
    return agent, batches


@pytest.mark.parametrize("kind, shared", [("lstm", False), ("gru", True)])
@pytest.mark.parametrize("env_id, backend", [("CartPoleNoVel-v1", "gymnasium"), ("CartPole-v1", "envpool")])
def test_before_the_first_gradient_step_the_update_computes_what_the_rollout_recorded(env_id, backend, kind, shared):
    """The decisive test: episode boundaries inside the sequences, the state carried in from the last
    rollout, and the update's replay of each minibatch of env sequences gives the rollout's own
    log-probabilities and values."""
    pytest.importorskip(backend)
    agent, batches = _agent_and_rollouts(env_id, backend, kind, shared)
    batch = batches[-1]
    assert batch.starts[1:].any(), "no episode starts inside the rollout"
    assert batch.state.abs().sum() > 0, "the state did not cross from the previous rollout"
    for envs in (torch.arange(4), torch.tensor([2, 0])):  # the whole rollout, and a minibatch of envs
        with torch.no_grad():
            rows = evaluated(agent.net, sequence_rows(batch, envs), agent.training_precision())
            log_probs, _, values, old_log_probs, old_values, *_ = rows
        assert log_probs.numel() == int(batch.valid[:, envs].sum())
        torch.testing.assert_close(log_probs, old_log_probs, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, old_values, rtol=0, atol=1e-6)


def test_an_update_learns_from_the_valid_rows_of_whole_sequences():
    agent, (batch,) = _agent_and_rollouts("CartPoleNoVel-v1", "gymnasium", "lstm", False, rollouts=1)
    before = [p.detach().clone() for p in agent.net.parameters()]
    metrics = agent.update(batch, progress=0.0)
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    moved = [not torch.equal(a, b) for a, b in zip(before, agent.net.parameters(), strict=True)]
    assert all(moved)  # the memories' weights included


def test_minibatches_must_hold_whole_sequences():
    with pytest.raises(UsageError, match="must be a multiple of n_steps=64"):
        resolve("ppo", "CartPoleNoVel-v1", eval_episodes=2, overrides={
            "n_steps": 64, "minibatch_size": 96, "network": {"recurrent": "lstm"}})


def _recurrent_agent(continuous: bool) -> PPO:
    torch.manual_seed(0)
    action_space = gym.spaces.Box(-1, 1, (2,)) if continuous else gym.spaces.Discrete(3)
    agent = PPO(PPOConfig(network=NetworkConfig(hidden=(16,), recurrent="lstm", recurrent_size=8)),
                gym.spaces.Box(-5, 5, (3,)), action_space, 1, torch.device("cpu"))
    with torch.no_grad():
        agent.net.actor_head.weight.mul_(50.0)  # decisive choices: a wrong state shows in the actions
    return agent


def _episodes() -> Episodes:
    rng = np.random.default_rng(0)
    starts = rng.random((30, 3)) < 0.1
    starts[0] = True
    return Episodes(rng.normal(size=(30, 3, 3)).astype(np.float32), starts)


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("exporter", [_export_onnx, _export_torchscript])
def test_an_exported_recurrent_policy_carries_its_state_over_whole_episodes(tmp_path, exporter, continuous):
    pytest.importorskip("onnxruntime")
    agent = _recurrent_agent(continuous)
    module = policy_module(agent)
    run_file = exporter(module, (torch.zeros(2, 3), torch.zeros(2, module.state_size)), tmp_path / "policy")
    episodes = _episodes()
    assert compare_episodes(module, run_file, episodes)[0] <= TOLERANCE
    # a file that forgets its state is caught
    forgetful = lambda obs, state: run_file(obs, np.zeros_like(state))  # noqa: E731
    assert compare_episodes(module, forgetful, episodes)[0] > 0.01


TINY = ["--steps", "1024", "--n-envs", "4", "-p", "n_steps=32", "-p", "minibatch_size=64", "-p", "n_epochs=2",
        "-p", "network.recurrent=gru", "-p", "network.recurrent_size=16", "--eval-episodes", "2", "--threads", "1"]


def test_train_eval_play_export_and_resume_a_recurrent_run(tmp_path):
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "PendulumNoVel-v1", *TINY, "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["eval", str(run), "--episodes", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["episodes"] == 3
    result = runner.invoke(app, ["play", str(run), "--video", str(tmp_path / "play.mp4"), "--episodes", "1"])
    assert result.exit_code == 0 and (tmp_path / "play.mp4").stat().st_size > 0, result.output
    for fmt in ("onnx", "torchscript"):
        result = runner.invoke(app, ["export", str(run), "-f", fmt])
        assert result.exit_code == 0, result.output
        spec = json.loads(next((run / "export").glob(f"*.{'onnx' if fmt == 'onnx' else 'pt'}.json")).read_text())
        assert [i["name"] for i in spec["inputs"]] == ["obs", "state"]
        assert [o["name"] for o in spec["outputs"]] == ["action", "state_out"]
        assert spec["check"]["max_abs_diff"] <= TOLERANCE
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "2048"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "meta.json").read_text())["steps"] >= 2048


def test_the_built_in_search_space_samples_whole_env_sequences_for_a_recurrent_entry():
    from rlcli.algos import hyperparams_for
    from rlcli.tune.space import default_space

    base = hyperparams_for("ppo", "CartPoleNoVel-v1", "classic")
    default_space("ppo").check(base, " for CartPoleNoVel-v1")  # every combination it can sample is valid


def test_predict_carries_a_recurrent_state():
    agent = _recurrent_agent(continuous=False)
    obs = torch.randn(3, 3)
    actions, state = agent.predict(obs)
    assert actions.shape == (3,) and state.shape == (3, agent.policy().state_size)
    _, again = agent.predict(obs, state=state)
    assert not torch.equal(again, state)  # the memory moved on


@pytest.mark.parametrize("exporter", [_export_onnx, _export_torchscript])
def test_a_recurrent_policy_with_dict_keys_and_a_mask_exports_with_both_and_its_state(tmp_path, exporter):
    """The file takes (obs of the actor's keys, action_mask, state) and returns (action, state_out); the
    check runs over whole episodes with the mask, and a masked action is never the file's choice."""
    pytest.importorskip("onnxruntime")
    from rlcli.envs.layout import ObsLayout
    from rlcli.share.export import ActorInputs, _names

    layout = ObsLayout((("observation", 3), ("state", 2), ("action_mask", 3)), "action_mask")
    torch.manual_seed(0)
    agent = PPO(PPOConfig(network=NetworkConfig(hidden=(16,), recurrent="lstm", recurrent_size=8)),
                gym.spaces.Box(-np.inf, np.inf, (8,)), gym.spaces.Discrete(3), 1, torch.device("cpu"),
                obs_layout=layout)
    with torch.no_grad():
        agent.net.actor_head.weight.mul_(50.0)
    module = ActorInputs(policy_module(agent))
    assert _names(module) == (["obs", "action_mask", "state"], ["action", "state_out"])
    examples = (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, module.state_size))
    run_inputs = exporter(module, examples, tmp_path / "policy")
    rng = np.random.default_rng(1)
    episodes = _episodes()
    masks = rng.random((30, 3, 3)) < 0.6
    masks[..., 0] = True  # one allowed action at least
    flat = np.concatenate([episodes.obs, rng.normal(size=(30, 3, 2)), masks], axis=-1).astype(np.float32)
    flat_episodes = Episodes(flat, episodes.starts)
    run_file = lambda rows, state: run_inputs(*module.split(rows), state)  # noqa: E731
    assert compare_episodes(policy_module(agent), run_file, flat_episodes)[0] <= TOLERANCE
    state = np.zeros((3, module.state_size), dtype=np.float32)
    for rows in flat:
        actions, state = run_file(rows, state)
        assert rows[np.arange(3), 5 + actions].all()  # the chosen action's mask entry is set
    forgetful = lambda rows, state: run_file(rows, np.zeros_like(state))  # noqa: E731
    assert compare_episodes(policy_module(agent), forgetful, flat_episodes)[0] > 0.01
