"""The compile switch: when it compiles, that a compiled update computes the eager one's numbers, that
nothing recompiles once a run is under way, and that a compiled run learns, resumes and exports."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from typer.testing import CliRunner

from rlcli.algos import resolve
from rlcli.algos.compiling import PROFILER_MARK, CompiledStep, compile_enabled
from rlcli.algos.learners import RolloutCollector
from rlcli.algos.sac import SACConfig
from rlcli.cli.app import app
from rlcli.training.agents import build_agent, make_env

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_auto_compiles_on_a_gpu_and_on_off_are_what_they_say():
    assert compile_enabled("auto", CUDA) and not compile_enabled("auto", CPU)
    assert compile_enabled("on", CPU) and not compile_enabled("off", CUDA)


def test_a_compiler_failure_runs_the_step_eagerly_from_then_on():
    calls = []
    step = CompiledStep(lambda x: calls.append(x) or x * 2, dynamic=None)

    def broken(x):
        raise torch._dynamo.exc.InternalTorchDynamoError("IndexError: list index out of range")

    step.compiled = broken
    with pytest.warns(UserWarning, match="runs eagerly: torch.compile failed .InternalTorchDynamoError"):
        assert step(torch.tensor(3.0)) == 6.0
    assert step.failed and len(calls) == 1
    assert step(torch.tensor(4.0)) == 8.0 and len(calls) == 2  # eager now, without trying the compiler again


def test_an_error_of_the_step_itself_is_not_taken_for_the_compilers():
    step = CompiledStep(lambda x: x, dynamic=None)

    def failing(x):
        raise ValueError("shapes do not match")

    step.compiled = failing
    with pytest.raises(ValueError, match="shapes do not match"):
        step(torch.tensor(1.0))
    assert not step.failed


def test_a_compiled_step_keeps_the_compilers_note_on_torchs_profiler_marks_off_the_console():
    import logging

    logger = logging.getLogger("torch._dynamo.variables.ctx_manager")

    def record(msg: str) -> logging.LogRecord:
        return logger.makeRecord(logger.name, logging.WARNING, __file__, 0, msg, (torch.autograd.profiler,), None)

    CompiledStep(lambda x: x, dynamic=None)
    assert not logger.filter(record(PROFILER_MARK))
    assert logger.filter(record("Graph break from %s"))  # the compiler's other warnings still show


def test_a_run_saved_with_the_yes_no_switch_still_loads():
    assert SACConfig.model_validate({"compile": True}).compile == "on"
    assert SACConfig.model_validate({"compile": False}).compile == "off"


@pytest.fixture
def graphs(monkeypatch):
    """Every graph torch.compile builds, counted by a backend that runs it as traced (no code generation)."""
    built: list[object] = []
    real = torch.compile

    def counting(fn, mode=None, **kwargs):
        def backend(gm, example_inputs):
            built.append(gm)
            return gm.forward
        return real(fn, backend=backend)

    torch.compiler.reset()
    monkeypatch.setattr(torch, "compile", counting)
    yield built
    torch.compiler.reset()


@pytest.mark.parametrize("env_id,overrides", [
    ("CartPole-v1", {}),
    ("Pendulum-v1", {"network": {"hidden": [32, 32]}, "clip_range_schedule": "linear", "lr_schedule": "linear"}),
])
def test_nothing_recompiles_after_the_first_iteration(graphs, env_id, overrides):
    """Schedules move the learning rate and clip range every iteration: as tensors, they change values, not
    the graphs; the rows left after reset rows vary, which graphs built for any row count take. (A last
    minibatch of exactly one row would still be compiled once more: torch specialises sizes 0 and 1.)"""
    torch.manual_seed(0)
    cfg = resolve("ppo", env_id, backend="gymnasium", overrides={"compile": "on", "n_envs": 4, "n_steps": 16,
                                                                 "minibatch_size": 32, **overrides})
    env = make_env(cfg, cfg.algo.n_envs, seed=0)
    agent = build_agent(cfg, env, CPU)
    collector = RolloutCollector(env, agent, cfg.algo.n_steps, overlap=False)
    counts = []
    for i in range(4):
        agent.update(collector.collect().batch(cfg.algo.gamma, cfg.algo.gae_lambda), progress=i / 4)
        counts.append(len(graphs))
    env.close()
    assert counts[0] > 0 and counts[1:] == [counts[0]] * 3


def test_a_compiled_update_computes_the_eager_updates_numbers():
    """The same rollout, the same minibatch order: the compiled step (inductor's generated code) moves
    every weight as the eager step does, to float32 rounding of a reordered sum."""
    cfg = resolve("ppo", "CartPole-v1", backend="gymnasium", overrides={"n_envs": 4, "n_steps": 32,
                                                                        "minibatch_size": 64, "n_epochs": 2})
    env = make_env(cfg, 4, seed=0)
    torch.manual_seed(0)
    eager = build_agent(cfg, env, CPU)
    batch = RolloutCollector(env, eager, 32, overlap=False).collect().batch(0.99, 0.95)
    env.close()
    compiled_cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"compile": "on"})})
    compiled = build_agent(compiled_cfg, env, CPU)
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))
    results = []
    for agent in (eager, compiled):
        torch.manual_seed(1)
        results.append(agent.update(batch, progress=0.0))
    for a, b in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for key in ("losses/policy", "losses/value", "losses/approx_kl"):
        assert results[1][key] == pytest.approx(results[0][key], rel=1e-3, abs=1e-6)


def test_a_compiled_run_learns_cartpole_resumes_and_exports(tmp_path):
    run = tmp_path / "run"
    runner = CliRunner()
    out = runner.invoke(app, ["train", "CartPole-v1", "--compile", "--seed", "1", "--steps", "50000",
                              "--stop-at", "475", "--run-dir", str(run)])
    assert out.exit_code == 0, out.output
    meta = json.loads((run / "meta.json").read_text())
    assert meta["best_eval"] >= 475 and meta["steps"] <= 50_176, out.output
    exported = runner.invoke(app, ["export", str(run), "--format", "torchscript"])
    assert exported.exit_code == 0 and "max |Δaction|" in exported.output, exported.output
    more = meta["steps"] + 2_048
    resumed = runner.invoke(app, ["train", "--resume", str(run), "--steps", str(more), "--stop-at", "501"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((run / "meta.json").read_text())["steps"] >= more
