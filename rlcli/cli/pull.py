"""``rlcli pull``: download an agent published on the Hugging Face Hub into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app


@app.command(help="Download a published agent into a run directory. Example: rlcli pull user/ppo-CartPole-v1")
def pull(
    repo: Annotated[str, typer.Argument(metavar="REPO", help="user/name or hf://user/name, optionally @revision.",
                                        show_default=False)],
    run_dir: Annotated[Optional[Path], typer.Option(
        help="Where to put it \\[default: runs/USER__NAME].", show_default=False)] = None,
) -> None:
    from rlcli.runs.rundir import RunDir
    from rlcli.share import hub

    repo_id, _ = hub.parse_repo_id(repo)
    path = run_dir or Path("runs") / hub.safe_repo_name(repo_id)
    loaded = RunDir.open(hub.download(repo, path))
    typer.echo(f"pulled {repo_id} into {path}: {loaded.cfg.env.id} ({loaded.cfg.algo.algo}, "
               f"{loaded.meta.get('steps', 0):,} steps)\ntry: rlcli eval {path}   rlcli play {path} --video out.mp4")
