"""Short learning runs with a fixed seed and step budget: does PPO actually learn?"""

from rlcli.algos import resolve
from rlcli.train import train


def test_ppo_solves_cartpole_within_50k_steps(tmp_path):
    cfg = resolve("ppo", "CartPole-v1", overrides={"steps": 50_000}, seed=1, eval_every=10_000, eval_episodes=10)
    state = train(cfg, tmp_path / "run")
    assert state.step <= 50_000 + cfg.algo.batch_size
    assert state.best_eval is not None and state.best_eval >= 475, state.best_eval


def test_sac_swings_up_pendulum_within_15k_steps(tmp_path):
    cfg = resolve("sac", "Pendulum-v1", overrides={"steps": 15_000}, seed=1, eval_every=5_000, eval_episodes=10)
    state = train(cfg, tmp_path / "run")
    assert state.step == 15_000
    assert state.best_eval is not None and state.best_eval >= -250, state.best_eval
