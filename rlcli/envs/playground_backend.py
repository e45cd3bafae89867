"""MuJoCo Playground backend: its tasks (MJX, on JAX) stepped as one jit-compiled function over the batch of
envs, on the JAX device that matches the training device, handed to torch through DLPack without a copy.

Playground's own wrappers reset a finished env within the step that ends it (the final observation is lost)
and, by default, to the same first state every episode; this backend keeps rlcli's rule instead (see
``rlcli.envs.base``): the step after a done ignores its action and returns a fresh first observation with
reward 0, drawn with a new key; the observation that comes with a done is the real final one; the task's
``episode_length`` is a truncation. The reset is computed only in steps where some env resets
(``lax.cond`` inside the compiled step; on a GPU, XLA may read that one flag back each step, not yet
measured). A Dict observation (``state`` and ``privileged_state``) is flattened on the device in the layout
the networks read.

Tasks are named as Playground names them (``CartpoleBalance``, ``Go1JoystickFlatTerrain``) or as envpool does
(``CartpoleBalance-v1``, ``MuJoCoPlayground/Go1JoystickFlatTerrain-v1``), so a task envpool steps on the CPU
moves to the GPU with --backend.
They run on Playground's pure-JAX MJX (``impl: jax``): its MuJoCo-Warp default compiles 35 s of kernels and
steps about 15x slower on a CPU. The robots of MuJoCo Menagerie, which Playground clones from the network at
first use, come from envpool's asset packages where Playground has no copy of its own (``menagerie_from_envpool``).
"""

from __future__ import annotations

import json
import os
import uuid
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcli.envs.base import SteppedOnWait, StepResult
from rlcli.envs.layout import ObsLayout, flat_space, layout_of
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.envs.torch_backend import on_current_gpu
from rlcli.errors import UsageError

# JAX's default takes 75% of a GPU's memory at its first use, which torch in the same process then lacks
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

PREFIX, SUFFIX = "MuJoCoPlayground/", "-v1"  # envpool's spellings of the same tasks


def playground_available() -> bool:
    from importlib.util import find_spec

    return find_spec("mujoco_playground") is not None


def playground_name(env_id: str) -> str | None:
    """Playground's name for ``env_id``, None where it has no such task (or is not installed)."""
    if not playground_available():
        return None
    from mujoco_playground import registry

    name = env_id.removeprefix(PREFIX).removesuffix(SUFFIX)
    return name if name in registry.ALL_ENVS else None


def use_compilation_cache() -> None:
    """JAX's on-disk cache of compiled steps, in rlcli's cache folder unless the user named one: a second
    run (or a second env of the same task and batch size) loads the step instead of compiling it again."""
    import jax

    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))


def cache_dir() -> Path:
    """rlcli's cache folder (``$XDG_CACHE_HOME/rlcli``, else ``~/.cache/rlcli``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlcli"


def envpool_menagerie_robots() -> dict[str, Path]:
    """The Menagerie robot folders envpool's asset packages (``envpool_assets_*``, installed beside envpool)
    ship, by name."""
    from importlib.util import find_spec

    spec = find_spec("envpool")
    if spec is None or spec.origin is None:
        return {}
    robots: dict[str, Path] = {}
    site = Path(spec.origin).parent.parent
    for root in sorted(site.glob("envpool_assets*/mujoco/playground/assets/mujoco_menagerie")):
        robots.update({d.name: d for d in sorted(root.iterdir()) if d.is_dir()})
    return robots


_playgrounds_menagerie: Any = None  # Playground's own Menagerie path, once rlcli points it at envpool's copy


def menagerie_from_envpool() -> None:
    """Points Playground at envpool's copy of the Menagerie robots when it has none of its own: a folder of
    links to them in rlcli's cache (envpool splits them over several packages; Playground reads one folder).
    Playground's own copy, where it has one, stays its source; a cache rlcli cannot write leaves it as it is."""
    global _playgrounds_menagerie
    from etils import epath
    from mujoco_playground._src import mjx_env

    robots = envpool_menagerie_robots()
    if _playgrounds_menagerie is not None or mjx_env.MENAGERIE_PATH.exists() or not robots:
        return
    folder = cache_dir() / "mujoco_menagerie"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, target in robots.items():
            link = folder / name
            if link.is_symlink() and link.readlink() == target:
                continue
            if link.exists() and not link.is_symlink():  # a folder put there by hand: left as it is
                continue
            staging = folder / f".{name}.{uuid.uuid4().hex}"
            staging.symlink_to(target, target_is_directory=True)
            staging.replace(link)  # atomic: another process sees the old link or the new one
    except OSError:
        return
    _playgrounds_menagerie, mjx_env.MENAGERIE_PATH = mjx_env.MENAGERIE_PATH, epath.Path(folder)


def load_task(name: str, overrides: dict[str, Any]) -> Any:
    """Playground's task ``name`` with its config overridden; a UsageError where it cannot be made. A robot
    envpool's copy lacks is tried again from Playground's own Menagerie (which it clones where it can)."""
    from mujoco_playground import registry
    from mujoco_playground._src import mjx_env

    menagerie_from_envpool()
    try:
        return registry.load(name, config_overrides=overrides)
    except Exception as e:  # a config key the task lacks, a model file it cannot fetch
        error = e
    if _playgrounds_menagerie is not None and mjx_env.MENAGERIE_PATH != _playgrounds_menagerie:
        ours, mjx_env.MENAGERIE_PATH = mjx_env.MENAGERIE_PATH, _playgrounds_menagerie
        try:
            return registry.load(name, config_overrides=overrides)
        except Exception:
            pass
        finally:
            mjx_env.MENAGERIE_PATH = ours
    detail = " ".join(str(error).split())
    raise UsageError(f"MuJoCo Playground's {name} could not be made: {type(error).__name__}: {detail}") from error


def jax_device(device: torch.device) -> Any:
    """The JAX device that shares memory with torch's ``device``."""
    import jax

    if device.type == "cuda":
        return jax.devices("cuda")[on_current_gpu(device).index]
    if device.type != "cpu":
        raise UsageError(f"the playground backend runs on a CPU or a CUDA device, not {device.type}")
    return jax.devices("cpu")[0]


def spaces(task: Any) -> tuple[gym.spaces.Box, gym.spaces.Space]:
    """The task's action space (each control in [-1, 1]) and observation space, as Playground sizes them."""
    action_space = gym.spaces.Box(-1.0, 1.0, (task.action_size,), dtype=np.float32)
    shapes = task.observation_size
    obs_space = gym.spaces.Dict({k: gym.spaces.Box(-np.inf, np.inf, tuple(v), np.float32) for k, v in shapes.items()}) \
        if isinstance(shapes, dict) else gym.spaces.Box(-np.inf, np.inf, (int(np.prod(shapes)),), np.float32)
    return action_space, obs_space


class Batch:
    """A task's reset and step over ``num_envs`` envs, each jit-compiled once for the process: every env of the
    same task, config, size and device (a run and its resume, each trial of an in-process tune study) steps
    through the same traced functions, where tracing MJX again takes seconds a function on a CPU."""

    def __init__(self, task: Any, num_envs: int, device: Any) -> None:
        import jax

        self.task, self.num_envs = task, num_envs
        self.episode_length = int(task._config.episode_length)
        action_space, obs_space = spaces(task)
        self.obs_layout: ObsLayout | None = layout_of(obs_space, None, action_space)
        with jax.default_device(device):
            self.reset, self.step = jax.jit(self._reset_all), jax.jit(self._step_all)

    def _flat(self, obs: Any) -> Any:
        import jax.numpy as jnp

        if self.obs_layout is None:
            return obs.reshape(self.num_envs, -1)
        return jnp.concatenate([obs[key].reshape(self.num_envs, -1) for key in self.obs_layout.keys], axis=1)

    def _reset_all(self, key: Any) -> tuple[Any, ...]:
        import jax
        import jax.numpy as jnp

        key, first = jax.random.split(key)
        state = jax.vmap(self.task.reset)(jax.random.split(first, self.num_envs))
        zeros = jnp.zeros(self.num_envs, dtype=jnp.int32)
        return state, zeros, jnp.zeros(self.num_envs, dtype=bool), key, self._flat(state.obs)

    def _step_all(self, carry: tuple[Any, ...], actions: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        import jax
        import jax.numpy as jnp

        state, elapsed, resetting, key = carry
        stepped = jax.vmap(self.task.step)(state, actions)
        key, fresh_key = jax.random.split(key)

        def with_resets(stepped: Any) -> Any:
            fresh = jax.vmap(self.task.reset)(jax.random.split(fresh_key, self.num_envs))
            # fresh first states where an env resets, by rows: every leaf of the state has the env axis first
            pick = partial(lambda new, old: jnp.where(resetting.reshape((-1,) + (1,) * (old.ndim - 1)), new, old))
            return jax.tree_util.tree_map(pick, fresh, stepped)

        state = jax.lax.cond(resetting.any(), with_resets, lambda s: s, stepped)
        elapsed = jnp.where(resetting, 0, elapsed + 1)
        terminated = (stepped.done > 0) & ~resetting
        truncated = elapsed >= self.episode_length
        reward = jnp.where(resetting, 0.0, state.reward).astype(jnp.float32)
        done = terminated | truncated
        obs = self._flat(state.obs).astype(jnp.float32)
        return (state, elapsed, done, key), (obs, reward, terminated, truncated, done)


_BATCHES: dict[tuple[Any, ...], Batch] = {}
_KEPT = 8  # batches a process keeps, the least recently used dropped first: each holds its task's model


def batch_of(name: str, overrides: dict[str, Any], num_envs: int, device: Any) -> Batch:
    """The process's Batch of task ``name`` with ``overrides``, made at its first use; overrides JSON cannot
    spell exactly make a Batch of their own every time."""
    try:
        key = (name, json.dumps(overrides, sort_keys=True), num_envs, device)
    except (TypeError, ValueError):
        return Batch(load_task(name, overrides), num_envs, device)
    batch = _BATCHES.pop(key, None) or Batch(load_task(name, overrides), num_envs, device)
    _BATCHES[key] = batch
    while len(_BATCHES) > _KEPT:
        _BATCHES.pop(next(iter(_BATCHES)))
    return batch


class PlaygroundVecEnv(SteppedOnWait):
    """``num_envs`` envs of a Playground task on the JAX device matching ``device``; its arrays are torch
    tensors there. ``kwargs`` override the task's config (e.g. ``episode_length``, ``ctrl_dt``)."""

    backend = "playground"

    def __init__(self, env_id: str, num_envs: int, seed: int, device: torch.device | str = "cpu",
                 kwargs: dict[str, Any] | None = None) -> None:
        name = playground_name(env_id)
        if name is None:
            raise UsageError(f"MuJoCo Playground has no task '{env_id}'" + (
                "" if playground_available() else " (it is not installed: pip install 'rlcli[playground]')"))
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.device = torch.device(device)
        self._jax_device = jax_device(self.device)
        use_compilation_cache()
        self._batch = batch_of(name, {"impl": "jax", **(kwargs or {})}, num_envs, self._jax_device)
        self.episode_length = self._batch.episode_length
        self.single_action_space, space = spaces(self._batch.task)
        self.obs_layout = self._batch.obs_layout
        self.single_observation_space = space if self.obs_layout is None else flat_space(self.obs_layout)
        self.single_action_space.seed(seed)
        self.reset()

    def reset(self) -> torch.Tensor:
        import jax

        with jax.default_device(self._jax_device):
            state, elapsed, done, key, obs = self._batch.reset(jax.random.PRNGKey(self.seed))
        self._carry = jax.device_put((state, elapsed, done, key), self._jax_device)
        return torch.from_dlpack(obs)

    def step(self, actions: torch.Tensor | np.ndarray) -> StepResult[torch.Tensor]:
        import jax.numpy as jnp

        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        moved = jnp.from_dlpack(actions.reshape(self.num_envs, -1).contiguous())
        self._carry, out = self._batch.step(self._carry, moved)
        obs, reward, terminated, truncated, done = (torch.from_dlpack(x) for x in out)
        return StepResult(obs, reward, terminated, truncated, reward.clone(), done)


    @cached_property
    def _structure(self) -> Any:
        import jax

        return jax.tree_util.tree_structure(self._carry)

    def state(self) -> Snapshot:
        """Every leaf of the envs' JAX state (MJX's data, the task's info), the steps into each episode, which
        ended, and the key the next resets draw from."""
        import jax

        leaves = jax.tree_util.tree_leaves(self._carry)
        return Snapshot({"env_id": self.env_id, "leaves": len(leaves)},
                        {f"leaf{i}": torch.from_numpy(np.array(leaf)) for i, leaf in enumerate(leaves)})

    def load_state(self, snapshot: Snapshot) -> None:
        import jax

        leaves = jax.tree_util.tree_leaves(self._carry)
        saved = [snapshot.tensors.get(f"leaf{i}") for i in range(len(leaves))]
        if snapshot.values.get("env_id") != self.env_id or snapshot.values.get("leaves") != len(leaves) or any(
                t is None or tuple(t.shape) != tuple(leaf.shape) for t, leaf in zip(saved, leaves, strict=True)):
            raise EnvStateUnreadable(f"the saved envs are not {self.num_envs} of {self.env_id} on Playground")
        arrays = [np.asarray(snapshot.tensors[f"leaf{i}"].numpy(), dtype=leaf.dtype) for i, leaf in enumerate(leaves)]
        self._carry = jax.device_put(jax.tree_util.tree_unflatten(self._structure, arrays), self._jax_device)

    def close(self) -> None:
        pass
