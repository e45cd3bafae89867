"""The one interface every environment backend presents to the training and evaluation loops.

Every backend auto-resets on the *next* step (envpool's behaviour, and gymnasium's ``NEXT_STEP`` mode):
the observation returned with ``terminated``/``truncated`` is the real final observation, and the
following step ignores its action and returns the first observation of a new episode with reward 0.
Loops mask that reset row out of learning, and bootstrap truncations from the value of the real final
observation, which is simply the next row's value estimate.
"""

from __future__ import annotations

import warnings
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

from rlcli.envs.layout import ObsLayout
from rlcli.envs.snapshot import Snapshot
from rlcli.errors import UsageError

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


class StepResult(NamedTuple, Generic[ArrayT]):
    """One vector step: numpy arrays, or tensors on the device of a ResidentEnv."""

    obs: ArrayT  # [n_envs, *obs_shape]
    reward: ArrayT  # [n_envs] float32, the reward to learn from (clipped on Atari)
    terminated: ArrayT  # [n_envs] bool, no bootstrap (a life lost counts on Atari)
    truncated: ArrayT  # [n_envs] bool, time limit: bootstrap from the final observation
    raw_reward: ArrayT  # [n_envs] float32, the game's own reward, for episode statistics
    game_over: ArrayT  # [n_envs] bool, the real end of an episode (all lives), for statistics


class VecEnv(Protocol):
    # read-only properties, which the loops only read: a backend may hold narrower types (a flat Box, a
    # game's layout that is never None) as plain attributes
    @property
    def num_envs(self) -> int: ...

    @property
    def single_observation_space(self) -> gym.Space: ...

    @property
    def single_action_space(self) -> gym.Space: ...

    @property
    def backend(self) -> str: ...

    @property
    def obs_layout(self) -> ObsLayout | None:
        """The columns of a Dict observation's keys and of an action mask in the flat observations the env
        returns (its single_observation_space is then that flat Box); None for a Box env without a mask."""
        ...

    def reset(self) -> np.ndarray:
        """First observations, [n_envs, *obs_shape]."""
        ...

    def step(self, actions: np.ndarray) -> StepResult: ...

    def step_async(self, actions: np.ndarray) -> None:
        """Starts a step whose result ``step_wait`` returns: envpool steps in its own threads meanwhile,
        so the caller can work beside it (gymnasium's vector env steps in ``step_wait``)."""
        ...

    def step_wait(self) -> StepResult: ...

    def close(self) -> None: ...


class SteppedOnWait:
    """``step_async`` and ``step_wait`` for a backend whose step runs in the caller's thread: the actions are
    kept, and stepped when the result is asked for."""

    _actions: Any = None

    def step(self, actions: Any) -> StepResult:
        raise NotImplementedError

    def step_async(self, actions: Any) -> None:
        self._actions = actions

    def step_wait(self) -> StepResult:
        assert self._actions is not None, "step_async comes first"
        actions, self._actions = self._actions, None
        return self.step(actions)


@runtime_checkable
class SavableEnv(Protocol):
    """An env whose state mid-episode a checkpoint can hold (gymnasium's and envpool's backends; not
    PettingZoo's), so that a resumed run continues exactly."""

    def state(self) -> Snapshot:
        """Every env's state mid-episode, between two steps, for a checkpoint that resumes exactly; raises
        EnvStateUnreadable, saying why, where it cannot be read (envpool's)."""
        ...

    def load_state(self, snapshot: Snapshot) -> None:
        """Sets the envs to a ``state()``; EnvStateUnreadable, before changing anything, where it does not fit."""
        ...


@runtime_checkable
class ResidentEnv(Protocol):
    """A vector env whose arrays live on a torch ``device`` (the torch backend's): a step takes the actions
    and returns every array of its StepResult as tensors there, so a rollout need not leave the device."""

    device: torch.device


@runtime_checkable
class RenderedEnv(Protocol):
    """An env made with a ``render_mode``: gymnasium's and PettingZoo's backends, and envpool's for the tasks
    only it has."""

    def render(self) -> np.ndarray:
        """The first env's frame (RGB)."""
        ...

    @property
    def render_fps(self) -> int:
        """Frames per second of one agent step, for videos in real time."""
        ...


@runtime_checkable
class ManyAgentEnv(Protocol):
    """A vector env whose rows are agents (PettingZoo's parallel worlds): ``agents_per_env`` consecutive rows
    are one env's agents, ``agents`` their names in row order."""

    agents_per_env: int
    agents: list[str]


@runtime_checkable
class TurnBasedEnv(Protocol):
    """A turn-based game (rlcli.envs.turns), one row a game: the learner plays from ``seat`` (None: the seat
    alternates game by game) against ``opponents``, an OpponentSource asked at the start of every game."""

    env_id: str
    game: Any  # the rules behind a scripted player (rlcli.envs.games), None where rlcli has none
    players: list[str]
    seat: int | None
    opponents: Any
    obs_layout: ObsLayout


class TurnBasedVecEnv(VecEnv, TurnBasedEnv, Protocol):
    """A vector env that is a turn-based game (``TurnVecEnv``): what code that both plays and seats a game takes."""

    obs_layout: ObsLayout


def agents_per_env(env: object) -> int:
    """Rows an env takes: its agents in a many-agent env, else 1."""
    return env.agents_per_env if isinstance(env, ManyAgentEnv) else 1


def float32_space(space: gym.Space) -> gym.Space:
    """A float64 Box as float32 (what the networks take); any other space unchanged."""
    if isinstance(space, gym.spaces.Box) and space.dtype == np.float64:
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    return space


def numbered_from_zero(space: gym.Space) -> tuple[gym.Space, int | np.ndarray | None]:
    """``space`` with its choices numbered from 0, as every algorithm here numbers them, and what the env's own
    numbering adds to an action (gymnasium's ``Discrete(n, start=s)``); None where it starts at 0."""
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        return gym.spaces.Discrete(int(space.n)), int(space.start)
    if isinstance(space, gym.spaces.MultiDiscrete) and np.any(space.start != 0):
        return gym.spaces.MultiDiscrete(space.nvec, dtype=space.dtype), space.start.copy()
    return space, None


def float32_obs(obs: np.ndarray) -> np.ndarray:
    return obs.astype(np.float32) if obs.dtype == np.float64 else obs


def make_gym_env(gym_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make(gym_id, **kwargs)``, where what the env's own code raises (its constructor, its entry
    point, the keywords it is given) is a UsageError naming the id: a custom env is the user's input. A
    missing simulator stays ``DependencyNotInstalled``, which the caller turns into the extra to install."""
    mujoco_warnings_to_python(gym_id)
    try:
        return gym.make(gym_id, **kwargs)
    except (gym.error.DependencyNotInstalled, UsageError):
        raise
    except Exception as e:
        raise creation_error(gym_id, e) from e


def mujoco_warnings_to_python(gym_id: str | None = None) -> None:
    """MuJoCo's warnings as Python warnings from here on (where ``gym_id`` is given: if it is one of
    gymnasium's MuJoCo envs): MuJoCo's own handler appends them to MUJOCO_LOG.TXT in the working directory, a
    file nobody asked for there (gymnasium's HalfCheetah-v5 warns as its model loads). A handler set by
    someone else is kept."""
    if gym_id is not None:
        try:
            if "mujoco" not in str(gym.spec(gym_id).entry_point):
                return
        except Exception:  # gym.make says what is wrong with the id
            return
    try:
        import mujoco
    except ImportError:  # gym.make names the extra to install
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(lambda text: warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=2))


def creation_error(env_id: str, error: Exception) -> UsageError:
    """``error``, raised while ``env_id`` was made, as one line; the traceback stays chained for --debug."""
    detail = " ".join(str(error).split()) or "no message"
    hint = ""
    if "unexpected keyword argument 'render_mode'" in detail:
        hint = "; gymnasium gives every env render_mode, so its constructor must take render_mode=None"
    return UsageError(f"environment '{env_id}' could not be made: {type(error).__name__}: {detail}{hint} "
                      "(rlcli --debug shows the traceback)")
