"""Writing frames to an mp4 (H.264 through the ffmpeg that imageio-ffmpeg ships)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlcli.errors import UsageError

# containers the ffmpeg writer can hold H.264 in (imageio picks its writer by the extension: .webm or .gif
# would go to one that rejects H.264 or these options, after the episodes were played)
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")


def check_video_path(path: Path) -> None:
    """A UsageError unless a video can be written at ``path``: a suffix in VIDEO_SUFFIXES, and a file that
    can be created there (its missing directories are made, as ``write_mp4`` would)."""
    if path.is_dir():
        raise UsageError(f"--video {path} is a directory; give a file path such as {path / 'play.mp4'}")
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        what = f"a '{path.suffix}' file" if path.suffix else "a path without an extension"
        raise UsageError(f"--video {path}: cannot write a video to {what}; "
                         f"give a path ending in {VIDEO_SUFFIXES[0]} (or {', '.join(VIDEO_SUFFIXES[1:])})")
    folder = next((parent for parent in path.parents if parent.exists()), Path("."))
    if not folder.is_dir():
        raise UsageError(f"--video {path}: {folder} is a file, not a directory; give a path in a directory")
    existed = path.exists()
    try:  # trying is the one check that holds for read-only mounts and for root alike
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
    except OSError as e:
        raise UsageError(f"--video {path}: cannot write there ({e.strerror or e}); "
                         "give a path in a directory you can write to") from None
    if not existed:
        path.unlink()


def write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """Writes RGB uint8 frames [H, W, 3]; sizes are padded to even numbers as H.264 requires."""
    import imageio.v2 as imageio

    if not frames:
        raise ValueError("no frames to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    pad = ((0, h % 2), (0, w % 2), (0, 0))
    with imageio.get_writer(str(path), fps=fps, codec="libx264", quality=7,
                            macro_block_size=1, ffmpeg_log_level="error") as writer:
        for frame in frames:
            writer.append_data(np.pad(frame, pad) if any(p[1] for p in pad) else frame)
