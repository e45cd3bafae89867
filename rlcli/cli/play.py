"""``rlcli play``: watch an agent in a window, or record it to an mp4 (headless works)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlcli import checkpoint
from rlcli.cli import app
from rlcli.cli.options import Best, Deterministic, Episodes, Run, Seed
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
    headless = video is not None or not os.environ.get("DISPLAY")
    if headless:
        os.environ.setdefault("MUJOCO_GL", "egl")  # off-screen MuJoCo rendering without a display
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) draws off-screen
        video = video or Path("play.mp4")
    import torch

    from rlcli.evaluation import evaluate
    from rlcli.train import agent_from_run, make_env, resolve_device
    from rlcli.video import write_mp4

    torch.set_num_threads(1)
    loaded = checkpoint.load(resolve_run(run), best=best)
    env = make_env(loaded.cfg, 1, seed, render_mode="rgb_array" if headless else "human")
    agent = agent_from_run(loaded, env, resolve_device("cpu"))
    frames = []
    on_frame = (lambda: frames.append(env.render())) if headless else None  # type: ignore[attr-defined]
    result = evaluate(agent, env, episodes, deterministic, on_frame=on_frame)
    env.close()
    for i, (ret, length) in enumerate(zip(result.returns, result.lengths, strict=True), 1):
        typer.echo(f"episode {i}: return {ret:.2f}, length {length}")
    if video is not None:
        fps = env.render_fps  # type: ignore[attr-defined]
        write_mp4(video, frames, fps)
        typer.echo(f"wrote {video} ({len(frames)} frames, {fps} fps)")
