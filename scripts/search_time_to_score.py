"""Searches PPO hyperparameters for the shortest wall time to an evaluation score (Optuna TPE).

`rlcli tune` maximises the return reached within a budget; the CartPole row of `bench_peers.py`
measures something else, the seconds until a periodic evaluation first reaches a score. This script
searches for that directly: each trial trains one setting on several seeds, in this process, on one
torch thread, with the evaluation cadence and stopping rule of the benchmark, and scores the mean
seconds (a seed that never reaches the score counts 1.5x the seconds it ran). The search seeds must
not be the ones a result is reported on: validate the winner on fresh seeds with ``--validate``.

    python scripts/search_time_to_score.py --study /tmp/cp.journal --trials 60          # search
    python scripts/search_time_to_score.py --study /tmp/cp.journal --show 5             # best five
    python scripts/search_time_to_score.py --validate '{"n_epochs": 10}' --seeds 200-219  # fresh seeds

Run two searches on the same ``--study`` file to use both cores of a 2-core machine (the journal
file takes concurrent writers); their timings then share the machine alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CAP_PENALTY = 1.5


def parse_seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def sample(trial: Any) -> dict[str, Any]:
    n_envs = trial.suggest_categorical("n_envs", [4, 8, 16])
    n_steps = trial.suggest_categorical("n_steps", [16, 32, 64, 128])
    return {
        "n_envs": n_envs,
        "n_steps": n_steps,
        "minibatch_size": min(trial.suggest_categorical("minibatch_size", [64, 128, 256, 512, 1024]),
                              n_envs * n_steps),
        "n_epochs": trial.suggest_int("n_epochs", 1, 20),
        "gamma": trial.suggest_categorical("gamma", [0.95, 0.98, 0.99]),
        "gae_lambda": trial.suggest_categorical("gae_lambda", [0.8, 0.9, 0.95]),
        "learning_rate": trial.suggest_float("learning_rate", 3e-4, 5e-3, log=True),
        "lr_schedule": trial.suggest_categorical("lr_schedule", ["linear", "constant"]),
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3]),
        "clip_range_schedule": trial.suggest_categorical("clip_range_schedule", ["constant", "linear"]),
        "ent_coef": trial.suggest_categorical("ent_coef", [0.0, 0.001, 0.01]),
    }


def time_to_score(env_id: str, overrides: dict[str, Any], seed: int, score: float, every: int,
                  budget: int, cap: int) -> tuple[float, int, bool]:
    """(seconds from the call to train() to the evaluation that reached ``score``, env steps, reached).
    The schedules run over ``budget`` steps, as in the benchmark; training stops at ``cap`` steps."""
    from rlcli.algos import resolve
    from rlcli.training.train import train

    cfg = resolve("ppo", env_id, overrides={**overrides, "steps": budget}, seed=seed, torch_threads=1,
                  eval_every=every, stop_at=score)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        state = train(cfg, Path(tmp) / "run", callbacks=[lambda s: s.step >= cap])
        seconds = time.perf_counter() - start
    reached = state.eval_return is not None and state.eval_return >= score
    return seconds, state.step, reached


def run_seeds(args: argparse.Namespace, overrides: dict[str, Any], seeds: list[int]) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        seconds, steps, reached = time_to_score(args.env, overrides, seed, args.score, args.every,
                                                args.budget, args.cap)
        rows.append({"seed": seed, "seconds": seconds, "steps": steps, "reached": reached})
    return rows


def cost(rows: list[dict[str, Any]]) -> float:
    return statistics.fmean(r["seconds"] * (1.0 if r["reached"] else CAP_PENALTY) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--score", type=float, default=475.0)
    parser.add_argument("--every", type=int, default=2000, help="env steps between evaluations")
    parser.add_argument("--budget", type=int, default=100_000, help="the run's steps (schedules' length)")
    parser.add_argument("--cap", type=int, default=40_000, help="env steps after which a seed gives up")
    parser.add_argument("--seeds", default="100-104", help="FIRST-LAST")
    parser.add_argument("--study", type=Path, help="Optuna journal file (shared by parallel searches)")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--sampler-seed", type=int, help="seed of the TPE sampler, to repeat a search")
    parser.add_argument("--show", type=int, help="print the best N trials of --study and exit")
    parser.add_argument("--validate", help="JSON overrides to time on --seeds instead of searching")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)

    if args.validate is not None:
        rows = run_seeds(args, json.loads(args.validate), seeds)
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"mean_cost": cost(rows), "median_seconds": statistics.median(r["seconds"] for r in rows),
                          "median_steps": statistics.median(r["steps"] for r in rows),
                          "reached": sum(r["reached"] for r in rows), "of": len(rows)}))
        return

    import optuna

    if args.study is None:
        sys.exit("--study FILE is needed to search or show")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(args.study)))
    study = optuna.create_study(study_name=f"time-to-{args.score:g}-{args.env}", storage=storage,
                                direction="minimize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(n_startup_trials=16, seed=args.sampler_seed))
    if args.show:
        done = [t for t in study.trials if t.value is not None]
        for t in sorted(done, key=lambda t: t.value)[:args.show]:
            print(json.dumps({"value": round(t.value, 3), **t.user_attrs, "params": t.params}))
        return

    def objective(trial: Any) -> float:
        overrides = sample(trial)
        rows = run_seeds(args, overrides, seeds)
        trial.set_user_attr("overrides", overrides)
        trial.set_user_attr("seconds", [r["seconds"] for r in rows])
        trial.set_user_attr("steps", [r["steps"] for r in rows])
        trial.set_user_attr("reached", [r["reached"] for r in rows])
        return cost(rows)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=args.trials,
                   callbacks=[lambda s, t: print(f"trial {t.number}: {t.value:.2f} s  {t.user_attrs}", flush=True)])


if __name__ == "__main__":
    main()
