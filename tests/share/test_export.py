"""rlcli export: the written file acts as the PyTorch policy does (checked here independently of the
command's own check, on other observations), and rlcli zoo lists the agents that ship with rlcli."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.cli import app
from rlcli.config import NetworkConfig
from rlcli.runs.rundir import RunDir
from rlcli.share.export import TOLERANCE, _export_onnx, _export_torchscript, compare, export_policy, policy_module
from rlcli.share.names import resolve_run, zoo_agents
from rlcli.training.agents import agent_from_run, make_env

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

runner = CliRunner()
PPO_TINY = ["--steps", "1024", "--n-envs", "4", "-p", "n_steps=64", "-p", "minibatch_size=128", "-p", "n_epochs=2",
            "--eval-episodes", "2", "--threads", "1"]
RUNS = {
    "ppo-cartpole": ["CartPole-v1", *PPO_TINY],  # discrete, MLP
    "ppo-pendulum": ["Pendulum-v1", *PPO_TINY, "-p", "normalize_obs=true"],  # continuous, clipped
    "sac-pendulum": ["Pendulum-v1", "--algo", "sac", "--steps", "400", "-p", "learning_starts=200", "-p",
                     "log_every=200", "-p", "batch_size=64", "-p", "normalize_obs=true", "--eval-episodes", "1",
                     "--threads", "1"],
    # Nature CNN on uint8 frames; short episodes keep the evaluation of an untrained agent quick
    "ppo-pong": ["Pong-v5", "--steps", "256", "--n-envs", "4", "-p", "n_steps=64", "-p", "minibatch_size=128",
                 "-p", "n_epochs=1", "-p", "env_kwargs.max_episode_steps=100", "--eval-episodes", "1",
                 "--threads", "1"],
}


def _atari_available() -> bool:
    has = importlib.util.find_spec
    return bool(has("envpool") or (has("ale_py") and has("cv2")))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Trained on first use, once per module."""
    root, trained = tmp_path_factory.mktemp("export-runs"), {}

    def get(name: str):
        if name == "ppo-pong" and not _atari_available():
            pytest.skip("Atari needs envpool, or ale-py and opencv")
        if name not in trained:
            result = runner.invoke(app, ["train", *RUNS[name], "--run-dir", str(root / name)])
            assert result.exit_code == 0, result.output
            trained[name] = root / name
        return trained[name]

    return get


def _fresh_observations(cfg, n_envs: int = 4, steps: int = 24, seed: int = 777) -> np.ndarray:
    """Observations the export's own check never saw: another seed, random actions."""
    env = make_env(cfg, n_envs, seed)
    rng = np.random.default_rng(seed)
    space = env.single_action_space
    obs, seen = env.reset(), []
    for _ in range(steps):
        seen.append(obs.copy())
        if isinstance(space, gym.spaces.Discrete):
            actions = rng.integers(0, space.n, n_envs)
        else:
            actions = rng.uniform(space.low, space.high, (n_envs, *space.shape)).astype(np.float32)
        obs = env.step(actions).obs
    env.close()
    return np.concatenate(seen)


def _run_file(path, fmt: str, obs: np.ndarray) -> np.ndarray:
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (inp,), (out,) = session.get_inputs(), session.get_outputs()
        assert (inp.name, out.name) == ("obs", "action") and inp.shape[0] == "batch"
        return session.run(None, {"obs": obs})[0]
    with torch.no_grad():
        return torch.jit.load(str(path))(torch.as_tensor(obs)).numpy()


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("name", list(RUNS))
def test_exported_policy_acts_as_the_pytorch_policy(runs, tmp_path, name, fmt):
    run = runs(name)
    report = export_policy(run, fmt, tmp_path / f"policy.{fmt}", check_batch=32)
    assert report.path.is_file() and report.spec_path == tmp_path / f"policy.{fmt}.json"
    assert report.n_checked == 32 and report.tolerance == TOLERANCE and report.max_abs_diff <= TOLERANCE
    assert not list(tmp_path.glob(".*partial"))

    loaded = RunDir.open(run)
    spec = json.loads(report.spec_path.read_text())
    assert spec["format"] == fmt and spec["env_id"] == loaded.cfg.env.id and spec["algo"] == name[:3]
    assert spec["check"]["max_abs_diff"] == report.max_abs_diff and spec["check"]["observations"] == 32
    assert spec["obs_normalization"]["included"] == ("pendulum" in name)
    (inp,), (out,) = spec["inputs"], spec["outputs"]
    preprocessing = spec["preprocessing"]
    assert preprocessing["backend"] in ("envpool", "gymnasium")
    if name == "ppo-pong":  # what a user must reproduce to feed the file from their own ALE
        settings = preprocessing["settings"]
        assert preprocessing["group"] == "atari" and settings["max_episode_steps"] == 100  # the run's env_kwargs
        assert (settings["frame_skip"], settings["gray_scale"], settings["noop_max"]) == (4, True, 30)
        assert inp["shape"][1:] == [settings["stack_num"], settings["img_height"], settings["img_width"]] == [4, 84, 84]
        assert any("4 emulator frames" in step for step in preprocessing["observation"])
    else:
        assert preprocessing["group"] == "classic" and "settings" not in preprocessing
        assert "own observation" in preprocessing["observation"]

    obs = _fresh_observations(loaded.cfg)
    assert inp["name"] == "obs" and inp["shape"] == ["batch", *obs.shape[1:]] and inp["dtype"] == str(obs.dtype)
    env = make_env(loaded.cfg, 1, 0)
    agent = agent_from_run(loaded, env, torch.device("cpu"))
    env.close()
    with torch.no_grad():
        expected = agent.predict(torch.as_tensor(obs), deterministic=True).numpy()
    got = _run_file(report.path, fmt, obs)
    assert out["name"] == "action" and out["shape"] == ["batch", *expected.shape[1:]]
    assert got.shape == expected.shape and str(got.dtype) == out["dtype"]
    if spec["action_space"]["type"] == "discrete":
        assert name in ("ppo-cartpole", "ppo-pong") and inp["dtype"] == ("uint8" if name == "ppo-pong" else "float32")
        # where the choices differ, the two actions must be equally likely at float precision
        with torch.no_grad():
            norm = agent.obs_norm(torch.as_tensor(obs))
            gap = agent.net.evaluate(norm, torch.as_tensor(expected)[:, None])[0] - \
                agent.net.evaluate(norm, torch.as_tensor(got)[:, None])[0]
        assert (got == expected).mean() > 0.9 and float(gap.abs().max()) <= TOLERANCE
    else:
        low, high = (np.array(spec["action_space"][k], dtype=np.float32) for k in ("low", "high"))
        assert np.abs(got - expected).max() <= TOLERANCE
        assert (got >= low).all() and (got <= high).all()


def test_cli_prints_the_parity_and_writes_beside_the_run(runs):
    run = runs("ppo-cartpole")
    result = runner.invoke(app, ["export", str(run)])
    assert result.exit_code == 0, result.output
    line = result.output.strip()
    assert re.fullmatch(r"Exported ppo CartPole-v1 policy -> .*policy\.onnx \(\+ policy\.onnx\.json\); checked 64 "
                        r"observations: max \|Δaction\| = 0\.0 \(tolerance 1e-05\)", line), line
    assert (run / "export" / "policy.onnx").is_file() and (run / "export" / "policy.onnx.json").is_file()


def test_a_run_that_cannot_be_written_exports_into_the_working_directory(runs, tmp_path, monkeypatch):
    import os

    from rlcli.share.export import default_out

    run = runs("ppo-cartpole")
    assert default_out(run, "torchscript") == run / "export" / "policy.pt"
    real_access = os.access
    # as for an agent installed by root; permission bits alone would not stop a test run as root
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: path != run and real_access(path, mode, **kw))
    assert default_out(run, "onnx") == Path("export") / run.name / "policy.onnx"
    snapshot = tmp_path / "hub" / "models--alice--ppo-CartPole-v1" / "snapshots" / ("0" * 40)
    assert default_out(snapshot, "onnx") == Path("export") / "alice__ppo-CartPole-v1" / "policy.onnx"


def test_a_failed_check_is_one_line_exit_2_and_writes_nothing(runs, tmp_path, monkeypatch):
    monkeypatch.setattr("rlcli.share.export.TOLERANCE", -1.0)  # no file can pass
    out = tmp_path / "p.pt"
    result = runner.invoke(app, ["export", str(runs("ppo-cartpole")), "-f", "torchscript", "-o", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: the exported torchscript policy does not match the PyTorch policy: max |Δaction| = 0 over 64 "
        "observations (tolerance -1.0); nothing was written"]
    assert not list(tmp_path.iterdir())


def test_an_out_path_ending_in_a_slash_is_a_folder_to_make(runs, tmp_path):
    folder = f"{tmp_path / 'new'}/"
    result = runner.invoke(app, ["export", str(runs("ppo-cartpole")), "-f", "torchscript", "-o", folder])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["policy.pt", "policy.pt.json"]


def test_a_refused_best_export_leaves_no_folder_behind(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs("ppo-cartpole"), run, ignore=shutil.ignore_patterns("best", "export"))
    result = runner.invoke(app, ["export", str(run), "--best", "-f", "torchscript"])
    assert result.exit_code == 2 and "best" in result.output, result.output
    assert not (run / "export").exists()


@pytest.mark.parametrize("args, expected", [
    (["export", "no/such/run"], "error: no run directory or zoo agent named 'no/such/run'"),
    (["export", ".", "--format", "tflite"], "'tflite' is not one of 'onnx', 'torchscript'"),
])
def test_bad_input_is_one_line_exit_2(args, expected):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and expected in result.output


def _multidiscrete_agent(head_scale: float) -> PPO:
    torch.manual_seed(0)
    agent = PPO(PPOConfig(normalize_obs=True, network=NetworkConfig(hidden=(16,))),
                gym.spaces.Box(-5, 5, (3,)), gym.spaces.MultiDiscrete([3, 4]), 1, torch.device("cpu"))
    agent.obs_norm.rms.update(torch.randn(100, 3) * 3 + 1)
    with torch.no_grad():
        agent.net.actor_head.weight.mul_(head_scale)
    return agent


@pytest.mark.parametrize("exporter", [_export_onnx, _export_torchscript])
def test_multidiscrete_takes_the_argmax_per_dimension(tmp_path, exporter):
    agent = _multidiscrete_agent(100.0)
    obs = (np.random.default_rng(0).normal(size=(40, 3)) * 4).astype(np.float32)  # some beyond the clip
    module = policy_module(agent)
    run_file = exporter(module, torch.as_tensor(obs[:2]), tmp_path / "policy")
    assert run_file(obs).shape == (40, 2)
    assert compare(module, run_file, obs) == (0.0, 0)
    # a file that picks other actions is caught, and an impossible action is infinitely wrong
    assert compare(module, lambda o: (run_file(o) + 1) % [3, 4], obs)[0] > 0.01
    assert compare(module, lambda o: run_file(o) + 10, obs)[0] == float("inf")


@pytest.mark.parametrize("exporter", [_export_onnx, _export_torchscript])
def test_an_elu_network_exports_the_standard_op_and_acts_alike(tmp_path, exporter):
    torch.manual_seed(0)
    agent = PPO(PPOConfig(network=NetworkConfig(hidden=(16, 16), activation="elu")),
                gym.spaces.Box(-5, 5, (3,)), gym.spaces.Box(-1, 1, (2,)), 1, torch.device("cpu"))
    obs = (np.random.default_rng(0).normal(size=(40, 3)) * 3).astype(np.float32)
    module = policy_module(agent)
    run_file = exporter(module, torch.as_tensor(obs[:2]), tmp_path / "policy")
    assert compare(module, run_file, obs)[0] <= TOLERANCE
    if exporter is _export_torchscript:
        assert "aten::elu" in str(torch.jit.load(str(tmp_path / "policy")).inlined_graph)
    else:
        import onnx

        assert "Elu" in {node.op_type for node in onnx.load(str(tmp_path / "policy")).graph.node}


def test_discrete_choices_among_exact_ties_count_as_near_ties():
    agent = _multidiscrete_agent(0.0)  # zero weights, zero bias: every action equally likely
    torch.nn.init.zeros_(agent.net.actor_head.bias)
    module = policy_module(agent)
    obs = np.zeros((5, 3), dtype=np.float32)
    assert compare(module, lambda o: np.full((len(o), 2), 2), obs) == (0.0, 10)


def test_zoo_lists_its_agents_and_they_resolve_by_name(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLCLI_ZOO_DIR", str(tmp_path))
    result = runner.invoke(app, ["zoo"])
    assert result.exit_code == 0 and result.output == f"No zoo agents in {tmp_path}.\n"

    shutil.copytree(runs("ppo-cartpole"), tmp_path / "CartPole-v1")
    (tmp_path / "notes").mkdir()  # not a run directory: not listed
    latest = json.loads((tmp_path / "CartPole-v1" / "eval.json").read_text())["latest"]
    assert resolve_run("CartPole-v1") == resolve_run("zoo:CartPole-v1") == tmp_path / "CartPole-v1"
    (agent,) = zoo_agents()
    assert (agent.name, agent.env_id, agent.algo, agent.steps) == ("CartPole-v1", "CartPole-v1", "ppo", 1024)

    result = runner.invoke(app, ["zoo"])
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()
    assert header.split() == ["agent", "env", "algo", "steps", "evaluated", "return", "path"]
    assert row.split()[:4] == ["CartPole-v1", "CartPole-v1", "ppo", "1,024"]
    assert f"{latest['mean_return']:.2f} ± {latest['std_return']:.2f} (2 episodes)" in row
    assert row.endswith(str(tmp_path / "CartPole-v1"))

    listed = json.loads(runner.invoke(app, ["zoo", "--json"]).output)
    assert listed[0]["mean_return"] == latest["mean_return"] and listed[0]["episodes"] == 2

    result = runner.invoke(app, ["eval", "zoo:CartPole-v1", "-n", "1", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["run"] == str(tmp_path / "CartPole-v1")
