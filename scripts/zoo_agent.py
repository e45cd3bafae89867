"""Cut a trained run down to a zoo agent: ``python scripts/zoo_agent.py RUN NAME [--best] [--episodes N]``.

Writes ``zoo/NAME/`` with what acting needs: the run's ``config.yaml``, the weights (its final model, or with
``--best`` those of its best periodic evaluation), ``meta.json`` with a note saying which, and ``eval.json``
whose ``latest`` entry is a fresh evaluation of the shipped weights, made as the run's periodic evaluations
are (``rlcli.training.evaluation.evaluate_run``: N episodes, or for a turn-based game N games from each seat against
each of its evaluation opponents, with the win, draw and loss rates), beside the run's own history.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rlcli.runs.checkpoint import write_json
from rlcli.runs.rundir import RunDir
from rlcli.training.agents import agent_from_run, make_env, resolve_device
from rlcli.training.evaluation import evaluate_run
from rlcli.training.train import PERIODIC_EVAL_ENVS

REPO = Path(__file__).resolve().parent.parent


def fresh_evaluation(run: RunDir, best: bool, episodes: int, seed: int) -> dict:
    """The evaluation entry of the shipped weights, in the format of the run's own history."""
    cfg = run.cfg.model_copy(update={"eval": run.cfg.eval.model_copy(update={"episodes": episodes})})
    env = make_env(cfg, min(PERIODIC_EVAL_ENVS, episodes), seed)
    try:
        agent = agent_from_run(run, env, resolve_device("cpu"), best)
        result, rates = evaluate_run(agent, env, cfg, seed)
    finally:
        env.close()
    return {"step": best_step(run) if best else run.steps, **result.as_dict(), **({"rates": rates} if rates else {})}


def best_step(run: RunDir) -> int:
    """The step of the best periodic evaluation: the last of the highest, as training keeps it."""
    top = max(entry["mean_return"] for entry in run.history)
    return [entry["step"] for entry in run.history if entry["mean_return"] == top][-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory")
    parser.add_argument("name", help="the agent's name in the zoo (what `rlcli play NAME` takes)")
    parser.add_argument("--best", action="store_true", help="ship the weights of the best periodic evaluation")
    parser.add_argument("--episodes", type=int, default=10, help="episodes (a game: games per seat) [10]")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the fresh evaluation [12345]")
    parser.add_argument("--zoo", type=Path, default=REPO / "zoo", help="the zoo folder [zoo/]")
    args = parser.parse_args(argv)
    run = RunDir.open(args.run)
    weights = args.run / "best" / "model.safetensors" if args.best else args.run / "model.safetensors"
    if not weights.is_file() or not run.history:
        parser.error(f"{args.run} has no {weights.relative_to(args.run)} or no eval.json to ship")
    entry = fresh_evaluation(run, args.best, args.episodes, args.seed)
    out = args.zoo / args.name
    if out.exists():  # nothing of an earlier agent of that name stays
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copyfile(args.run / "config.yaml", out / "config.yaml")
    shutil.copyfile(weights, out / "model.safetensors")
    meta = {**run.meta, "steps": entry["step"]}  # the shipped weights' step, as `rlcli zoo` lists it
    which = "the weights of this run's best periodic evaluation" if args.best else "this run's final weights"
    meta["note"] = (f"{which}, from a run of {run.steps:,} steps; eval.json's latest entry is a fresh evaluation "
                    f"of them ({args.episodes} {'games from each seat' if 'rates' in entry else 'episodes'}, "
                    f"seed {args.seed})")
    write_json(out / "meta.json", meta)
    write_json(out / "eval.json", {"latest": entry, "history": run.history})
    rates = entry.get("rates", {})
    shown = ", ".join(f"{k} {v:.1%}" for k, v in rates.items() if k.count("/") == 1 and "_" not in k)
    print(f"{out}: {entry['mean_return']:.2f} ± {entry['std_return']:.2f} over {entry['episodes']} "
          f"episodes{'; ' + shown if shown else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
