"""``rlcli eval``: N episodes of a trained agent, mean ± std, optionally as JSON."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rlcli.agents import EVAL_ENVS, agent_from_run, make_env, resolve_device
from rlcli.cli.app import app
from rlcli.cli.options import Backend, Best, Deterministic, Episodes, Run, Seed
from rlcli.evaluation import evaluate
from rlcli.rundir import RunDir
from rlcli.runs import resolve_run


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
) -> None:
    import torch

    torch.set_num_threads(1)
    loaded = RunDir.open(resolve_run(run))
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
