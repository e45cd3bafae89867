"""Finding runs by name: a run directory path, or an agent shipped in ``zoo/``."""

from __future__ import annotations

import re
import time
from pathlib import Path

from rlcli.errors import UsageError

ZOO_PREFIX = "zoo:"


def zoo_dir() -> Path:
    """``zoo/`` of a checkout, else the copy packaged inside an installed wheel."""
    checkout = Path(__file__).resolve().parent.parent / "zoo"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parent / "zoo"


def resolve_run(name: str) -> Path:
    """A run directory for ``name``: a path, ``zoo:ENV`` or a bare zoo agent name."""
    path = Path(name)
    if path.is_dir():
        return path
    zoo_name = name.removeprefix(ZOO_PREFIX)
    candidate = zoo_dir() / zoo_name.replace("/", "_")
    if candidate.is_dir():
        return candidate
    agents = sorted(p.name for p in zoo_dir().glob("*") if (p / "config.yaml").is_file()) if zoo_dir().is_dir() else []
    where = f"; zoo agents: {', '.join(agents)}" if agents else ""
    raise UsageError(f"no run directory or zoo agent named '{name}'{where}")


def default_run_dir(env_id: str, algo: str, seed: int, root: Path = Path("runs")) -> Path:
    """``runs/ENV__ALGO__sSEED__YYYYmmdd-HHMMSS`` (ids like ``ALE/Pong-v5`` made path-safe)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", env_id)
    return root / f"{safe}__{algo}__s{seed}__{time.strftime('%Y%m%d-%H%M%S')}"
