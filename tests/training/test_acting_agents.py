"""An agent that only acts (what eval, play and the zoo build) has no optimiser: constructing a torch
optimiser imports torch's compiler stack, about 1.5 s of a command's start-up; a learner builds them before
its first step."""

import subprocess
import sys
from functools import cached_property

import pytest
import torch

from rlcli.algos import resolve
from rlcli.training.agents import build_agent, build_learner, make_env, thread_plan

CASES = [("ppo", "CartPole-v1"), ("pqn", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
         ("td3", "Pendulum-v1")]


def test_an_agent_that_only_acts_imports_no_compiler_stack():
    code = f"""
import sys
import torch
from rlcli.algos import resolve
from rlcli.training.agents import build_agent, make_env
for algo, env_id in {CASES!r}:
    cfg = resolve(algo, env_id, seed=0)
    env = make_env(cfg, 2, 0)
    agent = build_agent(cfg, env, torch.device("cpu"))
    actions = agent.policy()(torch.as_tensor(env.reset(), dtype=torch.float32))
    assert len(actions) == 2, (algo, actions)
    env.close()
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("algo", "env_id"), CASES)
def test_a_learner_builds_its_agents_optimisers_before_the_first_step(algo, env_id):
    cfg = resolve(algo, env_id, seed=0, torch_threads=1)
    env = make_env(cfg, cfg.algo.n_envs, 0)
    try:
        agent = build_agent(cfg, env, torch.device("cpu"))
        names = [name for name in dir(type(agent))
                 if name.endswith("optimizer") and isinstance(getattr(type(agent), name), cached_property)]
        assert names and not any(name in vars(agent) for name in names)
        build_learner(cfg, env, agent, thread_plan(cfg))
        assert all(isinstance(vars(agent)[name], torch.optim.Adam) for name in names)
        params = {id(p) for optimizer in agent.optimizers().values() for group in optimizer.param_groups
                  for p in group["params"]}
        assert params == {id(p) for p in agent.parameters() if p.requires_grad}
    finally:
        env.close()
