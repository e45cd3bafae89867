"""envpool backend: the C++ vectorised engine, used wherever it has the task."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlcli.envs.base import StepResult, creation_error, float32_obs, float32_space
from rlcli.envs.envpool_import import import_envpool
from rlcli.envs.layout import MASK_KEY, ObsFlattener, ObsLayout, flat_space, layout_of
from rlcli.envs.snapshot import EnvStateUnreadable, Snapshot
from rlcli.errors import UsageError

# Standard Atari preprocessing (Machado et al. / Nature DQN); rlcli/envs/atari.py copies it for gymnasium.
ATARI_KWARGS = dict(
    episodic_life=True, reward_clip=True, use_fire_reset=True, noop_max=30, frame_skip=4,
    stack_num=4, img_height=84, img_width=84, gray_scale=True, repeat_action_probability=0.0,
)


def atari_opts(kwargs: dict | None) -> dict:
    """ATARI_KWARGS overridden by ``kwargs``. ``noop_max`` below 1 becomes 1: envpool draws
    U[0, noop_max - 1] no-op frames (crashing on 0), so 1 is its "no random no-ops" (none in FIRE
    games, a single one otherwise), which is what ``noop_max: 0`` means on the gymnasium backend."""
    opts = {**ATARI_KWARGS, **(kwargs or {})}
    opts["noop_max"] = max(int(opts["noop_max"]), 1)
    return opts


# frames a second of a video of a task whose spec states no control step (DM Control's)
DEFAULT_RENDER_FPS = 50
_gl_context: Any = None


def current_gl_context() -> None:
    """Makes an off-screen OpenGL context current on this thread (one a process, made through MuJoCo's own
    ``GLContext``, ``MUJOCO_GL``: egl, osmesa): envpool's C++ MuJoCo renders into whatever context is current
    and makes none of its own. A UsageError where none can be made."""
    global _gl_context
    if _gl_context is None:
        import mujoco

        try:
            _gl_context = mujoco.GLContext(64, 64)
        except Exception as e:  # no EGL or OSMesa library, or no device they can open
            detail = " ".join(str(e).split())
            raise UsageError(f"no off-screen OpenGL context for envpool's renderer (MUJOCO_GL="
                             f"{os.environ.get('MUJOCO_GL', 'unset')}; egl needs libEGL, osmesa libOSMesa): "
                             f"{type(e).__name__}: {detail}") from e
    _gl_context.make_current()


class EnvpoolVecEnv:
    backend = "envpool"

    def __init__(self, name: str, num_envs: int, seed: int, atari: bool,
                 kwargs: dict | None = None, num_threads: int = 0, render_mode: str | None = None) -> None:
        envpool = import_envpool()
        opts = atari_opts(kwargs) if atari else dict(kwargs or {})
        if render_mode is not None:
            current_gl_context()
            opts["render_mode"] = render_mode
        try:
            self._env = envpool.make(name, env_type="gymnasium", num_envs=num_envs, seed=seed,
                                     num_threads=num_threads, **opts)
        except (TypeError, ValueError, AssertionError) as e:  # envpool's answers to keywords it does not take
            raise creation_error(name, e) from e
        self._atari = atari
        self.num_envs = num_envs
        self.single_action_space = float32_space(self._env.action_space)
        self.obs_layout: ObsLayout | None = layout_of(self._env.observation_space, self._info_mask_width(),
                                                      self.single_action_space)
        # None: a Box without a mask, passed on as it is, as before Dict observations were taken
        self._flatten = None if self.obs_layout is None else ObsFlattener(self.obs_layout, self.single_action_space)
        self.single_observation_space = float32_space(self._env.observation_space) \
            if self.obs_layout is None else flat_space(self.obs_layout)

    def _info_mask_width(self) -> int | None:
        """Entries of the ``action_mask`` the task publishes in ``info`` (from envpool's spec, which lists
        every info key), None where it publishes none."""
        spec = self._env.spec
        keys = list(getattr(spec, "_state_keys", ()))
        name = f"info:{MASK_KEY}"
        if name not in keys:
            return None
        return int(np.prod(spec.state_array_spec[name].shape))

    def _observation(self, obs: np.ndarray, info: dict) -> np.ndarray:
        return float32_obs(obs) if self._flatten is None else self._flatten(obs, info)

    def reset(self) -> np.ndarray:
        obs, info = self._env.reset()
        return self._observation(obs, info)

    def step(self, actions: np.ndarray) -> StepResult:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        self._env.send(actions)

    def step_wait(self) -> StepResult:
        obs, reward, terminated, truncated, info = self._env.recv(reset=False, return_info=True)
        if self._atari:
            raw_reward = info["reward"].astype(np.float32)
            game_over = info["terminated"].astype(bool) | truncated
        else:
            raw_reward = reward.astype(np.float32)
            game_over = terminated | truncated
        return StepResult(self._observation(obs, info), reward.astype(np.float32), terminated, truncated,
                          raw_reward, game_over)

    def render(self) -> np.ndarray:
        """The first env's frame (RGB), for an env made with ``render_mode="rgb_array"``."""
        current_gl_context()
        return np.asarray(self._env.render())[0]

    @property
    def render_fps(self) -> int:
        """Env steps a second of simulated time where the task's spec states its control step, else
        DEFAULT_RENDER_FPS."""
        ctrl_dt = getattr(self._env.spec.config, "ctrl_dt", None)
        return round(1 / ctrl_dt) if ctrl_dt else DEFAULT_RENDER_FPS

    def state(self) -> Snapshot:
        raise EnvStateUnreadable("envpool keeps its envs' state in C++, where it cannot be read")

    def load_state(self, snapshot: Snapshot) -> None:
        raise EnvStateUnreadable("envpool's envs cannot be set to a saved state")

    def close(self) -> None:
        self._env.close()
