"""An algorithm is one registry entry: a small extra one, registered here, trains, evaluates and resumes
through the command line like the built-in ones."""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
import torch
from typer.testing import CliRunner

from rlcli import algos, config
from rlcli.algos import REGISTRY, ppo, register, spec_for
from rlcli.algos.base import AlgoSpec
from rlcli.algos.buffers import RolloutBatch
from rlcli.algos.learners import OnPolicyLearner
from rlcli.algos.threads import ThreadPlan
from rlcli.cli import app
from rlcli.runs.rundir import RunDir

runner = CliRunner()


class A2CConfig(ppo.PPOConfig):
    """Advantage actor-critic: one full-batch gradient step per rollout, no clipping."""

    algo: Literal["a2c"] = "a2c"  # type: ignore[assignment]
    n_epochs: int = 1


class A2C(ppo.PPO):
    def update(self, batch: RolloutBatch, progress: float) -> dict[str, float]:
        log_probs, entropy, values = self.net.evaluate(batch.obs, batch.actions)
        policy_loss = -(batch.advantages * log_probs).mean()
        value_loss = 0.5 * (values - batch.returns).square().mean()
        loss = policy_loss + self.cfg.vf_coef * value_loss - self.cfg.ent_coef * entropy.mean()
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        return {"losses/policy": float(policy_loss.detach()), "losses/value": float(value_loss.detach())}


def one_core(cfg: config.RunConfig, cores: int) -> ThreadPlan:
    return ThreadPlan(1, 1)


def test_an_extra_algorithm_trains_evaluates_and_resumes_through_the_cli(tmp_path, monkeypatch):
    hyperparams = tmp_path / "a2c.yml"
    hyperparams.write_text("default: {n_envs: 4, n_steps: 32, minibatch_size: 128, learning_rate: 7.0e-4}\n"
                           "CartPole-v1: {steps: 1024}\n")
    monkeypatch.setattr(algos, "REGISTRY", dict(REGISTRY))
    register(AlgoSpec("a2c", A2CConfig, A2C, OnPolicyLearner, ppo.check_spaces, one_core,
                      {"learning_rate": {"low": 1.0e-4, "high": 1.0e-2, "log": True}}, hyperparams=hyperparams))
    assert spec_for("a2c").config is A2CConfig

    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "CartPole-v1", "--algo", "a2c", "--run-dir", str(run),
                                 "--eval-episodes", "2", "--threads", "1"])
    assert result.exit_code == 0, result.output
    loaded = RunDir.open(run)
    assert isinstance(loaded.cfg.algo, A2CConfig) and loaded.cfg.algo.learning_rate == 7.0e-4
    assert loaded.steps == 1024 and loaded.meta["algo"] == "a2c"
    assert "losses/policy" in (run / "metrics.csv").read_text()
    torch.manual_seed(0)  # seed 0: the weights the run started from
    initial = A2C(loaded.cfg.algo, gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2), 4, torch.device("cpu"))
    trained = loaded.model()
    assert trained.keys() == initial.state_dict().keys()
    assert not torch.equal(trained["policy.actor_head.weight"], initial.state_dict()["policy.actor_head.weight"])

    result = runner.invoke(app, ["eval", str(run), "-n", "2"])
    assert result.exit_code == 0 and "CartPole-v1 (a2c, 1,024 steps)" in result.output, result.output
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "1152", "--algo", "a2c"])
    assert result.exit_code == 0 and RunDir.open(run).steps == 1152, result.output


def test_an_unknown_algorithm_is_one_line_naming_the_registered_ones(tmp_path):
    result = runner.invoke(app, ["train", "CartPole-v1", "--algo", "c51", "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and result.output.strip() == ("error: unknown algorithm 'c51'; choose one of: ppo, "
                                                               "sac, dqn, pqn, td3")
