"""``rlcli zoo``: the trained agents that ship with rlcli, with their evaluated scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlcli.cli.app import app
from rlcli.share.names import ZooAgent, zoo_agents, zoo_dir


@app.command("zoo", help="List the agents in zoo/ with their scores; play one with: rlcli play CartPole-v1")
def zoo_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    agents = zoo_agents()
    if as_json:
        typer.echo(json.dumps([{**agent._asdict(), "path": str(agent.path)} for agent in agents]))
        return
    if not agents:
        typer.echo(f"No zoo agents in {zoo_dir()}.")
        return
    rows = [("agent", "env", "algo", "steps", "evaluated return", "path")]
    rows += [(a.name, a.env_id, a.algo, f"{a.steps:,}" if a.steps is not None else "-", _score(a),
              _shown(a.path)) for a in agents]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])


def _score(agent: ZooAgent) -> str:
    if agent.mean_return is None:
        return "not evaluated"
    if agent.rates:  # a game: win/draw/loss against each evaluation opponent, over both seats
        opponents = dict.fromkeys(key.split("/")[0] for key in agent.rates)
        return "; ".join(f"vs {o} win {agent.rates[f'{o}/win']:.0%} draw {agent.rates[f'{o}/draw']:.0%} "
                         f"loss {agent.rates[f'{o}/loss']:.0%}" for o in opponents)
    std = f" ± {agent.std_return:.2f}" if agent.std_return is not None else ""
    episodes = f" ({agent.episodes} episode{'s' if agent.episodes != 1 else ''})" if agent.episodes else ""
    return f"{agent.mean_return:.2f}{std}{episodes}"


def _shown(path: Path) -> str:
    """Relative to the working directory where it lies below it (a checkout), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
