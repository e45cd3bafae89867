"""What a learner reports as ``charts/transitions``: the env steps that were transitions, not the reset row each
env steps after an episode's end, so that throughput compares with a library whose envs reset inside the
ending step."""

import pytest
import torch

from rlcli.algos import resolve
from rlcli.algos.threads import ThreadPlan
from rlcli.training.agents import build_agent, build_learner, make_env

CASES = {
    "dqn": {"learning_starts": 64, "batch_size": 16, "log_every": 200},
    "ppo": {"n_envs": 4, "n_steps": 50, "minibatch_size": 100, "n_epochs": 1},
}


@pytest.mark.parametrize("algo", sorted(CASES))
def test_transitions_are_the_steps_less_reset_rows_and_sum_to_the_episodes_lengths(algo):
    cfg = resolve(algo, "CartPole-v1", overrides=CASES[algo], torch_threads=1, seed=0)
    env = make_env(cfg, cfg.algo.n_envs, 0)
    try:
        learner = build_learner(cfg, env, build_agent(cfg, env, torch.device("cpu")), ThreadPlan(1, 1))
        steps = transitions = 0
        for _ in range(4):
            taken, metrics = learner.iterate(steps)
            steps, transitions = steps + taken, transitions + metrics["charts/transitions"]
        tracker = learner.episodes if algo == "dqn" else learner.collector.episodes
        finished = tracker.drain()[1]
    finally:
        env.close()
    # each episode's length counts its transitions; every episode that ended before the last step cost one
    # reset row (CartPole's early episodes last tens of steps, so there are many)
    assert transitions == sum(finished) + tracker.lengths.sum()
    assert steps - len(finished) <= transitions <= steps - len(finished) + cfg.algo.n_envs
    assert len(finished) >= 10
