"""rl_games 1.6.5's PPO trained with its own MuJoCo envpool configs, written as an rlcli benchmark
directory, so that ``rlcli benchmark compare`` and ``sb3_runs.py --side-by-side`` read it like
rlcli's own.

    pip install rl-games==1.6.5   # with --no-deps where its pins clash; it needs tensorboardX, setproctitle
    python scripts/rlgames_runs.py Hopper-v5 --seeds 1 2 3 4 5 --out benchmarks/rlgames-hopper-1m
    rlcli benchmark --envs Hopper-v5 --algo ppo --seeds 1 2 3 4 5 --eval-every 100000 --eval-episodes 10 \\
        --out benchmarks/ppo-hopper-1m
    python scripts/rlgames_runs.py --side-by-side benchmarks/ppo-hopper-1m benchmarks/rlgames-hopper-1m \\
        --out benchmarks/rlcli-vs-rlgames

``--side-by-side`` writes ``side_by_side.md``: rlcli's compare (P(rlcli > rl_games) with bootstrap intervals),
a per-seed table of final and best evaluations with each side's worst seed against its mean, and both mean
curves (a figure with matplotlib).

Settings: ``rl_games/configs/mujoco/<env>_envpool.yaml`` as the package ships it (Hopper, Walker2d,
HalfCheetah, Ant), with the env id, the seed, ``device: cpu`` and ``max_frames`` set; rl_games stops at the
first epoch that reaches the budget, so its runs end up to one rollout past it. One torch thread
(``--threads``).

Evaluation: rlcli's own code and env, the one ``rlcli train`` evaluates on (``rlcli.training.evaluation.
evaluate`` on envpool, seeded ``seed + 1_000_003``), rl_games' deterministic action (the mean, clamped to
[-1, 1] and rescaled to the bounds, as its player does, with its observation normaliser in eval mode),
every ``--eval-every`` env steps after that epoch's update, and at the end: the final policy.

Files: ``OUT/sb3_runs/ENV__ppo__sSEED.json`` per finished seed (its row, every evaluation's returns, the
rl_games config), then ``OUT/results.json`` and ``results.csv``. A finished seed with the same settings is
skipped when the command is run again; a stopped one starts over (a seed is a few minutes).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from sb3_runs import RUNS, Progress, evaluation_env, side_by_side, summary, versions, write_table
from torch import nn

from rlcli.algos import resolve
from rlcli.benchmark.report import _finished, _table
from rlcli.benchmark.results import RunResult, load_results
from rlcli.config import RunConfig
from rlcli.errors import UsageError
from rlcli.runs import checkpoint
from rlcli.training.evaluation import evaluate

CONFIGS = {"Hopper-v5": "hopper", "Walker2d-v5": "walker2d", "HalfCheetah-v5": "halfcheetah", "Ant-v5": "ant"}


def rlgames_config(env_id: str, seed: int, steps: int) -> dict[str, Any]:
    """rl_games' shipped config for this env with the env id, seed, CPU device and budget set."""
    import yaml

    if env_id not in CONFIGS:
        raise UsageError(f"no rl_games envpool config for {env_id}; choose one of {', '.join(CONFIGS)}")
    path = f"configs/mujoco/{CONFIGS[env_id]}_envpool.yaml"
    config = yaml.safe_load(importlib.resources.files("rl_games").joinpath(path).read_text())
    params = config["params"]
    params["seed"] = seed
    settings = params["config"]
    settings["env_config"].update(env_name=env_id, seed=seed)
    settings.update(device="cpu", device_name="cpu", max_epochs=-1, max_frames=steps, save_frequency=0)
    return config


class RLGamesPolicy(nn.Module):
    """Raw observations -> env actions as rl_games' player acts deterministically: the mean of its
    normalised-input model, clamped to [-1, 1] and rescaled to the action bounds."""

    def __init__(self, agent: Any) -> None:
        super().__init__()
        self.agent = agent

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        from rl_games.common.a2c_common import rescale_actions

        out = self.agent.model({"is_train": False, "prev_actions": None, "obs": obs.float(), "rnn_states": None})
        return rescale_actions(self.agent.actions_low, self.agent.actions_high, torch.clamp(out["mus"], -1.0, 1.0))


class RLGamesAgent:
    """What ``rlcli.training.evaluation.evaluate`` reads of an agent: its device and its policy."""

    device = torch.device("cpu")

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def policy(self, deterministic: bool = True) -> nn.Module:
        if not deterministic:
            raise UsageError("rl_games runs are evaluated deterministically here")
        return RLGamesPolicy(self.agent)


def eval_config(env_id: str, seed: int, steps: int, eval_every: int, episodes: int) -> RunConfig:
    """The RunConfig whose evaluation env (backend, env count, seed) rlcli's own run would use."""
    return resolve("ppo", env_id, backend="envpool", overrides={"steps": steps}, eval_every=eval_every,
                   eval_episodes=episodes, seed=seed, device="cpu", torch_threads=1, env_threads=1)


def train_seed(env_id: str, seed: int, steps: int, cfg: RunConfig, log: Any) -> dict[str, Any]:
    """One rl_games run to ``steps`` env steps, evaluated every ``cfg.eval.every`` steps and at the end."""
    from rl_games.torch_runner import Runner

    config = rlgames_config(env_id, seed, steps)
    env, progress = evaluation_env(cfg), Progress()
    done = {"frames": 0, "last": 0}
    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="rlgames-") as tmp:
        os.chdir(tmp)  # rl_games writes runs/ where it starts
        try:
            runner = Runner()
            runner.load(config)
            runner.reset()
            agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
            policy_agent, train_epoch = RLGamesAgent(agent), agent.train_epoch

            def evaluate_now() -> None:
                started, training = time.perf_counter(), agent.model.training
                agent.model.eval()
                with torch.no_grad():
                    result = evaluate(policy_agent, env, cfg.eval.episodes, True)
                agent.model.train(training)
                progress.evaluations.append((done["frames"], result, time.perf_counter() - started))
                done["last"] = done["frames"]
                log(f"{env_id} seed {seed}: step {done['frames']:,} eval {result.mean:.1f} ± {result.std:.1f}")

            def train_epoch_then_evaluate() -> Any:
                out = train_epoch()
                done["frames"] += agent.batch_size_envs
                every = cfg.eval.every
                if every and done["frames"] // every > done["last"] // every and done["frames"] < steps:
                    evaluate_now()
                return out

            agent.train_epoch = train_epoch_then_evaluate
            progress.started = time.perf_counter()
            agent.train()
            evaluate_now()
        finally:
            os.chdir(here)
    env.close()
    return record_of(env_id, seed, steps, progress, config)


def record_of(env_id: str, seed: int, steps: int, progress: Progress, config: dict[str, Any]) -> dict[str, Any]:
    """A finished seed's row in rlcli's results format, its evaluations and rl_games' config."""
    evaluations, wall = progress.evaluations, progress.wall
    final, trained = evaluations[-1][1], evaluations[-1][0]
    row = RunResult(algo="ppo", env_id=env_id, seed=seed, budget=steps, status="finished", steps=trained,
                    final_return=final.mean, final_std=final.std,
                    best_return=max(r.mean for _, r, _ in evaluations), wall_time_s=wall, sps=trained / wall,
                    backend="rl_games envpool (eval: rlcli envpool)",
                    versions={**versions(), "rl_games": metadata.version("rl_games")},
                    git_commit=checkpoint.git_commit(), curve=tuple((step, r.mean) for step, r, _ in evaluations))
    return {"row": row.model_dump(mode="json"), "settings": config,
            "evaluations": progress.as_dict()["evaluations"]}


def record_path(out: Path, env_id: str, seed: int) -> Path:
    return out / RUNS / f"{env_id}__ppo__s{seed}.json"


def run(env_id: str, seeds: list[int], steps: int, eval_every: int, episodes: int, out: Path,
        log: Any) -> list[RunResult]:
    """Trains each seed not yet finished with these settings; returns the table of all finished seeds."""
    (out / RUNS).mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        path, config = record_path(out, env_id, seed), rlgames_config(env_id, seed, steps)
        if path.is_file():
            if json.loads(path.read_text())["settings"] != config:
                raise UsageError(f"{path} ran with other settings; use another --out or delete it")
            log(f"{env_id} seed {seed}: finished before, skipped")
            continue
        record = train_seed(env_id, seed, steps, eval_config(env_id, seed, steps, eval_every, episodes), log)
        checkpoint.write_json(path, record)
        write_table(out)
    return write_table(out)


def seed_rows(rows_a: list[RunResult], rows_b: list[RunResult]) -> list[str]:
    """Per env, each seed's final and best evaluation on both sides, then each side's mean and its worst
    seed as a fraction of that mean."""
    lines = []
    for env_id in sorted({r.env_id for r in rows_a} | {r.env_id for r in rows_b}):
        by_seed: dict[int, list[str]] = {}
        for i, rows in enumerate((rows_a, rows_b)):
            for r in rows:
                if r.env_id == env_id:
                    cells = by_seed.setdefault(r.seed, ["", "", "", ""])
                    cells[2 * i:2 * i + 2] = [f"{r.final_return:,.1f}", f"{r.best_return:,.1f}"]
        table = [[str(seed), *cells] for seed, cells in sorted(by_seed.items())]
        for label in ("mean", "worst / mean"):
            cells = []
            for side in (rows_a, rows_b):
                finals = [r.final_return for r in side if r.env_id == env_id]
                bests = [r.best_return for r in side if r.env_id == env_id]
                for values in (finals, bests):
                    if not values:
                        cells.append("")
                        continue
                    mean = sum(values) / len(values)
                    cells.append(f"{mean:,.1f}" if label == "mean" else f"{min(values) / mean:.2f}")
            table.append([label, *cells])
        lines += [f"### {env_id}: per seed", "", *_table(["seed", "A final", "A best", "B final", "B best"], table), ""]
    return lines


def report(dir_a: Path, dir_b: Path, out: Path) -> Path:
    """``out/side_by_side.md``: the compare and curves of ``sb3_runs.side_by_side``, then the per-seed
    tables."""
    path = side_by_side(dir_a, dir_b, out)
    rows_a, rows_b = _finished(load_results(dir_a)), _finished(load_results(dir_b))
    text = path.read_text().replace("\n## Curves\n", "\n## Per seed\n\n" + "\n".join(seed_rows(rows_a, rows_b))
                                    + "\n## Curves\n", 1)
    path.write_text(text)
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", nargs="?", choices=sorted(CONFIGS), help="MuJoCo env id with an rl_games config")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--eval-every", type=int, default=100_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, help="benchmark directory to write (the report's, with --side-by-side)")
    parser.add_argument("--side-by-side", nargs=2, type=Path, metavar=("RLCLI_DIR", "RLGAMES_DIR"),
                        help="write side_by_side.md (compare, per-seed tables, curves) into --out")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    try:  # the rl_games runs, or their report
        if args.side_by_side:
            print(f"wrote {report(*args.side_by_side, args.out or args.side_by_side[1])}")
            return 0
        if args.env is None or args.out is None:
            raise UsageError("name an env and --out DIR (or --side-by-side RLCLI_DIR RLGAMES_DIR)")
        rows = run(args.env, args.seeds, args.steps, args.eval_every, args.eval_episodes, args.out,
                   lambda text: print(text, flush=True))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(rows, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
