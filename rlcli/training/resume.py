"""What a checkpoint keeps so that ``--resume`` continues a run as if it had never stopped: the envs' state
mid-episode, the learner's live state (the observations it acts on next, a recurrent state, the reward
scaler's running returns, the episodes' partial returns), the random generators, and training's own
bookkeeping; with several processes, each one's part, read and written by the lead. Where some of it cannot
be saved (envpool's envs, the ALE's emulator, a replay buffer saved without --save-buffer), the checkpoint says
why instead, and a resume starts fresh episodes.

Saved only between two training iterations, where nothing is half done: a Ctrl-C lets the iteration finish
first (see ``rlcli.training.train``).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from rlcli.algos.base import Learner
from rlcli.algos.world import World
from rlcli.envs import SavableEnv, VecEnv
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.runs.checkpoint import OPTIMIZER, RESUME
from rlcli.runs.rundir import RunDir


def random_state() -> Snapshot:
    """The global generators: torch's (CUDA's too, once used), numpy's and Python's."""
    numpy = np.random.get_state(legacy=False)
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors |= {f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())}
    version, words, gauss = random.getstate()
    values = {"numpy": {**numpy, "state": {"key": numpy["state"]["key"].tolist(), "pos": numpy["state"]["pos"]}},
              "python": [version, list(words), gauss]}
    return Snapshot(values, tensors)


def load_random_state(snapshot: Snapshot) -> None:
    numpy = snapshot.values["numpy"]
    np.random.set_state({**numpy, "state": {"key": np.array(numpy["state"]["key"], dtype=np.uint32),
                                            "pos": numpy["state"]["pos"]}})
    version, words, gauss = snapshot.values["python"]
    random.setstate((version, tuple(words), gauss))
    torch.set_rng_state(snapshot.tensors["torch"])
    cuda = [snapshot.tensors[f"cuda.{i}"] for i in range(sum(key.startswith("cuda.") for key in snapshot.tensors))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[:torch.cuda.device_count()])


def capture(env: VecEnv, learner: Learner, bookkeeping: dict[str, Any], generators: Snapshot,
            replay_saved: bool) -> tuple[Snapshot | None, str | None]:
    """(everything an exact resume needs, None), or (None, why it cannot be saved). ``bookkeeping``:
    training's own JSON values; ``generators``: ``random_state()`` as it stands at this point of the run."""
    if not replay_saved and learner.buffer_tensors():
        return None, "the replay buffer is not saved (train with --save-buffer)"
    if not isinstance(env, SavableEnv):
        return None, f"the {env.backend} backend cannot save its envs' state"
    try:
        envs = env.state()
    except EnvStateUnreadable as e:
        return None, str(e)
    return Snapshot.of({"env": envs, "learner": learner.live_state(), "random": generators,
                        "training": Snapshot(bookkeeping, {})}), None


def restore(snapshot: Snapshot, env: VecEnv, learner: Learner) -> dict[str, Any]:
    """Sets the envs, the learner and the random generators to a ``capture``; returns training's bookkeeping.
    Raises EnvStateUnreadable, before changing anything, where the envs are not those it was captured from."""
    if not isinstance(env, SavableEnv):  # ``capture`` saves none from such a backend
        raise EnvStateUnreadable(f"the {env.backend} backend cannot load its envs' state")
    env.load_state(snapshot.part("env"))
    learner.load_live_state(snapshot.part("learner"))
    load_random_state(snapshot.part("random"))
    return snapshot.values["training"]


def saved_live_state(run: RunDir, world: World) -> tuple[Snapshot | None, str | None]:
    """(what continues this process's part of the run exactly, None) as its last checkpoint saved it, or
    (None, why there is none): read by the lead, each process's part handed to it."""
    parts, why = saved_parts(run, world.size) if world.lead else (None, None)
    return world.from_lead_each([(part, why) for part in parts] if parts else [(None, why)] * world.size)


def saved_parts(run: RunDir, size: int) -> tuple[list[Snapshot] | None, str | None]:
    """(the live state of each of ``size`` processes in the run's last checkpoint, None), or (None, why not)."""
    meta = run.meta
    saved = int(meta.get("world_size", 1))
    if saved != size:
        return None, (f"the run was saved by {saved} process{'es' if saved > 1 else ''} and resumes with {size}, "
                      f"each stepping {run.cfg.algo.n_envs} envs so that the global batch stays as it was")
    live = run.live_state()
    if live is None:
        exact = meta.get("resume", {}).get("exact")
        return None, f"{RESUME} is missing" if exact else meta.get("resume", {}).get(
            "why", "the checkpoint was saved without the envs' state")
    if not (run.path / OPTIMIZER).is_file():  # every training checkpoint writes one: this one lost it
        return None, f"{OPTIMIZER} is missing, so the optimiser starts afresh"
    return ([live] if size == 1 else [live.part(f"rank{rank}") for rank in range(size)]), None


def gather_live_state(world: World, snapshot: Snapshot | None, inexact: str | None
                      ) -> tuple[Snapshot | None, str | None]:
    """On the lead, every process's live state as one snapshot of parts ``rank0``, ``rank1``, ... (or None and
    why one of them has none); (None, None) on the others. One process's is saved whole, as it is."""
    if world.size == 1:
        return snapshot, inexact
    # on the CPU: a pickled CUDA tensor comes back on the sender's GPU index, which the lead need not have
    gathered = world.to_lead((None if snapshot is None else snapshot.cpu(), inexact))
    if gathered is None:
        return None, None
    for rank, (part, why) in enumerate(gathered):
        if part is None:
            return None, why if rank == 0 else f"process {rank}: {why}"
    return Snapshot.of({f"rank{rank}": part for rank, (part, _) in enumerate(gathered)}), None
