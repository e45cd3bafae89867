"""Non-finite values an environment returned, found in what a learner stored (once an iteration, not once a
step) and named by the step and the observation's column or key, so that an env's fault is not taken for
training's."""

from __future__ import annotations

import torch

from rlcli.envs.layout import ObsLayout


class NonFiniteEnvOutput(Exception):
    """An observation or reward the env returned was NaN or infinite. ``what`` names it ("reward",
    "observation column 2 (key 'pos')"); ``step`` is the run's env step at which the env returned it."""

    def __init__(self, what: str, step: int) -> None:
        super().__init__(f"a non-finite {what} at step {step:,}")
        self.what, self.step = what, step


def first_non_finite(values: torch.Tensor) -> tuple[int, ...] | None:
    """The index of the first NaN or infinity of ``values`` in row-major order (over a rollout's [T, N, ...]
    storage: the earliest step's); None when every value is finite or the dtype is an integer one."""
    if not values.is_floating_point():
        return None
    bad = ~torch.isfinite(values)
    if not bool(bad.any()):
        return None
    flat = int(bad.flatten().nonzero()[0])
    index = []
    for size in reversed(values.shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def observation_part(layout: ObsLayout | None, position: tuple[int, ...]) -> str:
    """'observation column C' for a flat observation, with its Dict key where a layout names one;
    'observation element (i, j, ...)' for one of several dimensions; 'observation' for a scalar one."""
    if not position:
        return "observation"
    if len(position) > 1:
        return f"observation element {position}"
    column = position[0]
    if layout is not None:
        start = 0
        for key, width in layout.fields:
            if start <= column < start + width:
                return f"observation column {column} (key '{key}', its column {column - start})"
            start += width
    return f"observation column {column}"


def rollout_fault(obs: torch.Tensor, rewards: torch.Tensor, layout: ObsLayout | None, step: int,
                  steps_per_row: int) -> NonFiniteEnvOutput | None:
    """The first non-finite value of a rollout's [T, N, ...] observations and [T, N] rewards, or None.
    ``step``: the run's step before the rollout; each of its T rows took ``steps_per_row`` env steps.
    Row t's observation was returned by the step before row t, its reward by row t's own."""
    found = []
    at = first_non_finite(obs)
    if at is not None:
        found.append((step + at[0] * steps_per_row, observation_part(layout, at[2:])))
    at = first_non_finite(rewards)
    if at is not None:
        found.append((step + (at[0] + 1) * steps_per_row, "reward"))
    if not found:
        return None
    when, what = min(found)
    return NonFiniteEnvOutput(what, when)


def transitions_fault(obs: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor, layout: ObsLayout | None,
                      steps: torch.Tensor) -> NonFiniteEnvOutput | None:
    """The first non-finite value of [K, ...] stored transitions, or None; ``steps`` [K] is the run's step
    at which each transition's env step ended (a first observation is named with the transition it
    starts)."""
    found = []
    for values, name in ((obs, None), (next_obs, None), (rewards, "reward")):
        at = first_non_finite(values)
        if at is not None:
            found.append((int(steps[at[0]]), name or observation_part(layout, at[1:])))
    if not found:
        return None
    when, what = min(found)
    return NonFiniteEnvOutput(what, when)
