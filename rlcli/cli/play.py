"""``rlcli play``: watch an agent in a window, record it to an mp4 (headless works), or play a turn-based
game against it in the terminal."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app
from rlcli.cli.frames import frame_counter
from rlcli.cli.options import Best, Deterministic, Episodes, Run, Seed
from rlcli.runs.rundir import RunDir
from rlcli.share.names import resolve_run


@app.command(help="Watch an agent play, or record it: rlcli play RUN --video agent.mp4; play a game against it: "
                  "rlcli play RUN --human")
def play(
    run: Run,
    episodes: Episodes = 1,
    deterministic: Deterministic = True,
    best: Best = False,
    seed: Seed = 0,
    video: Annotated[Optional[Path], typer.Option(
        help="Write an mp4 here instead of a window (without a display: play.mp4 here, or play-2.mp4, ... "
             "where that exists).", show_default=False)] = None,
    human: Annotated[bool, typer.Option("--human", help="Play a turn-based game against the agent here.")] = False,
    seat: Annotated[int, typer.Option(min=1, help="Your seat with --human: 1 moves first.")] = 1,
    opponent: Annotated[Optional[str], typer.Option(
        metavar="random|scripted|RUN", show_default=False,
        help="A turn-based game's opponent of the agent [default: random].")] = None,
) -> None:
    import torch

    torch.set_num_threads(1)
    loaded = RunDir.open(resolve_run(run))
    if human:
        play_human(loaded, seat - 1, episodes, seed, deterministic, best)
        return
    from rlcli.share.video import check_video_path, write_mp4
    from rlcli.training.evaluation import record_episodes, render_off_screen
    from rlcli.training.selfplay.opponents import FIXED

    headless = video is not None or not os.environ.get("DISPLAY")
    if headless:
        render_off_screen()
        video = video or unused_name(Path("play.mp4"))  # never a file the user did not name
        check_video_path(video)  # before the episodes, which may take minutes
    against = None if opponent is None else opponent if opponent in FIXED else RunDir.open(resolve_run(opponent))
    with frame_counter(headless) as counted:
        played = record_episodes(loaded, episodes, seed, deterministic=deterministic,
                                 render_mode="rgb_array" if headless else "human", best=best, opponent=against,
                                 on_frame=counted)
    for i, (ret, length) in enumerate(zip(played.result.returns, played.result.lengths, strict=True), 1):
        typer.echo(f"episode {i}: return {ret:.2f}, length {length}")
    if video is not None:
        assert played.fps is not None  # rendered off-screen: it has a rate
        write_mp4(video, played.frames, played.fps)
        typer.echo(f"wrote {video} ({len(played.frames)} frames, {played.fps} fps)")


def unused_name(path: Path) -> Path:
    """``path``, or where it exists the first of ``stem-2.suffix``, ``stem-3.suffix``, ... that does not."""
    candidates = (path.with_name(f"{path.stem}-{n}{path.suffix}") for n in itertools.count(2))
    return path if not path.exists() else next(p for p in candidates if not p.exists())


def play_human(run: RunDir, seat: int, games: int, seed: int, deterministic: bool, best: bool) -> None:
    """Games in the terminal: the board, the legal moves, the person's move asked for until it is legal."""
    from rlcli.share.human import HumanGame, IllegalMove

    session = HumanGame(run, seat, seed, deterministic, best)
    try:
        for number in range(1, games + 1):
            session.new_game()
            typer.echo(f"Game {number}: you play {session.players[seat]} (seat {seat + 1}); "
                       f"the agent plays the other seat.")
            while not session.over:
                if session.human_to_move:
                    typer.echo(session.board_text())
                    legal = ", ".join(session.move_name(a) for a in session.legal_moves())
                    while True:
                        try:
                            session.play(typer.prompt(f"Your move ({legal})"))
                            break
                        except IllegalMove as e:
                            typer.echo(str(e))
                else:
                    typer.echo(f"The agent plays {session.move_name(session.agent_move())}.")
            typer.echo(session.board_text())
            result = session.returned
            typer.echo("You win." if result > 0 else "The agent wins." if result < 0 else "A draw.")
    finally:
        session.close()
