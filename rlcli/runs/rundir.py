"""One run directory, read once: its config, meta, evaluation history, models, optimiser and replay files.

Training writes it through ``save`` (every file atomically, meta last, so a save cut short leaves the
previous complete checkpoint loadable), evaluation through ``record_eval``/``save_best``; eval, play,
export, publish and resume read it through ``open``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError

from rlcli.algos import run_config
from rlcli.config import RunConfig, data_dir, describe_validation_error, dump_config, read_yaml_text
from rlcli.envs.snapshot import Snapshot
from rlcli.errors import CheckpointError, UsageError
from rlcli.runs import checkpoint
from rlcli.runs.checkpoint import BEST_DIR, CONFIG, EVAL, META, MODEL, OPTIMIZER, REPLAY, RESUME
from rlcli.runs.lock import RunLock

HF_PREFIX = "hf://"


def safe_repo_name(repo_id: str) -> str:
    """``user/name`` -> ``user__name``, for directory names."""
    return repo_id.replace("/", "__")


def cached_repo_id(path: Path) -> str | None:
    """``user/name`` when ``path`` is a snapshot in huggingface_hub's cache (``models--user--name/
    snapshots/REVISION``), which must stay as downloaded; else None."""
    path = Path(os.path.abspath(path))
    repo = path.parent.parent.name
    if path.parent.name != "snapshots" or not repo.startswith("models--"):
        return None
    user, _, name = repo.removeprefix("models--").partition("--")  # repo ids cannot hold "--"
    return f"{user}/{name}" if user and name else None


def zoo_dir() -> Path:
    """``$RLCLI_ZOO_DIR`` if set, else the shipped agents (``zoo/`` of a checkout, or its copy inside a wheel)."""
    if os.environ.get("RLCLI_ZOO_DIR"):
        return Path(os.environ["RLCLI_ZOO_DIR"])
    return data_dir() / "zoo"


def shipped(run_dir: Path) -> bool:
    """Whether ``run_dir`` is an agent of the zoo (shipped with rlcli) or a Hub download: read-only to commands."""
    path = Path(os.path.abspath(run_dir)).resolve()
    return cached_repo_id(run_dir) is not None or path.parent == zoo_dir().resolve()


def run_takes_output(run_dir: Path) -> bool:
    """False for a run whose directory should not be written into: a zoo agent, a Hub cache snapshot, or a
    folder this user cannot write (an agent installed with the package)."""
    return not shipped(run_dir) and os.access(run_dir, os.W_OK)


def load_config(path: Path) -> RunConfig:
    """The config of the run in ``path``; a CheckpointError where there is none or it does not validate."""
    file = path / CONFIG
    if not file.is_file():
        raise CheckpointError(f"{path} is not an rlcli run directory (no {CONFIG})")
    try:
        data = read_yaml_text(file)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read {file} as a YAML text file ({type(e).__name__})") from None
    except yaml.YAMLError as e:
        raise CheckpointError(f"{file} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a run's settings as a mapping, not {type(data).__name__}")
    try:
        return run_config(data)
    except ValidationError as e:
        raise CheckpointError(f"{file}: {describe_validation_error(e, RunConfig)}") from None
    except UsageError as e:
        raise CheckpointError(f"{file}: {e}") from None


def eval_history(path: Path) -> list[dict[str, Any]]:
    """Every evaluation in the run's ``eval.json``, oldest first (each with its env ``step`` and
    ``mean_return``); empty where the run has not been evaluated; a CheckpointError where the file is
    damaged (a resume would otherwise lose the history)."""
    file = path / EVAL
    if not file.is_file():
        return []
    data = _read_json(file)
    history = data.get("history") if isinstance(data, dict) else None
    if not isinstance(history, list) or not all(isinstance(e, dict) and "step" in e and "mean_return" in e
                                                 for e in history):
        raise CheckpointError(f"{file} is damaged: it holds no evaluation history (a 'history' list of entries "
                              "with 'step' and 'mean_return'); restore it or delete it to start a new history")
    return history


def read_meta(path: Path) -> dict[str, Any]:
    """The run's ``meta.json`` (empty where there is none yet); a CheckpointError where it is damaged."""
    file = path / META
    if not file.is_file():
        return {}
    meta = _read_json(file)
    if not isinstance(meta, dict) or not isinstance(meta.get("steps", 0), int):
        raise CheckpointError(f"{file} is damaged: it should map 'steps' and the run's other facts to values")
    return meta


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read {file} as a JSON text file ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{file} is not valid JSON ({e.msg} at line {e.lineno}); it is damaged") from None


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


class RunDir:
    """A run directory and what was read of it. ``steps`` is the env step of its last checkpoint."""

    def __init__(self, path: Path, cfg: RunConfig, meta: dict[str, Any] | None = None,
                 history: list[dict[str, Any]] | None = None) -> None:
        self.path, self.cfg = Path(path), cfg
        self.meta: dict[str, Any] = meta or {}
        self.history: list[dict[str, Any]] = history or []

    @classmethod
    def open(cls, path: Path, writer: bool = False) -> RunDir:
        """An existing run; a CheckpointError naming what is missing or broken. ``writer``: opened by the process
        that holds the run's lock; any other leaves the renames of a save in progress to the process saving."""
        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(f"there is no run directory at {path}")
        if writer or not RunLock.held(path):
            checkpoint.finish_renames(path)  # a save its process was killed in the middle of
        cfg = load_config(path)
        if not (path / META).is_file():
            raise CheckpointError(f"{path} holds no saved checkpoint (no {META}): train it, or resume it if it "
                                  "was interrupted before its first save")
        return cls(path, cfg, read_meta(path), eval_history(path))

    @property
    def steps(self) -> int:
        return int(self.meta.get("steps", 0))

    def model(self, best: bool = False, *, resuming: bool = False) -> dict[str, torch.Tensor]:
        """The last saved model's tensors, or the best evaluated one's; ``resuming`` also checks that the
        file is the one of the last checkpoint."""
        if best:
            return checkpoint.load_tensors(self.path / BEST_DIR / MODEL)
        return checkpoint.load_tensors(self.path / MODEL, self.steps if resuming else None)

    def optimizer(self) -> dict[str, torch.Tensor] | None:
        """The optimiser state saved with the last checkpoint; None for a run saved without one."""
        file = self.path / OPTIMIZER
        return checkpoint.load_tensors(file, self.steps) if file.is_file() else None

    def replay(self) -> dict[str, torch.Tensor] | None:
        return self.tensors(REPLAY)

    def tensors(self, name: str) -> dict[str, torch.Tensor] | None:
        """The tensor file ``name`` saved with the last checkpoint; None where the run has none."""
        file = self.path / name
        return checkpoint.load_tensors(file, self.steps) if file.is_file() else None

    def live_state(self) -> Snapshot | None:
        """What the last checkpoint saved to continue exactly (see rlcli.training.resume); None where it could not, or
        where the file is not here (a published run carries the model alone)."""
        if not self.meta.get("resume", {}).get("exact") or not (self.path / RESUME).is_file():
            return None
        tensors, values = checkpoint.load_tensors_and_values(self.path / RESUME, self.steps)
        return Snapshot(values, tensors)

    def save(self, model: dict[str, torch.Tensor], optimizer: dict[str, torch.Tensor] | None,
             meta: dict[str, Any], replay: dict[str, torch.Tensor] | None = None, live: Snapshot | None = None,
             extra: dict[str, dict[str, torch.Tensor]] | None = None) -> None:
        """A whole checkpoint at ``meta["steps"]``: every file written beside its old one before any is
        replaced, meta last; the tensor files (``extra``: more of them, by file name) are stamped with the
        step, so that a save cut short between renames is detected on resume. A failed write leaves the
        previous checkpoint whole. ``live``: what continues the run exactly; without it, an earlier
        checkpoint's is removed."""
        step = meta.get("steps")
        meta = {**meta, "versions": checkpoint.environment_versions(), "git_commit": checkpoint.git_commit()}
        named = ((REPLAY, replay), (MODEL, model), (OPTIMIZER, optimizer), *(extra or {}).items())
        files = {self.path / name: checkpoint.tensor_bytes(tensors, step) for name, tensors in named
                 if tensors is not None}
        if live is not None:
            files[self.path / RESUME] = checkpoint.tensor_bytes(live.tensors, step, live.values)
        files[self.path / CONFIG] = dump_config(self.cfg).encode()
        if self.history:
            files[self.path / EVAL] = _json({"latest": self.history[-1], "history": self.history})
        files[self.path / META] = _json(meta)
        checkpoint.write_files(files)
        self.meta = meta
        if live is None:
            (self.path / RESUME).unlink(missing_ok=True)

    def record_eval(self, entry: dict[str, Any]) -> None:
        """Appends an evaluation (with its ``step``) to the history, which the next ``save`` writes with the
        checkpoint it belongs to."""
        self.history.append(entry)

    def save_best(self, model: dict[str, torch.Tensor]) -> None:
        checkpoint.save_tensors(self.path / BEST_DIR / MODEL, model)
