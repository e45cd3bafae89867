"""MJLab backend: its Isaac-Lab-style robot tasks (``Mjlab-Velocity-Flat-Unitree-Go1``, ...), simulated by MuJoCo
Warp on the training device, whose arrays are torch tensors there already.

MJLab's env resets a finished env within the step that ends it (the final observation is lost); this backend
turns that off (``auto_reset=False``) and keeps rlcli's rule instead (see ``rlcli.envs.base``): the step after a
done ignores its action and returns a fresh first observation with reward 0; the observation that comes with
a done is the real final one; a time-out term is a truncation. MJLab steps every env together, so an env that
ended is stepped once more with the others and then reset through MJLab's own ``reset(env_ids=...)``, which
also lets its curricula see each episode once. The observation groups are flattened in the layout the
networks read: ``actor`` as it is and ``critic`` as the privileged key ``state``, which the critic alone
reads.

The envs' state lives in MuJoCo Warp's buffers and in every manager's own (commands, action and observation
histories, event timers), and MuJoCo Warp does not step bit-for-bit alike from equal states, so a
checkpoint cannot hold it: a resumed run starts new episodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import os
import random
from functools import lru_cache
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcli.envs.base import SteppedOnWait, StepResult
from rlcli.envs.layout import PRIVILEGED_KEY, ObsLayout, flat_space, layout_of
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.envs.torch_backend import on_current_gpu
from rlcli.errors import UsageError

# Warp prints a line for every kernel module it loads or compiles (hundreds, at each run's first step) unless
# told to keep quiet; MJLAB_WARP_QUIET=0 keeps them
os.environ.setdefault("MJLAB_WARP_QUIET", "1")

INSTALL = "pip install 'rlcli[mjlab]'"
# MJLab's observation groups under the keys the networks read: its critic's group is the privileged one
KEYS = {"critic": PRIVILEGED_KEY}
CLIP_ACTIONS = "clip_actions"  # a keyword of rlcli's, as MJLab's RSL-RL wrapper has it; the rest set the task's config
# MJLab's runner sends actions unclipped, but rlcli's action spaces are bounded: +-100, far beyond what a Gaussian
# policy samples, does not bind, so actions reach the task as MJLab's own training sends them
UNCLIPPED = 100.0


def mjlab_available() -> bool:
    from importlib.util import find_spec

    return find_spec("mjlab") is not None


@lru_cache(maxsize=1)
def mjlab_tasks() -> tuple[str, ...]:
    """The task ids MJLab (and the task packages registered with it) has; empty where it is not installed."""
    if not mjlab_available():
        return ()
    with contextlib.redirect_stdout(io.StringIO()):
        import mjlab.tasks  # noqa: F401  (registers MJLab's tasks)
        from mjlab.tasks.registry import list_tasks

        return tuple(list_tasks())


def check_task(env_id: str) -> None:
    """A UsageError, one line, where MJLab is not installed or has no task ``env_id`` (naming close ones)."""
    if not mjlab_available():
        raise UsageError(f"{env_id} needs MJLab, which is not installed: {INSTALL}")
    tasks = mjlab_tasks()
    if env_id not in tasks:
        close = difflib.get_close_matches(env_id, tasks, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else f"it has {', '.join(tasks)}"
        raise UsageError(f"MJLab has no task '{env_id}'; {hint}")


def task_config(env_id: str, num_envs: int, seed: int, kwargs: dict[str, Any]) -> Any:
    """MJLab's config of ``env_id`` for ``num_envs`` envs, without auto-reset, with ``kwargs`` set on its plain
    fields (``episode_length_s``, ``decimation``, ...); a UsageError names a keyword it lacks."""
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(env_id)
    plain = sorted(f.name for f in dataclasses.fields(cfg)
                   if isinstance(getattr(cfg, f.name), bool | int | float) and f.name not in ("seed", "auto_reset"))
    for key, value in kwargs.items():
        if key not in plain:
            close = difflib.get_close_matches(key, [*plain, CLIP_ACTIONS], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(f"MJLab's {env_id} takes no keyword '{key}'; {hint}it takes {', '.join(plain)} "
                             f"and {CLIP_ACTIONS}")
        setattr(cfg, key, value)
    cfg.scene.num_envs, cfg.seed, cfg.auto_reset = num_envs, seed, False
    return cfg


def quiet_warp() -> None:
    """Warp's log at warnings and above where MJLAB_WARP_QUIET asks for quiet: the Warp MJLab 1.6 installs logs
    by level, which MJLab's own switch (``warp.config.quiet``) no longer sets."""
    import warp

    if os.environ.get("MJLAB_WARP_QUIET", "1").lower() in ("1", "true", "yes"):
        warp.config.log_level = max(warp.config.log_level, warp.LOG_WARNING)


@contextlib.contextmanager
def own_generators(device: torch.device) -> Any:
    """Leaves torch's, numpy's and Python's global generators as they were: MJLab seeds them all with the env's
    seed when it builds the envs, which would otherwise reseed the run's."""
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy)


class MjlabVecEnv(SteppedOnWait):
    """``num_envs`` envs of an MJLab task on ``device``; its arrays are torch tensors there. ``kwargs`` set the
    task's config (``episode_length_s``, ...) and ``clip_actions`` bounds the actions to +-that (MJLab's own
    training leaves them unbounded, which the default +-``UNCLIPPED`` comes as close to as a bounded space can;
    SAC and TD3, which act within the bounds, want ``clip_actions`` 1, say). MJLab's startup randomisation is
    seeded with ``seed``; its resets, pushes and commands draw from torch's global generator, which the run
    seeds."""

    backend = "mjlab"

    def __init__(self, env_id: str, num_envs: int, seed: int, device: torch.device | str = "cpu",
                 kwargs: dict[str, Any] | None = None) -> None:
        check_task(env_id)
        kwargs = dict(kwargs or {})
        clip = kwargs.pop(CLIP_ACTIONS, None)
        if clip is not None and not float(clip) > 0:
            raise UsageError(f"{CLIP_ACTIONS} bounds the actions to +-that; it must be above 0, not {clip}")
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.device = on_current_gpu(torch.device(device))
        if self.device.type not in ("cpu", "cuda"):
            raise UsageError(f"the mjlab backend runs on a CPU or a CUDA device, not {self.device.type}")
        cfg = task_config(env_id, num_envs, seed, kwargs)
        from mjlab.envs import ManagerBasedRlEnv

        quiet_warp()
        # MJLab prints its managers' tables as it builds them
        with own_generators(self.device), contextlib.redirect_stdout(io.StringIO()):
            try:
                self._env = ManagerBasedRlEnv(cfg=cfg, device=str(self.device))
            except Exception as e:
                detail = " ".join(str(e).split()) or "no message"
                raise UsageError(f"MJLab's {env_id} could not be made: {type(e).__name__}: {detail}") from e
        self.episode_length = int(self._env.max_episode_length)
        self._finite_horizon = bool(cfg.is_finite_horizon)  # MJLab's: the time limit ends the task, no bootstrap
        size = int(self._env.action_manager.total_action_dim)
        self._clip = UNCLIPPED if clip is None else float(clip)
        self.single_action_space = gym.spaces.Box(-self._clip, self._clip, (size,), dtype=np.float32)
        self.single_action_space.seed(seed)
        groups = self._env.single_observation_space.spaces
        space = gym.spaces.Dict({KEYS.get(g, g): self._group_space(g, s) for g, s in groups.items()})
        self.obs_layout: ObsLayout | None = layout_of(space, None, self.single_action_space)
        assert self.obs_layout is not None  # a Dict observation always has a layout
        self.single_observation_space = flat_space(self.obs_layout)
        # MJLab's groups in the layout's order, which the flat rows follow
        group_of = {KEYS.get(g, g): g for g in groups}
        self._groups = tuple(group_of[key] for key in self.obs_layout.keys)
        self.reset()

    def _group_space(self, group: str, space: Any) -> gym.spaces.Box:
        shape = getattr(space, "shape", None)
        if not isinstance(shape, tuple) or len(shape) != 1:
            raise UsageError(f"MJLab's {self.env_id} observes '{group}' as {space}; rlcli takes groups that "
                             "are flat vectors")
        return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)

    def _flat(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([obs[g].reshape(self.num_envs, -1) for g in self._groups], dim=1).to(torch.float32)

    def reset(self) -> torch.Tensor:
        obs, _ = self._env.reset()
        self._done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self._flat(obs)

    def step(self, actions: torch.Tensor | np.ndarray) -> StepResult[torch.Tensor]:
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device).reshape(self.num_envs, -1)
        actions = actions.clamp(-self._clip, self._clip)
        resetting = self._done
        # MJLab refuses to step while an env awaits its reset; the envs that ended are stepped once more with the
        # rest and reset below, so their next observation is a first one and their action is ignored
        self._env._manual_reset_pending.zero_()
        obs, reward, terminated, time_outs, _ = self._env.step(actions)
        flat = self._flat(obs)
        if self._finite_horizon:
            terminated, time_outs = terminated | time_outs, torch.zeros_like(time_outs)
        terminated, truncated = terminated & ~resetting, time_outs & ~resetting
        reward = torch.where(resetting, 0.0, reward).to(torch.float32)
        ids = resetting.nonzero().squeeze(-1)
        if len(ids):  # MJLab reads its dones back to the host each step already
            fresh, _ = self._env.reset(env_ids=ids)
            flat = torch.where(resetting[:, None], self._flat(fresh), flat)
        done = terminated | truncated
        self._done = done
        return StepResult(flat, reward, terminated, truncated, reward.clone(), done)

    def state(self) -> Snapshot:
        raise EnvStateUnreadable("MJLab keeps its envs' state in MuJoCo Warp's buffers and its managers' own, "
                                 "and MuJoCo Warp does not step bit-for-bit alike, so it cannot be saved")

    def load_state(self, snapshot: Snapshot) -> None:
        raise EnvStateUnreadable("MJLab's envs cannot be set to a saved state")

    def close(self) -> None:
        self._env.close()
