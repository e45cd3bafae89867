"""The compile switch: which functions ``torch.compile`` builds, and when ``auto`` turns it on."""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from rlcli.config import Compile

F = TypeVar("F", bound=Callable)


def compile_enabled(mode: Compile, device: torch.device) -> bool:
    """Whether a run compiles its acting and update steps. ``auto``: on a GPU, where compiled steps with
    CUDA graphs remove the launch overhead that bounds small networks' updates; off on a CPU, where a
    run pays 15-60 s of compiling for a few percent per step (docs/speed.md's table)."""
    if mode == "auto":
        return device.type == "cuda"
    return mode == "on"


def compiled(fn: F, mode: Compile, device: torch.device, rows_vary: bool = False) -> F:
    """``fn`` through ``torch.compile`` where ``compile_enabled``, else ``fn`` itself. ``rows_vary``: the
    inputs' row counts change from call to call (an update's last minibatch, where reset rows were left
    out), so the code is built for any count at once instead of again at the first change."""
    if not compile_enabled(mode, device):
        return fn
    return CompiledStep(fn, dynamic=True if rows_vary else None)  # type: ignore[return-value]


class CompiledStep:
    """``fn`` through ``torch.compile``; where the compiler itself fails (an internal error of the installed
    torch, seen with torch 2.11's dynamic shapes on a recurrent update), ``fn`` runs eagerly from then on,
    with a warning, instead of the run stopping. The failing call is run again eagerly from its start: a
    frame fails while it is being compiled, before it runs, and each step zeroes its gradients before its
    backward, so nothing it did before the failure counts twice."""

    def __init__(self, fn: Callable, dynamic: bool | None) -> None:
        quiet_profiler_marks()
        self.fn, self.compiled = fn, torch.compile(fn, dynamic=dynamic)
        self.failed = False
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed:
            return self.fn(*args, **kwargs)
        try:
            return self.compiled(*args, **kwargs)
        except Exception as e:
            if not _compiler_error(e):
                raise
            self.failed = True
            warnings.warn(f"{getattr(self.fn, '__name__', 'a step')} runs eagerly: torch.compile failed "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", stacklevel=2)
            return self.fn(*args, **kwargs)


# what torch's compiler logs, as a warning, where a compiled step calls torch.optim's step or zero_grad: they mark
# themselves for the profiler, and the compiled step leaves the marks out (the profiler sees the step as a whole)
PROFILER_MARK = "Profiler record function %s will be ignored"


@functools.cache
def quiet_profiler_marks() -> None:
    """Keeps ``PROFILER_MARK`` off the console: every compiled run (every run on a GPU) would print it once, a
    warning about torch's own optimiser that says nothing about the run. Other compiler warnings still show."""
    logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(lambda record: record.msg != PROFILER_MARK)


def _compiler_error(e: BaseException) -> bool:
    """Whether ``e`` was raised by torch's compiler rather than by the function it compiled (which raises
    the same error again when run eagerly)."""
    return type(e).__module__.startswith(("torch._dynamo", "torch._inductor"))


def captured(fn: F, mode: Compile, device: torch.device) -> F:
    """``fn`` replayed as CUDA graphs (``GraphedStep``) where ``compile_enabled`` on a GPU, else ``fn`` itself:
    for a whole update step whose outputs the caller reads before the next call."""
    if not compile_enabled(mode, device) or device.type != "cuda":
        return fn
    return GraphedStep(fn)  # type: ignore[return-value]


class GraphedStep:
    """``fn`` replayed as one CUDA graph for each shape of its inputs: every kernel of a step (forward,
    backward, clipping, optimiser, target update) launched at once, where eager PyTorch launches each from
    Python and a small network's step is bound by those launches. Arguments are tensors, tuples of tensors
    (NamedTuples too) and plain values, which are part of the shape.

    The first ``warmup`` calls of a shape run on a side stream (torch's recipe, so that the allocator, the
    compiler and the optimiser's state are ready), the next is captured and replayed, and every later one
    copies its inputs into the graph's and replays it. A graph's outputs are its own memory, overwritten by
    its next replay. A step that cannot be captured (one that reads a value back to the host) runs without
    a graph, with a warning; so do shapes beyond ``max_graphs``."""

    def __init__(self, fn: Callable, warmup: int = 2, max_graphs: int = 4) -> None:
        self.fn, self.warmup, self.max_graphs = fn, warmup, max_graphs
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list, Any]] = {}
        self.calls: dict[tuple, int] = {}
        self.failed = False

    def __call__(self, *args: Any) -> Any:
        leaves = _leaves(args)
        key = tuple((x.shape, x.dtype) if isinstance(x, torch.Tensor) else x for x in leaves)
        graphed = self.graphs.get(key)
        if graphed is not None:
            graph, inputs, outputs = graphed
            for static, x in zip(inputs, leaves, strict=True):
                if isinstance(static, torch.Tensor):
                    static.copy_(x)
            graph.replay()
            return outputs
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.failed or len(self.graphs) >= self.max_graphs:
            return self.fn(*args)
        if self.calls[key] <= self.warmup:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                outputs = self.fn(*args)
            torch.cuda.current_stream().wait_stream(stream)
            return outputs
        return self._capture(key, args, leaves)

    def _capture(self, key: tuple, args: tuple, leaves: list) -> Any:
        inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        graph = torch.cuda.CUDAGraph()
        generator = torch.cuda.default_generators[torch.cuda.current_device()]
        rng = generator.clone_state()
        try:
            with torch.cuda.graph(graph):
                outputs = self.fn(*_rebuilt(args, inputs))
        except RuntimeError as e:  # nothing captured ran: the step runs as it is, from now on
            # a capture that ends in an error leaves the generator registered as capturing, and every
            # later random draw outside a graph then fails: it takes its state from before the capture
            generator.graphsafe_set_state(rng)
            self.failed = True
            warnings.warn(f"{getattr(self.fn, '__name__', 'a step')} runs without CUDA graphs: its capture "
                          f"failed ({str(e).splitlines()[0]})", stacklevel=2)
            torch.cuda.synchronize()
            return self.fn(*args)
        graph.replay()
        self.graphs[key] = (graph, inputs, outputs)
        return outputs


def _leaves(args: tuple) -> list:
    """The arguments with each tuple's items in its place."""
    return [item for arg in args for item in (arg if isinstance(arg, tuple) else (arg,))]


def _rebuilt(args: tuple, leaves: list) -> list:
    """``args`` with ``leaves`` in their places (``_leaves``'s inverse)."""
    out, items = [], iter(leaves)
    for arg in args:
        if isinstance(arg, tuple):
            values = [next(items) for _ in arg]
            out.append(type(arg)(*values) if hasattr(arg, "_fields") else tuple(values))
        else:
            out.append(next(items))
    return out
