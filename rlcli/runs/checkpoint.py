"""The files of a run directory: ``config.yaml`` + ``model.safetensors`` + ``meta.json``, written
atomically (``rlcli.runs.rundir`` reads and writes them as one run).

A run directory is portable: no pickles, nothing that depends on the machine that wrote it. The
optimiser's state lives in ``optimizer.safetensors`` and the loop's position in ``meta.json``, so
``--resume`` continues with the same weights, optimiser, normalisation statistics, schedules and step
count. ``resume.safetensors`` adds what continues the run exactly (the envs mid-episode, the random
generators, a recurrent state; see ``rlcli.training.resume``), its JSON part in the file's metadata; where that
cannot be saved, ``meta.json`` says why and a resumed run starts fresh episodes, seeded from seed + step.
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
from typing import Any

import safetensors
import safetensors.torch
import torch

import rlcli
from rlcli.errors import CheckpointError, StorageError

CONFIG, MODEL, OPTIMIZER, META, EVAL, REPLAY, RESUME = (
    "config.yaml", "model.safetensors", "optimizer.safetensors", "meta.json", "eval.json",
    "replay.safetensors", "resume.safetensors")
BEST_DIR = "best"
FORMAT = "rlcli-model-v1"


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask can only be read by setting it, racing other threads


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    write_files({path: data})


JOURNAL = ".renaming.json"  # the renames of a write_files in progress, in the directory of its files


def write_files(files: dict[Path, bytes]) -> None:
    """Writes every file or none: each goes to a temporary file beside it first (fsynced), and only when
    all are written are they renamed into place, in order (a rename needs no space). A write that fails
    (a full disk, a permission) leaves the old files and raises a StorageError naming the file. Files of one
    directory are renamed under a journal of the renames, so that a process killed between two of them
    leaves what ``finish_renames`` completes (the directory then holds the new files, all of them)."""
    staged: list[tuple[str, Path]] = []
    journal: Path | None = None
    try:
        for path, data in files.items():
            staged.append((_stage(path, data), path))
        folders = {path.parent for path in files}
        if len(staged) > 1 and len(folders) == 1:
            journal = folders.pop() / JOURNAL
            atomic_write(journal, json.dumps([[Path(tmp).name, path.name] for tmp, path in staged]).encode())
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        if journal is None or not journal.is_file():  # with a journal written, the renames are finished later
            for tmp, _ in staged:
                Path(tmp).unlink(missing_ok=True)
        raise
    if journal is not None:
        journal.unlink(missing_ok=True)


def finish_renames(folder: Path) -> None:
    """Completes the renames of a ``write_files`` that a killed process left half done in ``folder``."""
    journal = folder / JOURNAL
    if not journal.is_file():
        return
    try:
        renames = json.loads(journal.read_text())
    except ValueError:  # the journal itself was being written: no rename had started
        journal.unlink(missing_ok=True)
        return
    for tmp, name in renames:
        if (folder / tmp).is_file():
            os.replace(folder / tmp, folder / name)
    journal.unlink(missing_ok=True)


def _stage(path: Path, data: bytes) -> str:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide runs from their group
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise StorageError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    return tmp


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, (json.dumps(obj, indent=2) + "\n").encode())


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], step: int | None = None) -> None:
    atomic_write(path, tensor_bytes(tensors, step))


def tensor_bytes(tensors: dict[str, torch.Tensor], step: int | None = None,
                 values: dict[str, Any] | None = None) -> bytes:
    """A safetensors file's bytes; ``step`` is stamped into its metadata, so a resume can tell files of
    one save apart, and ``values`` (JSON) go there too."""
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    metadata = {"format": FORMAT, **({"step": str(step)} if step is not None else {}),
                **({"values": json.dumps(values)} if values is not None else {})}
    return _sorted_metadata(safetensors.torch.save(flat, metadata=metadata))


def _sorted_metadata(data: bytes) -> bytes:
    """``data`` with its header's metadata in key order. safetensors writes that map in an order that changes
    from one process to the next, so two runs that saved the same tensors wrote different bytes, and a
    checksum could not show them equal."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if "__metadata__" not in header:
        return data
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(text) <= size, "the same header, reordered, outgrew its own length"
    return data[:8] + text.ljust(size) + data[8 + size:]


def load_tensors(path: Path, step: int | None = None) -> dict[str, torch.Tensor]:
    """The tensors of an rlcli safetensors file; with ``step``, the file must have been saved then."""
    return load_tensors_and_values(path, step)[0]


def load_tensors_and_values(path: Path, step: int | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``load_tensors``, with the JSON values saved beside them (empty where there are none)."""
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
            return {k: f.get_tensor(k) for k in f.keys()}, json.loads(metadata.get("values", "{}"))
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises several types for truncated or foreign bytes
        raise CheckpointError(f"{path} is corrupt or not a safetensors file ({e})") from None


def optimizer_tensors(optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, torch.Tensor]:
    """Each optimiser's per-parameter state as ``NAME.INDEX.FIELD`` tensors (learning rates are
    not here: the agent's ``extra_state`` carries what its schedule needs)."""
    out = {}
    for prefix, optimizer in optimizers.items():
        for index, state in optimizer.state_dict()["state"].items():
            for name, value in state.items():
                out[f"{prefix}.{index}.{name}"] = torch.as_tensor(value)
    return out


def load_optimizer_tensors(optimizers: dict[str, torch.optim.Optimizer],
                           tensors: dict[str, torch.Tensor]) -> None:
    states: dict[str, dict[int, dict[str, torch.Tensor]]] = {name: {} for name in optimizers}
    for key, value in tensors.items():
        prefix, index, name = key.split(".", 2)
        if prefix not in states:
            raise CheckpointError(f"optimizer state for unknown optimizer '{prefix}'")
        # a copy: torch's loader keeps a tensor already of the right type and device, shared with the caller
        states[prefix].setdefault(int(index), {})[name] = value.clone()
    for prefix, optimizer in optimizers.items():
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for index, state in states[prefix].items():
            shape = tuple(params[index].shape) if index < len(params) else None
            for name, value in state.items():
                if name != "step" and tuple(value.shape) != shape:
                    raise CheckpointError(f"optimizer state '{prefix}' does not fit this agent: {prefix}.{index}."
                                          f"{name} has shape {tuple(value.shape)}, the parameter {shape}")
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
