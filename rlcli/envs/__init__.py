"""Vectorised environments behind one interface: ``make_vec_env`` over envpool and gymnasium."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rlcli.envs.base import (
    ManyAgentEnv,
    RenderedEnv,
    ResidentEnv,
    SavableEnv,
    StepResult,
    TurnBasedEnv,
    TurnBasedVecEnv,
    VecEnv,
    agents_per_env,
)
from rlcli.envs.registry import (
    env_group,
    envpool_name,
    gymnasium_name,
    import_env_module,
    missing_extra_message,
    resolve_backend,
    unknown_env_message,
)
from rlcli.errors import UsageError

if TYPE_CHECKING:
    import torch

    from rlcli.config import MultiAgentConfig

__all__ = ["ManyAgentEnv", "RenderedEnv", "ResidentEnv", "SavableEnv", "StepResult", "TurnBasedEnv", "TurnBasedVecEnv",
           "VecEnv", "agents_per_env", "env_group", "import_env_module", "make_vec_env"]


def make_vec_env(env_id: str, num_envs: int, seed: int, backend: str = "auto",
                 kwargs: dict[str, Any] | None = None, render_mode: str | None = None,
                 threads: int | None = None, multiagent: MultiAgentConfig | None = None,
                 device: torch.device | str | None = None) -> VecEnv:
    """``num_envs`` copies of ``env_id`` on the chosen backend (``auto``: envpool where it has the
    task), with standard Atari preprocessing for Atari games; env i is seeded with ``seed + i``.
    ``threads`` caps envpool's worker threads (None: its default, one per env up to the cores).
    A PettingZoo environment's rows are its agents (``multiagent`` says how they are presented).
    An env whose own code raises while it is made is a UsageError naming the id and the error.
    The device-resident backends' envs (torch, playground, mjlab) live on ``device`` and take and return tensors there
    where one is given (a loop that keeps its rollout on the device); without one, they run on the CPU behind
    numpy arrays."""
    chosen = resolve_backend(env_id, backend)
    if chosen == "pettingzoo":
        from rlcli.envs.pettingzoo_backend import make_pettingzoo_env

        return make_pettingzoo_env(env_id, num_envs, seed, kwargs or {}, multiagent, render_mode)
    if render_mode and chosen == "playground":
        raise UsageError(f"rlcli does not render MuJoCo Playground's tasks ({env_id}); eval measures the agent")
    if render_mode and chosen == "mjlab":
        raise UsageError(f"rlcli does not render MJLab's tasks ({env_id}); eval measures the agent")
    if render_mode and gymnasium_name(env_id) is None and envpool_name(env_id) is not None:
        if render_mode != "rgb_array":
            raise UsageError(f"{env_id} (envpool's alone) renders off-screen only: record it with --video FILE")
        chosen = "envpool"  # its MuJoCo tasks render frames (DM Control, Playground's robots)
    elif render_mode:
        chosen = "gymnasium"  # the torch backend's tasks are gymnasium's, which render
    if chosen in ("torch", "playground", "mjlab"):
        return _resident(chosen, env_id, num_envs, seed, kwargs, device)
    atari = env_group(env_id) == "atari"
    if chosen == "envpool":
        from rlcli.envs.envpool_backend import EnvpoolVecEnv

        name = envpool_name(env_id)
        assert name is not None  # resolve_backend chose envpool for having the task
        # envpool takes int32 seeds, which a seed, its steps and the evaluation's offset may pass
        return EnvpoolVecEnv(name, num_envs, seed % 2**31, atari, kwargs, num_threads=threads or 0,
                             render_mode=render_mode)
    import gymnasium as gym

    from rlcli.envs.gymnasium_backend import GymnasiumVecEnv

    gym_id = gymnasium_name(env_id)
    if gym_id is None:  # an id envpool alone has, made for rendering
        raise UsageError(unknown_env_message(env_id))
    try:
        return GymnasiumVecEnv(gym_id, num_envs, seed, atari, kwargs, render_mode)
    except gym.error.DependencyNotInstalled as e:
        group = env_group(env_id)
        if group in ("mujoco", "atari"):
            raise UsageError(missing_extra_message(env_id, group)) from None
        raise UsageError(f"{env_id} needs a package that is not installed: {e}") from None


def _resident(backend: str, env_id: str, num_envs: int, seed: int, kwargs: dict[str, Any] | None,
              device: torch.device | str | None) -> VecEnv:
    """A device-resident backend's envs: on ``device``, taking and returning tensors there, where one is given;
    else on the CPU behind numpy arrays."""
    from rlcli.envs.host import HostArrays

    resident: Any
    if backend == "torch":
        from rlcli.envs.torch_backend import TorchVecEnv

        resident = TorchVecEnv(env_id, num_envs, seed, device or "cpu", kwargs)
    elif backend == "playground":
        from rlcli.envs.playground_backend import PlaygroundVecEnv

        resident = PlaygroundVecEnv(env_id, num_envs, seed, device or "cpu", kwargs)
    else:
        from rlcli.envs.mjlab_backend import MjlabVecEnv

        resident = MjlabVecEnv(env_id, num_envs, seed, device or "cpu", kwargs)
    # a resident env presents VecEnv's interface over tensors; the loops that take it check ResidentEnv
    return cast(VecEnv, resident) if device is not None else HostArrays(resident)
