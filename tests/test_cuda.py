"""The CUDA path: a GPU changes where the tensors live, nothing else. One update equals the CPU's on the same
batch, a recurrent update replays what the rollout recorded, masks hold, bf16 and ``torch.compile`` train,
Ctrl-C + resume equals an uninterrupted run, self-play, many-agent worlds and a privileged critic train, and a
run trained on the GPU evaluates and exports on the CPU. Skipped where torch sees no CUDA device (CI has none)."""

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.algos.buffers import ReplayBatch
from rlcli.algos.compiling import GraphedStep
from rlcli.algos.learners import RolloutCollector
from rlcli.algos.ppo import evaluated, sequence_rows
from rlcli.cli import app
from rlcli.envs.gymnasium_backend import GymnasiumVecEnv
from rlcli.envs.masked import LENGTH
from rlcli.training.agents import build_agent, make_env, resolve_device
from rlcli.training.train import train
from tests.nets.test_masks import masked_net, rows
from tests.training.test_resume_exact import (
    FEED_FORWARD,
    ITERATION,
    _assert_same_run,
    _cfg,
    _interrupt_at,
    _interrupted_then_resumed,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

runner = CliRunner()


def _agents(env_id: str, overrides: dict, backend: str = "gymnasium"):
    """The same initial agent on the CPU and on the GPU, and a CPU rollout of the first."""
    cfg = resolve("ppo", env_id, backend=backend, eval_episodes=2, overrides=overrides)
    env = make_env(cfg, cfg.algo.n_envs, 0)
    torch.manual_seed(0)
    cpu = build_agent(cfg, env, resolve_device("cpu"))
    torch.manual_seed(0)
    gpu = build_agent(cfg, env, resolve_device("cuda"))
    batch = RolloutCollector(env, cpu, cfg.algo.n_steps, overlap=False).collect().batch(cfg.algo.gamma,
                                                                                          cfg.algo.gae_lambda)
    env.close()
    return cpu, gpu, batch


@pytest.mark.parametrize(("env_id", "network"), [("CartPole-v1", {}), ("CartPoleNoVel-v1", {"recurrent": "lstm"}),
                                                  ("CartPoleNoVel-v1", {"recurrent": "gru", "shared": True})],
                         ids=["mlp", "lstm", "gru-shared"])
def test_one_ppo_update_on_the_gpu_equals_the_cpus_on_the_same_batch(env_id, network):
    # one epoch of one minibatch: the GPU's own minibatch order (its generator) cannot enter
    cpu, gpu, batch = _agents(env_id, {"n_envs": 8, "n_steps": 64, "minibatch_size": 512, "n_epochs": 1,
                                       "network": network})
    assert next(gpu.net.parameters()).is_cuda
    cpu_metrics = cpu.update(batch, progress=0.0)
    gpu_metrics = gpu.update(type(batch)(*(t.cuda() for t in batch)), progress=0.0)
    for (name, a), b in zip(cpu.net.named_parameters(), gpu.net.parameters(), strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-6, msg=name)
    for key, value in cpu_metrics.items():
        assert math.isclose(gpu_metrics[key], value, rel_tol=1e-3, abs_tol=1e-6), (key, value, gpu_metrics[key])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_recurrent_update_on_the_gpu_replays_what_its_rollout_recorded(kind):
    cfg = resolve("ppo", "CartPoleNoVel-v1", backend="gymnasium", eval_episodes=2, overrides={
        "n_envs": 4, "n_steps": 64, "minibatch_size": 128, "network": {"recurrent": kind, "recurrent_size": 16}})
    env = make_env(cfg, 4, 0)
    torch.manual_seed(0)
    agent = build_agent(cfg, env, resolve_device("cuda"))
    collector = RolloutCollector(env, agent, cfg.algo.n_steps, overlap=False)
    batch = [collector.collect().batch(cfg.algo.gamma, cfg.algo.gae_lambda) for _ in range(3)][-1]
    env.close()
    assert batch.starts[1:].any() and batch.state.is_cuda
    for envs in (torch.arange(4, device="cuda"), torch.tensor([2, 0], device="cuda")):
        with torch.no_grad():
            rows = evaluated(agent.net, sequence_rows(batch, envs), agent.training_precision())
            log_probs, _, values, old_log_probs, old_values, *_ = rows
        torch.testing.assert_close(log_probs, old_log_probs, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, old_values, rtol=0, atol=1e-6)


def test_ppo_solves_cartpole_on_the_gpu_and_the_run_evaluates_and_exports_on_the_cpu(tmp_path):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    cfg = resolve("ppo", "CartPole-v1", overrides={"steps": 50_000}, seed=1, eval_every=10_000, eval_episodes=10,
                  device="cuda", torch_threads=1)
    state = train(cfg, run)
    assert state.best_eval is not None and state.best_eval >= 475, state.best_eval
    assert all(t.device.type == "cpu" for t in load_file(run / "model.safetensors").values())
    result = runner.invoke(app, ["eval", str(run), "--episodes", "5", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["mean_return"] >= 475, result.output
    result = runner.invoke(app, ["export", str(run)])
    assert result.exit_code == 0, result.output


def test_masked_actions_are_never_sampled_on_the_gpu():
    torch.manual_seed(0)
    net = masked_net([4], [2.0, 0.0, 1.0, 3.0]).cuda()
    with torch.no_grad():
        actions = net.act(rows([[1, 1, 1, 0]] * 20_000).cuda()).actions.squeeze(-1)
    counts = torch.bincount(actions, minlength=4).cpu().numpy() / len(actions)
    allowed = np.exp([2.0, 0.0, 1.0]) / np.exp([2.0, 0.0, 1.0]).sum()  # the best logit, 3.0, is forbidden
    assert counts[3] == 0 and np.allclose(counts[:3], allowed, atol=0.01), counts


def test_a_masked_run_trained_on_the_gpu_never_takes_a_forbidden_action(tmp_path):
    run = tmp_path / "run"
    cfg = resolve("ppo", "MaskedChoice-v0", backend="gymnasium", eval_episodes=4, device="cuda", torch_threads=1,
                  overrides={"steps": 4096, "n_envs": 4, "n_steps": 64, "env_kwargs": {"mask": "obs"}})
    train(cfg, run)
    result = runner.invoke(app, ["eval", str(run), "--episodes", "8", "--stochastic", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["lengths"] == [LENGTH] * 8  # a forbidden action ends an episode at once


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_nature_cnn_trains_on_pong_on_the_gpu(tmp_path, precision):
    pytest.importorskip("ale_py")
    cfg = resolve("ppo", "Pong-v5", backend="gymnasium", eval_episodes=1, eval_every=0, device="cuda", seed=1,
                  overrides={"steps": 2048, "n_envs": 8, "n_steps": 128, "n_epochs": 2, "precision": precision})
    train(cfg, tmp_path / "run")
    weights = load_file(tmp_path / "run" / "model.safetensors")
    policy = {k: t for k, t in weights.items() if k.startswith("policy.")}  # statistics are float64
    assert policy and all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in policy.values())


def _graphed_and_eager(algo: str, env_id: str, overrides: dict):
    """Two copies of one eager agent on the GPU, the first's update step replayed as CUDA graphs."""
    cfg = resolve(algo, env_id, backend="gymnasium", overrides={**overrides, "compile": "off"}, device="cuda")
    env = make_env(cfg, cfg.algo.n_envs, 0)
    agents = []
    for _ in range(2):
        torch.manual_seed(0)
        agents.append(build_agent(cfg, env, resolve_device("cuda")))
    env.close()
    graphed, eager = agents
    name = "_step" if algo == "ppo" else "_gradient_step"
    setattr(graphed, name, GraphedStep(getattr(graphed, name)))
    return graphed, eager, getattr(graphed, name)


@pytest.mark.parametrize(("algo", "env_id", "overrides", "obs_dim", "actions"),
                         [("sac", "Pendulum-v1", {"policy_delay": 2}, 3, "box"),
                          ("td3", "Pendulum-v1", {"policy_delay": 2}, 3, "box"),
                          ("dqn", "CartPole-v1", {"target_update_every": 2}, 4, "discrete"),
                          ("dqn", "CartPole-v1", {"target_update_every": 2, "quantiles": 8}, 4, "discrete")])
def test_a_graphed_off_policy_update_equals_the_eager_one(algo, env_id, overrides, obs_dim, actions):
    graphed, eager, step = _graphed_and_eager(algo, env_id, overrides)
    generator = torch.Generator().manual_seed(0)
    for i in range(8):  # two warm-ups and a capture of each of the two shapes (actor moved or not), then replays
        action = (torch.rand(256, 1, generator=generator) * 4 - 2 if actions == "box"
                  else torch.randint(0, 2, (256, 1), generator=generator).float())
        batch = ReplayBatch(*(t.cuda() for t in (torch.randn(256, obs_dim, generator=generator), action,
                                                  torch.randn(256, generator=generator),
                                                  torch.randn(256, obs_dim, generator=generator), torch.zeros(256))))
        torch.manual_seed(i)
        a = {k: v.clone() for k, v in graphed.update(batch).items()}
        torch.manual_seed(i)
        b = eager.update(batch)
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], msg=f"update {i}: {key}")
    assert len(step.graphs) == 2 and not step.failed
    for (name, x), y in zip(graphed.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(x, y, msg=name)


def test_a_graphed_ppo_update_equals_the_eager_one():
    # 3 minibatches of 256 rows a epoch (two graphs: full ones and the last, smaller one), 4 epochs
    cpu, _, batch = _agents("CartPole-v1", {"n_envs": 8, "n_steps": 80, "minibatch_size": 256, "n_epochs": 4})
    graphed, eager, step = _graphed_and_eager("ppo", "CartPole-v1", {"n_envs": 8, "n_steps": 80,
                                                                     "minibatch_size": 256, "n_epochs": 4})
    batch = type(batch)(*(t.cuda() for t in batch))
    for update in range(2):
        torch.manual_seed(update)
        a = graphed.update(batch, progress=0.0)
        torch.manual_seed(update)
        b = eager.update(batch, progress=0.0)
        for key, value in b.items():
            assert math.isclose(a[key], value, rel_tol=1e-5, abs_tol=1e-7), (update, key, a[key], value)
    assert len(step.graphs) == 2 and not step.failed
    for (name, x), y in zip(graphed.net.named_parameters(), eager.net.parameters(), strict=True):
        torch.testing.assert_close(x, y, msg=name)


def test_compiled_sac_trains_on_the_gpu(tmp_path):
    cfg = resolve("sac", "Pendulum-v1", overrides={"steps": 6_000, "compile": "on"}, seed=1, eval_every=1_000,
                  eval_episodes=10, device="cuda", torch_threads=1)
    state = train(cfg, tmp_path / "run")
    # the CPU's uncompiled run of tests/test_learning.py reaches -250 at this budget
    assert state.best_eval is not None and state.best_eval >= -250, state.best_eval


def test_ctrl_c_then_resume_on_the_gpu_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    cfg = _cfg("CartPole-v1", FEED_FORWARD, 8, eval_every=4 * ITERATION).model_copy(update={"device": "cuda"})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:
        _interrupt_at(patch, GymnasiumVecEnv, "step_wait", 3 * 32 + 7)
        assert _interrupted_then_resumed(cfg, tmp_path / "cut") == 4 * ITERATION
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")


def test_a_rollout_on_the_torch_backend_on_the_gpu_never_waits_for_it(tmp_path):
    """Envs, acting, storage and episode returns on the GPU: any host sync in the rollout raises."""
    from rlcli.algos.ppo import PPO, PPOConfig
    from rlcli.envs import make_vec_env

    env = make_vec_env("CartPole-v1", 256, 0, "torch", device="cuda")
    cfg = PPOConfig(n_envs=256, n_steps=32, minibatch_size=2048, normalize_obs=True, normalize_reward=True)
    agent = PPO(cfg, env.single_observation_space, env.single_action_space, 256, torch.device("cuda"))
    collector = RolloutCollector(env, agent, cfg.n_steps, overlap=True)
    collector.collect()  # the first: lazy initialisation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        buffer = collector.collect()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert buffer.obs.is_cuda and bool(buffer.dones.any())
    returns, lengths = collector.episodes.drain()
    assert returns and returns == [float(n) for n in lengths]
    cfg_run = resolve("ppo", "CartPole-v1", backend="torch", overrides={"steps": 50_000}, seed=1, eval_every=10_000,
                      eval_episodes=10, device="cuda", torch_threads=1)
    state = train(cfg_run, tmp_path / "run")
    assert state.best_eval is not None and state.best_eval >= 475, state.best_eval


SMALL = ["--n-envs", "4", "-p", "n_steps=32", "-p", "minibatch_size=64", "-p", "n_epochs=1", "--eval-episodes", "2"]


def test_self_play_trains_and_resumes_on_the_gpu_and_its_run_plays_on_the_cpu(tmp_path):
    pytest.importorskip("pettingzoo.classic")
    run = tmp_path / "ttt"
    pool = ["-p", "multiagent.selfplay.snapshot_every=1", "-p", "multiagent.selfplay.pool_size=3"]
    result = runner.invoke(app, ["train", "tictactoe_v3", "--steps", "256", "--device", "cuda", "--run-dir", str(run),
                                 *SMALL, *pool])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "512", "--device", "cuda"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "meta.json").read_text())["steps"] >= 512
    result = runner.invoke(app, ["eval", str(run), "--opponent", "random", "-n", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["opponent"] == "random"


@pytest.mark.parametrize(("env_id", "agents"), [("simple_spread_v3", 3), ("mpe2.simple_speaker_listener_v4", 2)],
                         ids=["shared-policy-central-critic", "groups-of-their-own"])
def test_many_agent_worlds_train_on_the_gpu(tmp_path, env_id, agents):
    pytest.importorskip("mpe2")
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", env_id, "--steps", "400", "--device", "cuda", "--run-dir", str(run),
                                 "--n-envs", "4", "-p", "n_steps=25", "-p", "minibatch_size=100", "-p", "n_epochs=1",
                                 "--eval-episodes", "2"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["eval", str(run), "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["agent_mean_returns"]) == agents


def test_a_privileged_critic_trains_on_the_gpu_and_the_exported_actor_needs_no_state(tmp_path):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "MaskedChoice-v0", "--steps", "1024", "--device", "cuda", "--run-dir",
                                 str(run), "-p", "env_kwargs.mask=obs", "-p", "env_kwargs.delayed=true", *SMALL])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", str(run)])
    assert result.exit_code == 0, result.output
    spec = json.loads((run / "export" / "policy.onnx.json").read_text())
    assert [i["name"] for i in spec["inputs"]] == ["obs", "action_mask"]
