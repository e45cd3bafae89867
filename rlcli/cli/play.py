"""``rlcli play``: watch an agent in a window, or record it to an mp4 (headless works)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app
from rlcli.cli.options import Best, Deterministic, Episodes, Run, Seed
from rlcli.rundir import RunDir
from rlcli.runs import resolve_run


@app.command(help="Watch an agent play, or record it: rlcli play RUN --video agent.mp4")
def play(
    run: Run,
    episodes: Episodes = 1,
    deterministic: Deterministic = True,
    best: Best = False,
    seed: Seed = 0,
    video: Annotated[Optional[Path], typer.Option(help="Write an mp4 here instead of a window.")] = None,
) -> None:
    from rlcli.evaluation import record_episodes, render_off_screen
    from rlcli.video import check_video_path, write_mp4

    headless = video is not None or not os.environ.get("DISPLAY")
    if headless:
        render_off_screen()
        video = video or Path("play.mp4")
        check_video_path(video)  # before the episodes, which may take minutes
    import torch

    torch.set_num_threads(1)
    played = record_episodes(RunDir.open(resolve_run(run)), episodes, seed, deterministic=deterministic,
                             render_mode="rgb_array" if headless else "human", best=best)
    for i, (ret, length) in enumerate(zip(played.result.returns, played.result.lengths, strict=True), 1):
        typer.echo(f"episode {i}: return {ret:.2f}, length {length}")
    if video is not None:
        write_mp4(video, played.frames, played.fps)
        typer.echo(f"wrote {video} ({len(played.frames)} frames, {played.fps} fps)")
