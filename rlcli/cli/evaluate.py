"""``rlcli eval``: N episodes of a trained agent, mean ± std, optionally as JSON."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app
from rlcli.cli.options import Backend, Best, Deterministic, Episodes, Run, Seed
from rlcli.runs.rundir import RunDir
from rlcli.share.names import resolve_run
from rlcli.training.agents import EVAL_ENVS, agent_from_run, make_env, resolve_device
from rlcli.training.evaluation import SEATS, evaluate, match
from rlcli.training.selfplay.opponents import FIXED


@app.command("eval", help="Evaluate a trained agent. Example: rlcli eval runs/CartPole-v1__ppo__s0__... --json")
def eval_command(
    run: Run,
    episodes: Episodes = 10,
    deterministic: Deterministic = True,
    best: Best = False,
    seed: Seed = 12345,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    backend: Annotated[Backend | None, typer.Option(
        help="Env backend [default: the one the run was trained with].", show_default=False)] = None,
    opponent: Annotated[Optional[str], typer.Option(
        metavar="random|scripted|RUN", show_default=False,
        help="A turn-based game's opponent: uniform random, the game's scripted player, or another run; "
             "--episodes games from each seat.")] = None,
) -> None:
    import torch

    torch.set_num_threads(1)
    loaded = RunDir.open(resolve_run(run))
    if opponent is not None:
        show_match(loaded, opponent, episodes, seed, deterministic, best, as_json)
        return
    if backend is not None:
        loaded.cfg = loaded.cfg.model_copy(update={"env": loaded.cfg.env.model_copy(update={"backend": backend.value})})
    env = make_env(loaded.cfg, min(EVAL_ENVS, episodes), seed)
    agent = agent_from_run(loaded, env, resolve_device("cpu"), best)
    result = evaluate(agent, env, episodes, deterministic)
    env.close()
    if as_json:
        typer.echo(json.dumps({"run": str(loaded.path), "env_id": loaded.cfg.env.id,
                               "algo": loaded.cfg.algo.algo, "deterministic": deterministic,
                               "steps_trained": loaded.meta.get("steps"), **result.as_dict()}))
        return
    typer.echo(f"{loaded.cfg.env.id} ({loaded.cfg.algo.algo}, {loaded.meta.get('steps', 0):,} steps): "
               f"{result.mean:.2f} ± {result.std:.2f} over {len(result.returns)} episodes, "
               f"mean length {sum(result.lengths) / len(result.lengths):.1f}")
    if result.agent_returns:
        means = ", ".join(f"{name} {sum(r) / len(r):.2f}" for name, r in result.agent_returns.items())
        typer.echo(f"per agent: {means}")


def show_match(run: RunDir, opponent: str, games: int, seed: int, deterministic: bool, best: bool,
               as_json: bool) -> None:
    """Win, draw and loss rates of a game's agent against ``opponent``, from each seat and overall."""
    against = opponent if opponent in FIXED else RunDir.open(resolve_run(opponent))
    result = match(run, against, games, seed, deterministic, best)
    rates = result.rates()
    if as_json:
        typer.echo(json.dumps({"run": str(run.path), "env_id": run.cfg.env.id, "opponent": result.opponent,
                               "games_per_seat": games, "deterministic": deterministic, **rates,
                               "returns": {SEATS[i]: s.returns for i, s in enumerate(result.seats)}}))
        return
    typer.echo(f"{run.cfg.env.id} ({run.meta.get('steps', 0):,} steps) against {result.opponent}, "
               f"{games} games from each seat:")
    rows = [(f"{SEATS[i]}_", f"as {SEATS[i]} player") for i in range(len(result.seats))] + [("", "overall")]
    for prefix, label in rows:
        typer.echo(f"  {label:<17} win {rates[prefix + 'win']:6.1%}  draw {rates[prefix + 'draw']:6.1%}  "
                   f"loss {rates[prefix + 'loss']:6.1%}")
