"""Dict observations and action masks as one flat float32 vector per env, and where each part lies in it.

The engine passes observations as one flat tensor everywhere (rollout, normaliser, evaluation, export's
samples), so Dict observations and masks need no change there: the env backends flatten each Dict
observation into the columns an ``ObsLayout`` names, and write an action mask published in ``info``
(gymnasium's and envpool's convention) into the columns of an ``action_mask`` key, as PettingZoo's Dict
convention has it, so both conventions become one. The network reads the columns of the keys it is
configured to read (``network.actor_keys``, ``network.critic_keys``) and masks its logits with the mask's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from rlcli.errors import UsageError

MASK_KEY = "action_mask"  # PettingZoo's key, and the one an info mask is written under
PRIVILEGED_KEY = "state"  # read by the critic alone unless network.actor_keys names it


GROUP_KEY = "group"  # a one-hot of the agent's group, where agents of different spaces share one env


@dataclass(frozen=True)
class AgentGroup:
    """Agents of one environment that observe and act alike, and get a policy of their own: the key of
    their observation, of their action mask (padding a shared Discrete space to their own actions) and
    their number of actions."""

    name: str
    obs_key: str
    mask_key: str
    actions: int


@dataclass(frozen=True)
class ObsLayout:
    """Each key's columns of the flat observation, in order, and which key (if any) is the action mask.
    With ``groups``, rows of different agent groups share the layout, each filling its group's keys."""

    fields: tuple[tuple[str, int], ...]  # (key, width), in the flat vector's order
    mask_key: str | None = None
    groups: tuple[AgentGroup, ...] = ()

    @property
    def size(self) -> int:
        """Columns of the flat observation."""
        return sum(width for _, width in self.fields)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.fields)

    @property
    def observed_keys(self) -> tuple[str, ...]:
        """Every key but the mask: what a network may read."""
        return tuple(key for key in self.keys if key != self.mask_key)

    def span(self, key: str) -> slice:
        """The columns of ``key``."""
        start = 0
        for name, width in self.fields:
            if name == key:
                return slice(start, start + width)
            start += width
        raise KeyError(key)

    def columns(self, keys: Sequence[str]) -> list[int]:
        """Column indices of ``keys``, in the layout's order (not the order ``keys`` are given in)."""
        return [i for key in self.keys if key in keys for i in range(self.size)[self.span(key)]]

    def mask_columns(self) -> list[int]:
        """The action masks' columns (every group's); empty without a mask."""
        return self.columns([self.mask_key, *(g.mask_key for g in self.groups)] if self.mask_key else
                            [g.mask_key for g in self.groups])

    def group_view(self, group: AgentGroup) -> ObsLayout:
        """The layout as one group's network reads it: the same columns, its own mask."""
        return ObsLayout(self.fields, group.mask_key)


def network_keys(layout: ObsLayout, actor_keys: Sequence[str] | None, critic_keys: Sequence[str] | None
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(actor's keys, critic's keys), in the layout's order. None chooses: the actor every key but the mask
    and ``state``, the critic every key but the mask. A UsageError names a key the layout lacks."""
    observed = layout.observed_keys
    chosen = []
    for name, keys, default in (("actor_keys", actor_keys, [k for k in observed if k != PRIVILEGED_KEY]),
                                ("critic_keys", critic_keys, list(observed))):
        keys = list(default if keys is None else keys)
        unknown = [k for k in keys if k not in observed]
        if unknown or not keys:
            what = f"has no key {', '.join(map(repr, unknown))}" if unknown else "reads no key"
            raise UsageError(f"network.{name} {what}; this environment's observation keys are "
                             f"{', '.join(observed)}")
        chosen.append(tuple(k for k in observed if k in keys))
    return chosen[0], chosen[1]


def _key_width(key: str, space: gym.Space) -> int:
    """Columns one Dict entry takes; a UsageError for entries that are not flat vectors."""
    if isinstance(space, gym.spaces.MultiBinary | gym.spaces.Box) and len(space.shape) <= 1:
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Box) and len(space.shape) >= 2:
        raise UsageError(f"observation key '{key}' is an image or a matrix {tuple(space.shape)}; Dict "
                         "observations take flat vectors only for now (flatten it in a wrapper)")
    raise UsageError(f"observation key '{key}' is {space}; Dict observations take Box and MultiBinary vectors")


def layout_of(space: gym.Space, info_mask_width: int | None, action_space: gym.Space) -> ObsLayout | None:
    """The layout of ``space`` with an info mask of ``info_mask_width`` entries (None: the env publishes
    none); None for a Box with no mask, which the engine takes as it is. A Dict's ``action_mask`` key wins
    over an info mask. A UsageError for a mask the action space cannot take."""
    if isinstance(space, gym.spaces.Dict):
        fields = [(key, _key_width(key, sub)) for key, sub in space.spaces.items()]
    elif info_mask_width is None:
        return None
    else:
        fields = [("observation", int(np.prod(space.shape)))]
    if MASK_KEY not in dict(fields) and info_mask_width is not None:
        fields.append((MASK_KEY, info_mask_width))
    mask = MASK_KEY if MASK_KEY in dict(fields) else None
    if mask is not None:
        if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            raise UsageError(f"an action mask needs Discrete or MultiDiscrete actions; this environment's are "
                             f"{action_space}")
        expected = sum(action_nvec(action_space))
        if dict(fields)[MASK_KEY] != expected:
            raise UsageError(f"the action mask has {dict(fields)[MASK_KEY]} entries; {action_space} takes "
                             f"{expected} (one per action of each dimension, flat)")
    return ObsLayout(tuple(fields), mask)


def action_nvec(action_space: gym.Space) -> list[int]:
    """Actions per dimension of a Discrete or MultiDiscrete space."""
    if isinstance(action_space, gym.spaces.Discrete):
        return [int(action_space.n)]
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return [int(n) for n in action_space.nvec]
    raise TypeError(f"{action_space} has no discrete actions")


def n_actions(action_space: gym.Space) -> int:
    """Actions of a Discrete space (what Q networks and shared multi-agent spaces act in)."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(f"{action_space} is not a Discrete space")
    return int(action_space.n)


def flat_space(layout: ObsLayout) -> gym.spaces.Box:
    """The flat observation's space: unbounded float32 (mask columns hold 0 or 1)."""
    return gym.spaces.Box(-np.inf, np.inf, (layout.size,), np.float32)


def check_masks(masks: np.ndarray, nvec: Sequence[int], step: int) -> None:
    """Raises a UsageError naming the env and ``step`` where a mask allows no action in some dimension."""
    if len(nvec) == 1 and masks.any(axis=1).all():  # the usual case, in two array ops
        return
    start = 0
    for dim, n in enumerate(nvec):
        empty = ~masks[:, start:start + n].any(axis=1)
        if empty.any():
            where = f" in action dimension {dim}" if len(nvec) > 1 else ""
            raise UsageError(f"the action mask of env {int(np.flatnonzero(empty)[0])} allows no action{where} "
                             f"at step {step} (counted from the first reset)")
        start += n


class ObsFlattener:
    """Dict observations (and info masks) -> rows of the flat observation, checking every mask."""

    def __init__(self, layout: ObsLayout, action_space: gym.Space) -> None:
        self.layout = layout
        self.nvec = action_nvec(action_space) if layout.mask_key else []
        self.mask_columns = layout.span(layout.mask_key) if layout.mask_key else None
        self.steps = 0

    def __call__(self, obs: np.ndarray | Mapping[str, np.ndarray], info: Mapping[str, np.ndarray]) -> np.ndarray:
        """[n_envs, layout.size] float32. Env rows whose info lacks the mask (gymnasium's ``_action_mask``
        False) allow every action."""
        parts = obs if isinstance(obs, Mapping) else {"observation": obs}
        n = len(next(iter(parts.values())))
        # each part written into its columns of one new array (a fresh one each step: the rollout keeps it)
        flat = np.empty((n, self.layout.size), dtype=np.float32)
        start = 0
        for key, width in self.layout.fields:
            columns = flat[:, start:start + width]
            start += width
            if key in parts:
                columns[:] = np.asarray(parts[key]).reshape(n, width)
                continue
            published = info.get(f"_{key}")  # the info mask: rows that lack it allow every action
            if MASK_KEY not in info:
                columns[:] = 1.0
            elif published is None or published.all():
                columns[:] = np.asarray(info[MASK_KEY]).reshape(n, width)
            else:
                columns[:] = 1.0
                columns[published] = np.asarray(info[MASK_KEY]).reshape(n, width)[published]
        if self.mask_columns is not None:
            check_masks(flat[:, self.mask_columns] > 0.5, self.nvec, self.steps)
        self.steps += 1
        return flat
