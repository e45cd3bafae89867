"""The frames' count shown while a recording renders (``play --video``, ``publish``'s replay)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def frame_counter(recording: bool) -> Iterator[Callable[[int], None] | None]:
    """On a terminal, while a recording's frames are rendered: their count and the time taken (a software renderer
    may take a third of a second a frame, minutes for an episode); the line goes when it is done. None where
    nothing is recorded or stderr is no terminal."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not recording or not console.is_terminal:
        yield None
        return
    progress = Progress(SpinnerColumn(), TextColumn("rendering: {task.completed:,.0f} frames"), TimeElapsedColumn(),
                        console=console, transient=True)
    task: TaskID | None = None

    def counted(frames: int) -> None:
        nonlocal task
        if task is None:  # shown from the first frame on, not while an evaluation before the recording runs
            progress.start()
            task = progress.add_task("rendering", total=None)
        progress.update(task, completed=frames)

    try:
        yield counted
    finally:
        progress.stop()
