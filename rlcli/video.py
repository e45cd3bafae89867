"""Writing frames to an mp4 (H.264 through the ffmpeg that imageio-ffmpeg ships)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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
