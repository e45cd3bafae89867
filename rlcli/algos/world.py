"""The processes of one training run: which one this is, how many there are, and the collectives training
needs, on torch.distributed (gloo for CPU tensors, NCCL for CUDA ones; Python objects always go through a
gloo group of their own).

``join()`` is the one call that reads torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ...);
everything else is handed the ``World`` it returns. A process not started by torchrun, or one of a world of
one, gets ``SINGLE``, whose collectives change nothing, and trains as rlcli always has.

Rank 0, the lead, alone logs, evaluates and writes the run directory; every decision that must agree (the
learning rate, the clip range, stopping) is taken there and broadcast.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch

from rlcli.errors import UsageError
from rlcli.jobs import interrupts

T = TypeVar("T")
TIMEOUT = timedelta(minutes=60)  # how long a collective waits for a slow peer (the lead evaluating, saving)


class PeerLost(Exception):
    """A collective failed: another process of the run ended (or could not be reached)."""


def _collective(method: Callable[..., T]) -> Callable[..., T]:
    """A failed collective (gloo's "Connection closed by peer", NCCL's errors) as PeerLost."""

    @functools.wraps(method)
    def wrapper(self: World, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except RuntimeError as e:  # torch.distributed.DistError and its kin derive from it
            raise PeerLost(" ".join(str(e).split())[:300]) from e

    return wrapper


def gpu_of(local_rank: int, local_size: int, gpus: int, mapped: bool = False) -> int:
    """The GPU of the process ``local_rank`` of ``local_size`` that sees ``gpus``: one each, since NCCL refuses
    two processes of a run on one GPU ("Duplicate GPU detected"); a UsageError where there are too few. Where
    each process was given its own GPUs (``mapped``: CUDA_VISIBLE_DEVICES set by whoever started it), the
    local rank modulo the GPUs it sees."""
    if mapped:
        return local_rank % gpus
    if local_size > gpus:
        raise UsageError(f"{local_size} processes on this machine training on CUDA need a GPU each, and torch "
                         f"sees {gpus}: train with --nproc {gpus} (or fewer), or on the CPU with --device cpu"
                         if gpus else f"{local_size} processes on this machine training on CUDA need a GPU each, "
                         "and torch sees none: train on the CPU with --device cpu")
    return local_rank


def check_gpus(device: str, processes: int) -> None:
    """A UsageError where ``processes`` on this machine training on ``device`` cannot have a GPU each."""
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        gpu_of(processes - 1, processes, torch.cuda.device_count())


class Groups:
    """The process groups a world holds beside torch's default one. Closing the world lets them go: a group
    still referenced when the interpreter ends keeps gloo's threads running, and destroying them then aborts
    the process ("terminate called without an active exception") after a run that went well."""

    def __init__(self, control: Any) -> None:
        self.control = control


@dataclass(frozen=True)
class World:
    """This process's place among the run's processes (ranks)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # among the processes on this machine
    local_size: int = 1
    nodes: int = 1  # machines
    groups: Groups | None = None  # None in a world of one

    @property
    def control(self) -> Any:
        """The gloo group that objects and flags go through (None in a world of one)."""
        return None if self.groups is None else self.groups.control

    @property
    def lead(self) -> bool:
        """Whether this is rank 0: the process that logs, evaluates and writes the run directory."""
        return self.rank == 0

    def device(self, name: str) -> torch.device:
        """The torch device for ``--device NAME``: with several processes and CUDA, this one's GPU (its local
        rank); a UsageError where this machine has fewer GPUs than processes."""
        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "cpu"
        if name == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
        if name != "cuda" or self.size == 1:
            return torch.device(name)
        device = torch.device("cuda", gpu_of(self.local_rank, self.local_size, torch.cuda.device_count(),
                                             mapped="CUDA_VISIBLE_DEVICES" in os.environ))
        torch.cuda.set_device(device)
        return device

    @_collective
    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the processes, in place; returned."""
        if self.size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def sum_gradients_(self, params: Sequence[torch.Tensor]) -> None:
        """Each gradient summed over the processes, as one flat buffer (one all-reduce per step, as CleanRL's
        multi-GPU PPO and rl_games do). Parameters without a gradient are passed over: every process has the
        same ones, since each runs the same network through the same loss."""
        grads = [p.grad for p in params if p.grad is not None]
        if self.size == 1 or not grads:
            return
        flat = self.sum_(torch.cat([g.reshape(-1) for g in grads]))
        for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(part.view_as(g))

    @_collective
    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """``tensor`` (of one shape on every process) from each process, in rank order."""
        if self.size == 1:
            return [tensor]
        import torch.distributed as dist

        out = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(out, tensor)
        return out

    @_collective
    def agree(self, *values: float) -> tuple[float, ...]:
        """The lead's ``values`` (numbers), on every process."""
        if self.size == 1:
            return values
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.broadcast(tensor, src=0, group=self.control)
        return tuple(tensor.tolist())

    @_collective
    def flags(self, lead_says: bool, any_says: bool) -> tuple[bool, bool]:
        """(the lead's ``lead_says``, whether any process's ``any_says``), on every process, in one exchange:
        a stop decided by the lead, an interrupt that reached one process or more."""
        if self.size == 1:
            return lead_says, any_says
        import torch.distributed as dist

        tensor = torch.tensor([float(lead_says and self.lead), float(any_says)])
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.control)
        return bool(tensor[0]), bool(tensor[1])

    @_collective
    def from_lead(self, value: T | None) -> T:
        """The lead's ``value`` (any picklable object: a config's JSON, a state dict), on every process."""
        if self.size == 1:
            return value  # type: ignore[return-value]
        import torch.distributed as dist

        box = [value if self.lead else None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]  # type: ignore[return-value]

    @_collective
    def to_lead(self, value: T) -> list[T] | None:
        """Every process's ``value``, in rank order, on the lead; None on the others."""
        if self.size == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.size if self.lead else None
        dist.gather_object(value, out, dst=0, group=self.control)
        return out

    @_collective
    def from_lead_each(self, values: Sequence[T] | None) -> T:
        """The lead's ``values[rank]`` on each process (``values``, one per rank, given on the lead)."""
        if self.size == 1:
            assert values is not None
            return values[0]
        import torch.distributed as dist

        out: list[Any] = [None]
        dist.scatter_object_list(out, list(values) if self.lead and values is not None else None, src=0,
                                 group=self.control)
        return out[0]

    def on_lead(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """``fn(*args, **kwargs)`` on the lead (the only process of a world of one), None on the others: what
        the lead alone opens, reads or writes (the run directory, its lock, the evaluation envs)."""
        return fn(*args, **kwargs) if self.lead else None

    @_collective
    def lead_to_others(self, make: Callable[[], T]) -> T | None:
        """What the lead makes (``make()``, called there alone) on every other process; None on the lead and
        in a world of one, which hold it already."""
        if self.size == 1:
            return None
        value = self.from_lead(make() if self.lead else None)
        return None if self.lead else value

    def ctrl_c(self, on_hold: Callable[[], None] | None) -> AbstractContextManager[Callable[[], bool]]:
        """How a run's Ctrl-C is met, as a context yielding whether one was noted: one process raises it where
        it lands (nothing is noted); each of several notes it, and they stop where they agree."""
        return interrupts.noted(on_hold) if self.size > 1 else interrupts.not_noted()

    def iteration_held(self, on_hold: Callable[[], None] | None) -> AbstractContextManager[None]:
        """Holds a first Ctrl-C until the iteration ends, ``on_hold`` told, where one process raises it; several
        note it (``ctrl_c``) and tell it on when they agree."""
        return interrupts.held(on_hold if self.size == 1 else None)

    def env_threads(self, share: int) -> int | None:
        """envpool threads for this process's envs: envpool's default in one process; ``share`` (this process's
        share of the machine's cores) among several, whose pools would otherwise each take every core."""
        return share if self.size > 1 else None

    def describe(self, n_envs: int) -> dict[str, Any]:
        """What a checkpoint's meta says of the processes that saved it."""
        several = {"world": {"nodes": self.nodes, "n_envs_per_process": n_envs}} if self.size > 1 else {}
        return {"world_size": self.size, **several}

    def close(self) -> None:
        """Leaves the process group (once training is over: the collectives of this world end here)."""
        if self.size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            if self.groups is not None:
                self.groups.control = None


SINGLE = World()


def join() -> World:
    """This process's world: joins the process group torchrun set up (``WORLD_SIZE`` > 1), with NCCL for
    CUDA tensors where CUDA is present and gloo for the rest; ``SINGLE`` where there is none."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return SINGLE
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=TIMEOUT)
    control = dist.new_group(backend="gloo", timeout=TIMEOUT)
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    return World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                 local_size=local_size, nodes=int(os.environ.get("GROUP_WORLD_SIZE", max(size // local_size, 1))),
                 groups=Groups(control))


def envs_per_process(n_envs: int, saved_size: int, size: int) -> int:
    """The envs each of ``size`` processes steps so that a run saved by ``saved_size`` processes of ``n_envs``
    each keeps its global batch; a UsageError where they do not divide evenly."""
    total = n_envs * saved_size
    if total % size:
        raise UsageError(f"the run steps {total} envs in all ({saved_size} x {n_envs}), which {size} processes "
                         f"cannot share evenly; resume with a number of processes that divides {total}")
    return total // size
