"""Run directories: ``config.yaml`` + ``model.safetensors`` + ``meta.json``, written atomically.

A run directory is portable: no pickles, nothing that depends on the machine that wrote it. The
optimiser's state lives in ``optimizer.safetensors`` and the loop's position in ``meta.json``, so
``--resume`` continues with the same weights, optimiser, normalisation statistics, schedules and step
count. Not carried over: the environments' mid-episode state and random generators (a resumed run
starts fresh episodes, seeded from seed + step), and the reward scaler's per-env running return.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import safetensors
import safetensors.torch
import torch
import yaml
from pydantic import ValidationError

import rlcli
from rlcli.config import RunConfig, describe_validation_error, dump_config
from rlcli.errors import CheckpointError
from rlcli.optim import Adam

CONFIG, MODEL, OPTIMIZER, META, EVAL, REPLAY = (
    "config.yaml", "model.safetensors", "optimizer.safetensors", "meta.json", "eval.json",
    "replay.safetensors")
BEST_DIR = "best"
FORMAT = "rlcli-model-v1"


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask can only be read by setting it, racing other threads


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide runs from their group
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, (json.dumps(obj, indent=2) + "\n").encode())


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], step: int | None = None) -> None:
    """``step`` is stamped into the file's metadata, so a resume can tell files of one save apart."""
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    metadata = {"format": FORMAT, **({"step": str(step)} if step is not None else {})}
    atomic_write(path, safetensors.torch.save(flat, metadata=metadata))


def load_tensors(path: Path, step: int | None = None) -> dict[str, torch.Tensor]:
    """The tensors of an rlcli safetensors file; with ``step``, the file must have been saved then."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; is this an rlcli run directory?")
    try:
        with safetensors.safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            if metadata.get("format") != FORMAT:
                raise CheckpointError(f"{path} is a safetensors file, but not an rlcli model")
            if step is not None and metadata.get("step", str(step)) != str(step):
                raise CheckpointError(
                    f"{path} was saved at step {metadata['step']} but meta.json says {step}: the last save "
                    "was interrupted; resume from a copy of the run made before, or start again")
            return {k: f.get_tensor(k) for k in f.keys()}
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises several types for truncated or foreign bytes
        raise CheckpointError(f"{path} is corrupt or not a safetensors file ({e})") from None


def optimizer_tensors(optimizers: dict[str, Adam]) -> dict[str, torch.Tensor]:
    """Each optimiser's per-parameter state as ``NAME.INDEX.FIELD`` tensors (learning rates are
    not here: the agent's ``extra_state`` carries what its schedule needs)."""
    out = {}
    for prefix, optimizer in optimizers.items():
        for index, state in optimizer.state_dict()["state"].items():
            for name, value in state.items():
                out[f"{prefix}.{index}.{name}"] = torch.as_tensor(value)
    return out


def load_optimizer_tensors(optimizers: dict[str, Adam],
                           tensors: dict[str, torch.Tensor]) -> None:
    states: dict[str, dict[int, dict[str, torch.Tensor]]] = {name: {} for name in optimizers}
    for key, value in tensors.items():
        prefix, index, name = key.split(".", 2)
        if prefix not in states:
            raise CheckpointError(f"optimizer state for unknown optimizer '{prefix}'")
        states[prefix].setdefault(int(index), {})[name] = value
    for prefix, optimizer in optimizers.items():
        try:
            optimizer.load_state_dict({"state": states[prefix],
                                       "param_groups": optimizer.state_dict()["param_groups"]})
        except (KeyError, ValueError) as e:
            raise CheckpointError(f"optimizer state '{prefix}' does not fit this agent: {e}") from None


@functools.lru_cache(maxsize=1)
def environment_versions() -> dict[str, str]:
    import gymnasium
    import numpy

    versions = {"rlcli": rlcli.__version__, "torch": torch.__version__,
                "gymnasium": gymnasium.__version__, "numpy": numpy.__version__,
                "python": platform.python_version()}
    try:  # the installed version, not the module: importing envpool costs 1.2 s a classic-control run skips
        versions["envpool"] = metadata.version("envpool")
    except metadata.PackageNotFoundError:
        pass
    return versions


@functools.lru_cache(maxsize=1)  # one `git` process per run, not per checkpoint
def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def save(run_dir: Path, cfg: RunConfig, model: dict[str, torch.Tensor],
         optimizer: dict[str, torch.Tensor] | None, meta: dict[str, Any]) -> None:
    """Writes the whole checkpoint; each file is replaced atomically, meta last. The tensor files carry
    ``meta["steps"]`` so that a save cut short between files is detected on resume."""
    step = meta.get("steps")
    save_tensors(run_dir / MODEL, model, step)
    if optimizer is not None:
        save_tensors(run_dir / OPTIMIZER, optimizer, step)
    atomic_write(run_dir / CONFIG, dump_config(cfg).encode())
    write_json(run_dir / META, {**meta, "versions": environment_versions(), "git_commit": git_commit()})


class LoadedRun(NamedTuple):
    run_dir: Path
    cfg: RunConfig
    model: dict[str, torch.Tensor]
    meta: dict[str, Any]


def load_config(run_dir: Path) -> RunConfig:
    path = run_dir / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{run_dir} is not an rlcli run directory (no {CONFIG})")
    try:
        return RunConfig.model_validate(yaml.safe_load(path.read_text()))
    except yaml.YAMLError as e:
        raise CheckpointError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    except ValidationError as e:
        raise CheckpointError(f"{path}: {describe_validation_error(e, RunConfig)}") from None


def load(run_dir: Path, best: bool = False) -> LoadedRun:
    """Config, model tensors and meta of a run directory (``best``: the best evaluated model)."""
    cfg = load_config(run_dir)
    model_path = run_dir / BEST_DIR / MODEL if best else run_dir / MODEL
    meta_path = run_dir / META
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except json.JSONDecodeError:
        raise CheckpointError(f"{meta_path} is not valid JSON") from None
    return LoadedRun(run_dir, cfg, load_tensors(model_path), meta)


def eval_history(run_dir: Path) -> list[dict[str, Any]]:
    """Every evaluation in the run's ``eval.json``, oldest first (each with its env ``step`` and
    ``mean_return``); empty when there is none or the file is unreadable, which training then rewrites."""
    path = run_dir / EVAL
    try:
        history = json.loads(path.read_text()).get("history", []) if path.is_file() else []
    except (OSError, json.JSONDecodeError, AttributeError):
        return []
    return [e for e in history if isinstance(e, dict) and "step" in e and "mean_return" in e]
