"""``rlcli hyperparams``: the hyperparameters a run of an env would train with, where each came from, and
what each is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from rlcli.algos import DEFAULT, explain
from rlcli.cli.app import app
from rlcli.cli.options import AlgoName
from rlcli.config import parse_overrides


@app.command("hyperparams", help="Show the hyperparameters a run would train with, where each came from "
                                 "(hyperparams/ALGO.yml's default, group or entry, --config, -p) and what each "
                                 "is, e.g. rlcli hyperparams Hopper-v5 --algo ppo -p n_envs=8")
def hyperparams(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help="Environment id.", show_default=False)],
    algo: AlgoName = None,
    params: Annotated[Optional[list[str]], typer.Option(
        "--param", "-p", help="Hyperparameter override key=value (repeatable), as train takes it.")] = None,
    config_file: Annotated[Optional[Path], typer.Option("--config", help="YAML of hyperparameters.")] = None,
    n_envs: Annotated[Optional[int], typer.Option(min=1, help="Parallel envs, as train takes it.")] = None,
    env_module: Annotated[Optional[str], typer.Option(help="Module to import that registers env ids.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    overrides: dict[str, Any] = parse_overrides(params or [])
    if n_envs is not None:
        overrides["n_envs"] = n_envs
    cfg, settings = explain(algo or DEFAULT, env_id, env_module=env_module, config_file=config_file,
                            overrides=overrides)
    if as_json:
        typer.echo(json.dumps({"env": cfg.env.id, "algo": cfg.algo.algo,
                               "hyperparameters": [s._asdict() for s in settings]}, default=str))
        return
    table = Table(title=f"{cfg.env.id} with {cfg.algo.algo}", title_justify="left", show_edge=False)
    for column in ("hyperparameter", "value", "from", "what it is"):
        table.add_column(column, overflow="fold")
    for s in settings:
        table.add_row(s.key, json.dumps(s.value), s.source, s.description)
    Console(soft_wrap=False).print(table)
