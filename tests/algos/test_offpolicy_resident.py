"""The off-policy learner on a device-resident env (the torch backend, on the CPU device): its steps, random
warm-up actions, episode returns, n-step accumulator and replay stay tensors on the device, never numpy arrays;
what the replay holds is what the env returned; an action mask is kept on either side; and Ctrl-C then
``--resume`` is exact."""

import json

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlcli.algos import resolve
from rlcli.algos.arrays import DeviceTensors, NumpyArrays
from rlcli.algos.learners import OffPolicyLearner
from rlcli.algos.threads import ThreadPlan
from rlcli.envs import ResidentEnv, StepResult
from rlcli.envs.base import SteppedOnWait
from rlcli.envs.host import HostArrays
from rlcli.envs.snapshot import Snapshot
from rlcli.envs.torch_backend import TorchVecEnv
from rlcli.training.agents import build_agent, build_learner, make_env
from rlcli.training.train import TrainingInterrupted, train
from tests.training.test_resume_exact import _assert_same_run, _interrupt_at

CPU = torch.device("cpu")
SMALL = {"sac": {"actor_hidden": [32], "critic_hidden": [32]}, "dqn": {"hidden": [32]}}


def _learner(cfg, env):
    return build_learner(cfg, env, build_agent(cfg, env, CPU), ThreadPlan(1, 1))


def _recorded(env):
    """``env`` whose steps are recorded as (actions, result) in the list returned beside it."""
    steps, step = [], env.step
    env.step = lambda actions: steps.append((actions, result := step(actions))) or result
    return env, steps


def _expected_rows(first_obs, steps):
    """The one-step transitions of the recorded ``steps`` from ``first_obs``: each step's rows but those after
    a done (a reset row, whose action the env ignored), as (obs, actions, rewards, next_obs, terminated)."""
    rows, obs, real = [], first_obs, torch.ones(len(first_obs), dtype=torch.bool)
    for actions, result in steps:
        rows.append((obs[real], actions.reshape(len(obs), -1)[real].float(), result.reward[real],
                     result.obs[real], result.terminated[real].float()))
        obs, real = result.obs, ~(result.terminated | result.truncated)
    return [torch.cat(column) for column in zip(*rows, strict=True)]


@pytest.mark.parametrize(("algo", "env_id", "overrides"), [
    ("sac", "Pendulum-v1", {"n_envs": 2, "learning_starts": 2000, "batch_size": 64}),
    # the torch backend's discrete task
    ("dqn", "CartPole-v1", {"n_envs": 4, "learning_starts": 500, "utd_ratio": 0.25, "target_update_every": 50}),
], ids=["sac-pendulum", "dqn-cartpole"])
def test_training_on_a_resident_env_keeps_every_step_on_the_device(monkeypatch, algo, env_id, overrides):
    cfg = resolve(algo, env_id, backend="torch", torch_threads=1, seed=1, eval_every=0, eval_episodes=1,
                  overrides={"steps": 3000, "log_every": 500, **SMALL[algo], **overrides})
    numpy_reads = []
    with monkeypatch.context() as patch:
        patch.setattr(HostArrays, "__init__", lambda *a: pytest.fail("the learner went through HostArrays"))
        for name in ("numpy", "__array__"):
            original = getattr(torch.Tensor, name)
            patch.setattr(torch.Tensor, name, lambda self, *a, f=original, n=name, **k: numpy_reads.append(n) or f(
                self, *a, **k))
        env, steps = _recorded(make_env(cfg, cfg.algo.n_envs, cfg.seed, device=CPU))
        assert isinstance(env, ResidentEnv)
        learner = _learner(cfg, env)
        assert isinstance(learner, OffPolicyLearner) and isinstance(learner.arrays, DeviceTensors)
        first_obs, taken, gradient_steps = learner.obs, 0, 0.0
        with HostReads() as reads:
            while taken < cfg.algo.steps:
                n, metrics = learner.iterate(taken)
                taken, gradient_steps = taken + n, gradient_steps + metrics["charts/gradient_steps"]
    assert numpy_reads == []
    # a step reads how many of its rows are transitions (their indices), nothing else; an iteration reads a
    # few scalars, checking that what it stored is finite
    assert reads.counts["rows"] == len(steps), reads.counts
    assert reads.counts["scalars"] <= 4 * cfg.algo.steps // cfg.algo.log_every, reads.counts
    assert all(isinstance(actions, torch.Tensor) for actions, _ in steps)  # random warm-up actions included
    assert gradient_steps > 100 and all(np.isfinite(v) for v in metrics.values()), metrics
    buffer = learner.buffer
    expected = _expected_rows(first_obs, steps)
    assert buffer.size == len(expected[0]) < buffer.capacity  # every transition, none overwritten
    for name, rows in zip(("obs", "actions", "rewards", "next_obs", "terminated"), expected, strict=True):
        assert torch.equal(getattr(buffer, name)[: buffer.size], rows), name
    returns, lengths = learner.drain_episodes()  # read back once, here
    assert len(returns) == int(sum(result.game_over.sum() for _, result in steps)) > 0
    if env_id == "CartPole-v1":
        assert returns == [float(n) for n in lengths]  # a reward of 1 a step


class HostReads(TorchDispatchMode):
    """Counts the ops that read a tensor's values back to the host: a scalar's (``.item()``, ``int()``,
    ``bool()``) and ``nonzero``'s (its size)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = {"rows": 0, "scalars": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.nonzero.default:
            self.counts["rows"] += 1
        elif func is torch.ops.aten._local_scalar_dense.default:
            self.counts["scalars"] += 1
        return func(*args, **(kwargs or {}))


class OnDevice(SteppedOnWait):
    """A numpy vector env presented as a ResidentEnv on the CPU, for a task the torch backend lacks: its arrays
    come and go as tensors (this class, standing for the device, converts them)."""

    device = CPU

    def __init__(self, env) -> None:
        self.env, self.backend, self.num_envs, self.obs_layout = env, env.backend, env.num_envs, env.obs_layout
        self.single_observation_space, self.single_action_space = env.single_observation_space, env.single_action_space

    def reset(self) -> torch.Tensor:
        return torch.as_tensor(self.env.reset())

    def step(self, actions: torch.Tensor) -> StepResult:
        assert isinstance(actions, torch.Tensor)
        return StepResult(*(torch.as_tensor(x) for x in self.env.step(actions.numpy())))

    def close(self) -> None:
        self.env.close()


@pytest.mark.parametrize("resident", [False, True], ids=["numpy", "resident"])
def test_random_warm_up_actions_keep_to_the_action_mask_on_either_side(resident):
    cfg = resolve("dqn", "MaskedChoice-v0", torch_threads=1, seed=3,
                  overrides={"n_envs": 8, "learning_starts": 10_000, "log_every": 400, "hidden": [16]})
    env = make_env(cfg, cfg.algo.n_envs, cfg.seed)
    env, steps = _recorded(OnDevice(env) if resident else env)
    learner = _learner(cfg, env)
    assert isinstance(learner.arrays, DeviceTensors if resident else NumpyArrays)
    first_obs = learner.obs
    learner.iterate(0)
    columns = env.obs_layout.mask_columns()
    taken = torch.cat([torch.as_tensor(actions) for actions, _ in steps])
    allowed = torch.cat([torch.as_tensor(obs)[:, columns] > 0.5 for obs in
                         [first_obs, *(result.obs for _, result in steps[:-1])]])
    assert not allowed.all()  # the mask forbids some actions
    assert allowed.gather(1, taken.unsqueeze(1)).all()
    assert set(taken.tolist()) == set(range(len(columns)))  # and draws each of the others


def test_random_actions_fill_a_box_and_come_from_the_learners_own_generator():
    env = make_env(resolve("sac", "Pendulum-v1", backend="torch"), 4, 0, device=CPU)
    drawn = []
    for _ in range(2):
        torch.manual_seed(7)  # the learner's generator is seeded from torch's, as numpy's is on the host
        learner = _learner(resolve("sac", "Pendulum-v1", backend="torch", overrides={"n_envs": 4}), env)
        drawn.append(learner.random_actions(1000))
    assert isinstance(drawn[0], torch.Tensor) and torch.equal(drawn[0], drawn[1])
    assert drawn[0].shape == (1000, 1) and drawn[0].dtype == torch.float32
    assert drawn[0].min() >= -2.0 and drawn[0].max() < 2.0 and drawn[0].min() < -1.9 and drawn[0].max() > 1.9


@pytest.mark.parametrize(("algo", "env_id", "overrides"), [
    ("sac", "Pendulum-v1", {"batch_size": 32}),
    ("dqn", "CartPole-v1", {"n_envs": 2, "n_step": 3, "prioritized": True, "batch_size": 16,
                            "target_update_every": 20}),
], ids=["sac-pendulum", "dqn-cartpole-n-step-prioritized"])
def test_ctrl_c_in_the_warm_up_then_resume_on_a_resident_env_equals_an_uninterrupted_run(tmp_path, monkeypatch,
                                                                                          algo, env_id, overrides):
    """The random actions' generator, the rows after a reset, the episodes' partial returns and the n-step
    accumulator are saved as tensors and continue where they stopped."""
    cfg = resolve(algo, env_id, backend="torch", eval_every=0, eval_episodes=1, torch_threads=1, seed=2,
                  overrides={"steps": 700, "learning_starts": 400, "log_every": 100, **SMALL[algo], **overrides})
    train(cfg, tmp_path / "whole")
    with monkeypatch.context() as patch:  # in the 3rd iteration, while the actions are still random
        _interrupt_at(patch, TorchVecEnv, "step", 250 // cfg.algo.n_envs)
        with pytest.raises(TrainingInterrupted) as stopped:
            train(cfg, tmp_path / "cut", save_buffer=True)
    assert stopped.value.inexact is None
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert meta["steps"] == 300 and meta["resume"] == {"exact": True}
    train(cfg, tmp_path / "cut", resume=True)
    _assert_same_run(tmp_path / "cut", tmp_path / "whole")


def test_a_resident_run_saved_with_a_host_generator_resumes_from_a_seed_it_gives():
    """Checkpoints from before the warm-up drew on the device hold numpy's generator state: both such loads
    continue with the same draws."""
    host = NumpyArrays(3)
    saved = Snapshot({**host.state().values, "updates_owed": 0.0}, {})
    draws = []
    for _ in range(2):
        device = DeviceTensors(0, CPU)
        device.load_state(saved)
        draws.append(device.random((5,)))
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], DeviceTensors(0, CPU).random((5,)))
