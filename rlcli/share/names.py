"""Finding runs by name: a run directory path, an agent shipped in ``zoo/``, or one on the Hub."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import NamedTuple

from rlcli.errors import UsageError
from rlcli.runs.rundir import HF_PREFIX, zoo_dir
from rlcli.share.hub import download

ZOO_PREFIX = "zoo:"


def resolve_run(name: str) -> Path:
    """A run directory for ``name``: a path, ``zoo:ENV``, a bare zoo agent name, or
    ``hf://user/name[@revision]`` (downloaded into huggingface_hub's cache, which also serves it offline)."""
    if name.startswith(HF_PREFIX):
        return download(name, acting_only=True)
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
    return root / f"{safe_name(env_id)}__{algo}__s{seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def safe_name(text: str) -> str:
    """``text`` usable as one path component: runs of other characters than ``A-Za-z0-9._-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


class ZooAgent(NamedTuple):
    """One agent in the zoo, with the evaluation of its final model (None where it has none)."""

    name: str  # what ``rlcli play NAME`` / ``rlcli eval zoo:NAME`` take
    path: Path
    env_id: str
    algo: str
    steps: int | None  # env steps trained
    mean_return: float | None
    std_return: float | None
    episodes: int | None
    rates: dict[str, float]  # a game's: OPPONENT/win, OPPONENT/draw, ... of that evaluation; else empty


def zoo_agents(root: Path | None = None) -> list[ZooAgent]:
    """The run directories in ``root`` (default ``zoo_dir()``), sorted by name, read from their
    ``meta.json`` and ``eval.json`` (the last evaluation, which is that of the saved model)."""
    root = zoo_dir() if root is None else root
    if not root.is_dir():
        return []
    agents = []
    for path in sorted(p for p in root.iterdir() if (p / "config.yaml").is_file()):
        meta, latest = _read_json(path / "meta.json"), _read_json(path / "eval.json").get("latest", {})
        agents.append(ZooAgent(
            path.name, path, str(meta.get("env_id", path.name)), str(meta.get("algo", "?")),
            meta.get("steps"), latest.get("mean_return"), latest.get("std_return"), latest.get("episodes"),
            latest.get("rates", {})))
    return agents


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
