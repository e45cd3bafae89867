"""Exporting a trained policy as one self-contained file, ONNX or TorchScript.

The file maps observations, as rlcli's environment produces them (for Atari, after its preprocessing,
which the spec's ``preprocessing`` spells out), to the actions the environment takes: observation
normalisation (with its clip), the actor network, and the deterministic action (argmax per discrete
dimension, PPO's mean clipped to the bounds, SAC's tanh of the mean scaled to the bounds). Pixels go in
as uint8 frames and are scaled inside. A Dict observation goes in as the actor's keys alone, concatenated
in the spec's order (a critic's privileged keys are not needed), and an action mask as a second input,
``action_mask``, bool, one entry per action of each dimension. A JSON spec beside the file names its
inputs and output. Before the file is put in place it is checked: on real observations from the run's
environment its actions must match the PyTorch agent's.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import rlcli
from rlcli.algos.base import Agent
from rlcli.config import RunConfig
from rlcli.envs import env_group
from rlcli.envs.atari import MAX_EPISODE_STEPS
from rlcli.envs.envpool_backend import atari_opts
from rlcli.errors import UsageError
from rlcli.nets.models import ActorCritic
from rlcli.runs import checkpoint
from rlcli.runs.folders import writable_folder
from rlcli.runs.rundir import RunDir, cached_repo_id, run_takes_output, safe_repo_name
from rlcli.training.agents import agent_from_run, make_env, resolve_device
from rlcli.training.evaluation import Episodes, sample_episodes

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
INPUT, OUTPUT = "obs", "action"
STATE, STATE_OUT = "state", "state_out"  # a recurrent policy's state, in and out
MASK_INPUT = "action_mask"  # the second input of a masked policy's file
BATCH = "batch"
OPSET = 18  # ONNX Runtime has run it since 1.14; older runtimes can still load the file
TOLERANCE = 1e-5  # absolute, on continuous actions (and on log-probabilities, for discrete near-ties)
CHECK_ENVS, CHECK_STEPS, CHECK_SEED = 4, 256, 12345  # observations are drawn from CHECK_STEPS env steps


class ExportReport(NamedTuple):
    """What was written and how closely it reproduces the PyTorch policy."""

    path: Path  # the policy file
    spec_path: Path  # the JSON that documents it
    format: str  # "onnx" or "torchscript"
    max_abs_diff: float  # continuous: largest |action difference|; discrete: see ``near_ties``
    tolerance: float
    n_checked: int  # observations compared
    env_id: str
    algo: str
    near_ties: int = 0  # discrete choices that differ where PyTorch's top two were within tolerance
    sequences: tuple[int, int] | None = None  # a recurrent policy's check: (rows, steps) played in order


class ExportCheckError(UsageError):
    """The exported file does not act as the PyTorch policy does."""


def policy_module(agent: Agent) -> nn.Module:
    """A copy of the agent's deterministic ``policy()``, detached from training: what the file holds."""
    return copy.deepcopy(agent.policy(deterministic=True)).requires_grad_(False).eval()


def export_policy(run_dir: Path, fmt: str = "onnx", out: Path | str | None = None, *, best: bool = False,
                  check_batch: int = 64) -> ExportReport:
    """Writes the run's deterministic policy as ``fmt`` ("onnx" or "torchscript") to ``out``
    (default ``RUN/export/policy.onnx`` or ``.pt``) and a JSON spec beside it (``policy.onnx.json``).

    The file is checked before it is put in place: ``check_batch`` observations drawn from the run's
    environment while the agent acts in it, fed to the file (ONNX Runtime for ONNX) in two batches of
    different sizes, must give the PyTorch agent's actions: within ``TOLERANCE`` for continuous
    actions; exactly for discrete ones, except where the agent's two best log-probabilities lie within
    ``TOLERANCE`` of each other (a tie at float precision). Raises ``ExportCheckError`` otherwise and
    ``UsageError`` for a bad run directory or format; returns an ``ExportReport``.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format '{fmt}'; choose one of {', '.join(FORMATS)}")
    if check_batch < 1:
        raise UsageError(f"check_batch must be at least 1, not {check_batch}")
    run_dir = Path(run_dir)
    folder = out is not None and (Path(out).is_dir() or str(out).endswith(("/", os.sep)))
    out = Path(out) if out is not None else default_out(run_dir, fmt)
    if folder:  # a folder to write into, as cp takes one (a path ending in a slash: one to make)
        out = out / f"policy{FORMATS[fmt]}"
    spec_path = out.with_name(out.name + ".json")  # policy.onnx.json: both formats fit in one folder
    if fmt == "onnx":
        require_onnx()

    loaded = RunDir.open(run_dir)
    env = make_env(loaded.cfg, CHECK_ENVS, CHECK_SEED)
    try:
        agent = agent_from_run(loaded, env, resolve_device("cpu"), best).eval()
        check_exportable(getattr(agent, "net", None))
        obs_space, action_space, backend = env.single_observation_space, env.single_action_space, env.backend
        action_start = getattr(env, "action_start", None)  # gymnasium's Discrete(n, start) alone has one
        steps = math.ceil(max(CHECK_STEPS, 2 * check_batch) / CHECK_ENVS)
        with torch.random.fork_rng():
            torch.manual_seed(CHECK_SEED)
            episodes = sample_episodes(agent, env, steps)
    finally:
        env.close()
    writable_folder(out.parent)  # once the run has a policy to export (no folder left by a --best it lacks)
    module = policy_module(agent)
    recurrent = bool(getattr(module, "state_size", 0))
    layout = getattr(getattr(module, "net", None), "layout", None)
    actor_inputs = None if layout is None else ActorInputs(module)
    file_module = module if actor_inputs is None else actor_inputs
    split: Callable[[np.ndarray], tuple[np.ndarray, ...]] = (
        (lambda rows: (rows,)) if actor_inputs is None else actor_inputs.split)
    staging = out.with_name(f".{out.name}.partial")
    try:
        first = episodes.obs[0, :2]  # two rows: a batch of one could be specialised
        examples = (*map(torch.as_tensor, split(first)), *((torch.zeros(2, module.state_size),) if recurrent else ()))
        run_inputs = _export_onnx(file_module, examples, staging) if fmt == "onnx" else _export_torchscript(
            file_module, examples, staging)
        run_file: RunFile = lambda rows, *state: run_inputs(*split(rows), *state)  # noqa: E731
        # against the live agent's policy, not the copy that was exported
        if recurrent:  # whole episodes, each side carrying its own state
            n_checked = episodes.starts.size
            max_diff, near_ties = compare_episodes(agent.policy(deterministic=True), run_file, episodes)
        else:
            pool = episodes.obs.reshape(-1, *episodes.obs.shape[2:])
            rows = np.random.default_rng(CHECK_SEED).choice(len(pool), size=min(check_batch, len(pool)), replace=False)
            n_checked = len(rows)
            max_diff, near_ties = compare(agent.policy(deterministic=True), run_file, pool[np.sort(rows)])
        if not max_diff <= TOLERANCE:
            raise ExportCheckError(
                f"the exported {fmt} policy does not match the PyTorch policy: max |Δaction| = {max_diff:.3g} "
                f"over {n_checked} observations (tolerance {TOLERANCE}); nothing was written")
        os.replace(staging, out)
    finally:
        staging.unlink(missing_ok=True)

    spec = _spec(loaded, fmt, out, module, obs_space, action_space, max_diff, near_ties, n_checked, best)
    spec["action_space"] |= _action_start(action_start)
    if actor_inputs is not None:  # the obs input's keys and the mask, then the state as _spec describes it
        described = actor_inputs.describe()
        spec.update({**described, "inputs": described["inputs"] + spec["inputs"][1:]})
    spec["preprocessing"] = preprocessing(loaded.cfg, backend)
    checkpoint.write_json(spec_path, spec)
    return ExportReport(out, spec_path, fmt, max_diff, TOLERANCE, n_checked, loaded.cfg.env.id,
                        loaded.cfg.algo.algo, near_ties,
                        (episodes.starts.shape[1], episodes.starts.shape[0]) if recurrent else None)


def default_out(run_dir: Path, fmt: str) -> Path:
    """``RUN/export/policy.onnx`` (or ``.pt``); ``./export/NAME/policy.onnx`` for a run that does not
    take output (a Hub cache snapshot, NAME ``USER__NAME``; a folder this user cannot write)."""
    name = f"policy{FORMATS[fmt]}"
    if run_takes_output(run_dir):
        return run_dir / "export" / name
    repo_id = cached_repo_id(run_dir)
    return Path("export") / (safe_repo_name(repo_id) if repo_id else Path(os.path.abspath(run_dir)).name) / name


def check_exportable(net: Any) -> None:
    """A UsageError for the networks export cannot write yet (eval and play run them)."""
    if getattr(getattr(net, "layout", None), "groups", ()):
        raise UsageError("exporting the policies of agents with different spaces (one per agent group) is not "
                         "supported yet; eval and play run them")


RunFile = Callable[..., Any]  # the file's outputs for its inputs: actions, or (actions, state) for a recurrent policy


class ActorInputs(nn.Module):
    """A policy that takes flat observations of a layout (``ActorCritic.layout``: Dict keys, an action
    mask) as a module of what acting needs alone: the actor's keys, concatenated in the layout's order,
    and the mask as a bool tensor. The flat observation is rebuilt with zeros where the critic's own
    keys were, which the actor never reads."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy
        net = policy.net
        # a PPO policy's network, which export_policy wraps where it reads a layout
        assert isinstance(net, ActorCritic) and net.layout is not None
        self.layout, self.actor_keys = net.layout, net.actor_keys
        self.masked = net.layout.mask_key is not None
        self.state_size = getattr(policy, "state_size", 0)  # a recurrent policy's: its state in and out
        self.pixels = False
        self.train(policy.training)  # an exported policy is in eval mode, and so is this

    def forward(self, obs: torch.Tensor, second: torch.Tensor | None = None, third: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(obs[, action_mask][, state]), as ``_names`` lists the file's inputs."""
        action_mask = second if self.masked else None
        state = (third if self.masked else second) if self.state_size else None
        flat = self._flat(obs, action_mask)
        return self.policy(flat) if state is None else self.policy(flat, state)

    def _flat(self, obs: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
        parts, start = [], 0
        for key, width in self.layout.fields:
            if key in self.actor_keys:
                parts.append(obs[:, start:start + width])
                start += width
            elif key == self.layout.mask_key and action_mask is not None:
                parts.append(action_mask.to(obs.dtype))
            else:
                parts.append(obs.new_zeros(obs.shape[0], width))
        return torch.cat(parts, 1)

    def split(self, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """Flat observations as the file's inputs: (actor's keys[, mask])."""
        obs = rows[:, self.layout.columns(self.actor_keys)]
        mask_key = self.layout.mask_key
        if mask_key is None:
            return (obs,)
        return obs, rows[:, self.layout.span(mask_key)] > 0.5

    def describe(self) -> dict[str, Any]:
        """The spec's entries for the inputs: each of the obs input's keys and its columns, the mask's."""
        widths = dict(self.layout.fields)
        inputs = [{"name": INPUT, "dtype": "float32", "shape": [BATCH, sum(widths[k] for k in self.actor_keys)],
                   "keys": [{"key": k, "width": widths[k]} for k in self.actor_keys]}]
        mask_key = self.layout.mask_key
        if mask_key is not None:
            inputs.append({"name": MASK_INPUT, "dtype": "bool", "shape": [BATCH, widths[mask_key]],
                           "meaning": "true where the action may be taken; one entry per action of each "
                                      "dimension, dimensions one after another"})
        return {"inputs": inputs, "action_mask": "masked actions are never chosen" if self.masked else None}


@torch.no_grad()
def compare(module: nn.Module, run_file: RunFile, obs: np.ndarray, split: bool = True) -> tuple[float, int]:
    """(max difference, near ties) between ``run_file``'s actions and those of the policy ``module`` it
    was exported from, on ``obs``.

    The file is run on the first row alone, then on the rest, which also proves its batch axis is
    dynamic (``split`` false: on all rows at once). Continuous: the largest absolute difference.
    Discrete: 0 when every choice agrees; otherwise the largest gap, in the agent's log-probabilities,
    between its choice and the file's (within tolerance: a near tie, counted), or infinity for an
    action that is not valid at all."""
    expected = module(torch.as_tensor(obs)).cpu().numpy()
    parts = [run_file(obs[:1])] + ([run_file(obs[1:])] if len(obs) > 1 else []) if split else [run_file(obs)]
    got = np.concatenate(parts)
    if got.shape != expected.shape:
        raise ExportCheckError(f"the exported policy returned actions of shape {got.shape}; "
                               f"the PyTorch policy's are {expected.shape}")
    if np.issubdtype(expected.dtype, np.floating):  # continuous
        return float(np.abs(got.astype(np.float64) - expected).max(initial=0.0)), 0
    got, expected = got.reshape(len(obs), -1), expected.reshape(len(obs), -1)
    mismatch = got != expected
    if not mismatch.any():
        return 0.0, 0
    log_probs = module.action_log_probs(torch.as_tensor(obs))
    gaps = []
    for row, dim in zip(*np.nonzero(mismatch), strict=True):
        logp = log_probs[dim][row]
        choice = int(got[row, dim])
        gaps.append(float(logp.max() - logp[choice]) if 0 <= choice < len(logp) else math.inf)
    return max(gaps), len(gaps)


@torch.no_grad()
def compare_episodes(module: nn.Module, run_file: RunFile, episodes: Episodes) -> tuple[float, int]:
    """``compare`` over whole episodes for a recurrent policy: step after step, the file and ``module``
    each carry their own state (zero where an episode starts), so a state the file computed wrongly
    shows in the actions that follow it. The states themselves are not compared: an LSTM's cell state
    is unbounded, and a different order of sums may move it by more than the actions' tolerance."""
    size = module.state_size
    envs = episodes.starts.shape[1]
    state = torch.zeros(envs, size)
    file_state = np.zeros((envs, size), dtype=np.float32)
    worst, ties = 0.0, 0
    for obs, starts in zip(episodes.obs, episodes.starts, strict=True):
        state[torch.as_tensor(starts)] = 0.0
        file_state[starts] = 0.0
        state_in = state.clone()
        step_module = _StepOf(module, state_in)
        diff, near = compare(step_module, lambda o, s=file_state: run_file(o, s)[0], obs, split=False)
        actions, state = module(torch.as_tensor(obs), state_in)
        file_state = run_file(obs, file_state)[1]
        worst = max(worst, diff)
        ties += near
    return worst, ties


class _StepOf(nn.Module):
    """A recurrent policy at one step, its state fixed: ``compare`` reads it as a feed-forward one."""

    def __init__(self, module: nn.Module, state: torch.Tensor) -> None:
        super().__init__()
        self.module, self.state = module, state

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module(obs, self.state)[0]

    def action_log_probs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        return self.module.action_log_probs(obs, self.state)


def require_onnx() -> None:
    """Raises a UsageError naming the missing package when ONNX export cannot run here."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise UsageError(f"ONNX export needs onnx, onnxscript and onnxruntime ({e.name} is missing): "
                         'pip install "rlcli[export]"') from None


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """torch's exporters warn about their own deprecations and log optional operator sets that are
    absent (torchvision); neither concerns someone exporting a policy."""
    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    onnx_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", message=r".*torch\.jit.* is deprecated")
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
            # inputs that share one batch axis (observations and a state or a mask), which the exporter names once
            warnings.filterwarnings("ignore", message=r".*The axis name: .* will not be used")
            yield
    finally:
        onnx_log.setLevel(level)


def _names(module: nn.Module) -> tuple[list[str], list[str]]:
    """The file's inputs and outputs: a recurrent policy's take and return its state as well, a masked
    one's take the mask."""
    mask = [MASK_INPUT] if getattr(module, "masked", False) else []
    if getattr(module, "state_size", 0):
        return [INPUT, *mask, STATE], [OUTPUT, STATE_OUT]
    return [INPUT, *mask], [OUTPUT]


def _export_onnx(module: nn.Module, example: torch.Tensor | tuple[torch.Tensor, ...], path: Path) -> RunFile:
    """torch.export-based ONNX export (the TorchScript-based one is deprecated); returns a function
    that runs the written file in ONNX Runtime, on as many arrays as ``example`` holds tensors (the
    observations, then an action mask)."""
    import onnxruntime

    inputs, outputs = _names(module)
    examples = example if isinstance(example, tuple) else (example,)
    batch = torch.export.Dim(BATCH)
    with _quiet_exporters():
        program = torch.onnx.export(
            module, examples, input_names=inputs, output_names=outputs, opset_version=OPSET,
            dynamic_shapes=tuple({0: batch} for _ in examples), dynamo=True, verbose=False)
    if program is None:  # pragma: no cover  (only the legacy exporter returns nothing)
        raise UsageError("torch.onnx.export returned no program")
    program.save(str(path))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()  # a good neighbour, as eval is
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    if len(outputs) == 1:
        return lambda *arrays: session.run(outputs, dict(zip(inputs, arrays, strict=True)))[0]
    return lambda *arrays: tuple(session.run(outputs, dict(zip(inputs, arrays, strict=True))))


def _export_torchscript(module: nn.Module, example: torch.Tensor | tuple[torch.Tensor, ...], path: Path) -> RunFile:
    """A traced module: every branch of the policy's ``forward`` is fixed at construction, so
    tracing captures it whole. Returns a function that runs the file loaded back from disk, on as many
    arrays as ``example`` holds tensors."""
    examples = example if isinstance(example, tuple) else (example,)
    with _quiet_exporters():
        traced = torch.jit.trace(module, examples)
        torch.jit.save(traced, str(path))
        loaded = torch.jit.load(str(path))

    def run(*arrays: np.ndarray) -> Any:
        with torch.no_grad(), _quiet_exporters():
            out = loaded(*(torch.as_tensor(a) for a in arrays))
        return tuple(t.numpy() for t in out) if isinstance(out, tuple) else out.numpy()

    return run


def _spec(loaded: RunDir, fmt: str, out: Path, module: nn.Module, obs_space: gym.Space, action_space: gym.Space,
          max_diff: float, near_ties: int, n_checked: int, best: bool) -> dict[str, Any]:
    obs_dtype = str(np.dtype(obs_space.dtype))
    discrete = isinstance(action_space, gym.spaces.Discrete)
    continuous = isinstance(action_space, gym.spaces.Box)
    norm = module.obs_norm
    action_shape: list[Any] = [BATCH] if discrete else [BATCH, *map(int, _action_dims(action_space))]
    inputs: list[dict[str, Any]] = [{"name": INPUT, "dtype": obs_dtype, "shape": [BATCH, *map(int, obs_space.shape)]}]
    outputs: list[dict[str, Any]] = [{"name": OUTPUT, "dtype": "float32" if continuous else "int64",
                                      "shape": action_shape}]
    if getattr(module, "state_size", 0):
        state = {"dtype": "float32", "shape": [BATCH, int(module.state_size)]}
        inputs.append({"name": STATE, **state, "use": f"zeros at an episode's first step, else the last {STATE_OUT}"})
        outputs.append({"name": STATE_OUT, **state, "use": f"the {STATE} input of the next step"})
    return {
        "format": fmt,
        "file": out.name,
        "inputs": inputs,
        "outputs": outputs,
        "action_space": _describe_action_space(action_space, module),
        "env_id": loaded.cfg.env.id,
        "algo": loaded.cfg.algo.algo,
        "steps_trained": loaded.meta.get("steps"),
        "model": "best evaluated" if best else "last saved",
        "deterministic": True,
        "obs_normalization": {"included": bool(norm.enabled), **({"clip": float(norm.clip)} if norm.enabled else {})},
        "pixel_scaling": "uint8 frames divided by 255 inside" if module.pixels else None,
        "check": {"observations": n_checked, "max_abs_diff": max_diff, "tolerance": TOLERANCE,
                  "near_ties": near_ties,
                  "runtime": "onnxruntime" if fmt == "onnx" else "torch.jit.load"},
        "versions": {"rlcli": rlcli.__version__, "torch": torch.__version__,
                     **({"onnx_opset": OPSET, **_onnx_versions()} if fmt == "onnx" else {})},
    }


def preprocessing(cfg: RunConfig, backend: str) -> dict[str, Any]:
    """How rlcli turns what the game or simulator produces into the policy's input, for someone who
    feeds the exported file from their own environment: the env group, the backend, and for Atari the
    resolved wrapper settings (the run's ``env_kwargs`` over the defaults) with the steps they imply."""
    group = env_group(cfg.env.id)
    env_kwargs = dict(cfg.env.kwargs)
    if group != "atari":
        return {"group": group, "backend": backend, "env_kwargs": env_kwargs,
                "observation": "the environment's own observation (float64 cast to float32), no wrappers; "
                               "the normalisation in obs_normalization is inside the file"}
    # the gymnasium backend's wrapper takes envpool's keyword names and defaults, so one set describes both
    settings: dict[str, Any] = {"max_episode_steps": MAX_EPISODE_STEPS, **atari_opts(env_kwargs)}
    skip, stack = int(settings["frame_skip"]), int(settings["stack_num"])
    height, width = int(settings["img_height"]), int(settings["img_width"])
    steps = [f"each action is repeated for {skip} emulator frames; the last two frames are max-pooled",
             "converted to grayscale with the ALE palette" if settings["gray_scale"] else "kept in colour",
             f"resized to {height}x{width} (OpenCV INTER_AREA)",
             f"the last {stack} frames stacked on the first axis, oldest first, as uint8"]
    return {"group": group, "backend": backend, "wrapper": "envpool's Atari preprocessing (rlcli.envs.atari "
            "reproduces it on gymnasium)", "settings": settings, "observation": steps}


def _action_dims(action_space: gym.Space) -> tuple[int, ...]:
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return (len(action_space.nvec),)
    return tuple(action_space.shape or ())


def _describe_action_space(space: gym.Space, module: nn.Module) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "output": "argmax of the policy's logits"}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "multidiscrete", "nvec": [int(n) for n in space.nvec],
                "output": "argmax per dimension"}
    assert isinstance(space, gym.spaces.Box), space  # the only other kind the networks act in
    # unbounded dimensions are null: JSON has no infinity
    bounds = {name: [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64).ravel()]
              for name, values in (("low", space.low), ("high", space.high))}
    return {"type": "box", "shape": [int(d) for d in space.shape], **bounds, "output": module.continuous_output}


def _action_start(start: int | np.ndarray | None) -> dict[str, Any]:
    """What a deployment adds to the output, where the env numbers its choices from ``start``, not 0."""
    if start is None:
        return {}
    return {"start": np.asarray(start).tolist(),
            "numbering": "the output counts from 0; the env's action is it plus start"}


def _onnx_versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
