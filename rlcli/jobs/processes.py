"""Whether a process left behind by an earlier command (a benchmark run, a tuning worker) still lives."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while process ``pid`` exists, including one of another user's that cannot be signalled."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
