"""gymnasium backend: any registered id, vectorised in-process with next-step auto-reset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlcli.envs.atari import make_atari_env
from rlcli.envs.base import StepResult, creation_error, float32_obs, float32_space, make_gym_env, numbered_from_zero
from rlcli.envs.layout import ObsFlattener, ObsLayout, flat_space, layout_of
from rlcli.envs.snapshot import Snapshot, capture, restore
from rlcli.errors import UsageError


def make_single_env(gym_id: str, atari: bool, render_mode: str | None = None,
                    kwargs: dict[str, Any] | None = None) -> gym.Env:
    kwargs = dict(kwargs or {})
    if atari:
        return make_atari_env(gym_id, render_mode=render_mode, **kwargs)
    if render_mode and ".mujoco" in str(gym.spec(gym_id).entry_point):
        # the model's own body-tracking camera: gymnasium's default free camera stays where the
        # robot started, so a walker leaves the picture after a few seconds
        kwargs.setdefault("camera_name", "track")
    if render_mode is not None:  # only then: an env that never renders need not take the keyword (POPGym's)
        kwargs["render_mode"] = render_mode
    return one_hot_observations(make_gym_env(gym_id, **kwargs))


ONE_HOT = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Tuple)


def one_hot_observations(env: gym.Env) -> gym.Env:
    """An env whose observations are symbols (Discrete, MultiDiscrete, MultiBinary, or a Tuple of those
    and Boxes, as POPGym's) observed as one float32 vector: gymnasium's flattening, one-hot per symbol."""
    space = env.observation_space
    if not isinstance(space, ONE_HOT):
        return env
    if isinstance(space, gym.spaces.Tuple) and not all(isinstance(s, (*ONE_HOT, gym.spaces.Box)) for s in space):
        return env
    return gym.wrappers.DtypeObservation(gym.wrappers.FlattenObservation(env), np.float32)


def vector_entry_point(gym_id: str, atari: bool, render_mode: str | None) -> bool:
    """Whether ``gym_id`` is made through its vector entry point: where it has one, except gymnasium's own
    (CartPole's draws every env from one generator: its envs would not be those that trained bits, seeds and
    the zoo's agents came from) and for rendering (a frame is the first env's, which a vector env has not)."""
    spec = None if atari or render_mode is not None else gym.spec(gym_id)
    entry = None if spec is None else spec.vector_entry_point
    return entry is not None and not (isinstance(entry, str) and entry.startswith("gymnasium."))


def make_vector_env(gym_id: str, num_envs: int, kwargs: dict[str, Any] | None) -> gym.vector.VectorEnv:
    """``gym_id``'s own vector env (next-step auto-reset, as the per-env path); what its code raises is a
    UsageError naming the id."""
    try:
        env = gym.make_vec(gym_id, num_envs, vectorization_mode="vector_entry_point", **(kwargs or {}))
    except Exception as e:
        raise creation_error(gym_id, e) from e
    if env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) != AutoresetMode.NEXT_STEP:
        raise UsageError(f"environment '{gym_id}': its vector env resets {env.metadata['autoreset_mode']}; rlcli "
                         "steps vector envs that reset on the next step")
    return env


class GymnasiumVecEnv:
    backend = "gymnasium"

    def __init__(self, gym_id: str, num_envs: int, seed: int, atari: bool,
                 kwargs: dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        self._env = make_vector_env(gym_id, num_envs, kwargs) if vector_entry_point(gym_id, atari, render_mode) \
            else SyncVectorEnv([lambda: make_single_env(gym_id, atari, render_mode, kwargs) for _ in range(num_envs)],
                               autoreset_mode=AutoresetMode.NEXT_STEP)
        self._seed = seed
        self._atari = atari
        self.num_envs = num_envs
        self.single_action_space, self.action_start = numbered_from_zero(self._env.single_action_space)
        self.obs_layout: ObsLayout | None = layout_of(self._env.single_observation_space,
                                                      self._info_mask_width(), self.single_action_space)
        # None: a Box without a mask, passed on as it is, as before Dict observations were taken
        self._flatten = None if self.obs_layout is None else ObsFlattener(self.obs_layout, self.single_action_space)
        self.single_observation_space = float32_space(self._env.single_observation_space) \
            if self.obs_layout is None else flat_space(self.obs_layout)
        self.single_action_space.seed(seed)

    def _info_mask_width(self) -> int | None:
        """Entries of the ``action_mask`` the env publishes in ``info``, None where it publishes none: read
        from one reset of the first env, or of a vector env's all (``reset`` reseeds every env, so the draw is not
        used up)."""
        if self._atari or not isinstance(self.single_action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            return None
        single = isinstance(self._env, SyncVectorEnv)
        _, info = (self._env.envs[0] if single else self._env).reset(seed=self._seed)
        return int(np.size(info["action_mask"])) // (1 if single else self.num_envs) if "action_mask" in info else None

    def _observation(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        return float32_obs(obs) if self._flatten is None else self._flatten(obs, info)

    def reset(self) -> np.ndarray:
        obs, info = self._env.reset(seed=self._seed)
        return self._observation(obs, info)

    def step(self, actions: np.ndarray) -> StepResult:
        if self.action_start is not None:
            actions = actions + self.action_start
        obs, reward, terminated, truncated, info = self._env.step(actions)
        if self._atari:
            raw_reward = info.get("raw_reward", np.zeros(self.num_envs)).astype(np.float32)
            game_over = info.get("game_over", np.zeros(self.num_envs, dtype=bool)).astype(bool)
        else:
            raw_reward = reward.astype(np.float32)
            game_over = terminated | truncated
        return StepResult(self._observation(obs, info), reward.astype(np.float32), terminated, truncated,
                          raw_reward, game_over)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> StepResult:
        return self.step(self._actions)

    def state(self) -> Snapshot:
        """Every env's state mid-episode (see rlcli.envs.snapshot); EnvStateUnreadable where an env holds
        state that is not data (the ALE's emulator)."""
        saved = capture(self._env)
        steps = None if self._flatten is None else self._flatten.steps  # only for the step its errors name
        return Snapshot({**saved.values, "flattened_steps": steps}, saved.tensors)

    def load_state(self, snapshot: Snapshot) -> None:
        restore(self._env, snapshot)
        if self._flatten is not None and snapshot.values.get("flattened_steps") is not None:
            self._flatten.steps = snapshot.values["flattened_steps"]

    def render(self) -> np.ndarray:
        """The first env's frame as the game shows it (RGB)."""
        return self._env.envs[0].render()

    @property
    def render_fps(self) -> int:
        """Frames per second of one agent step, for videos in real time."""
        if self._atari:
            return 60 // 4  # the console runs at 60 Hz and one agent step is 4 frames
        return int(self._env.envs[0].metadata.get("render_fps") or 30)

    def close(self) -> None:
        self._env.close()
