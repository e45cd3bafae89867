"""The front door: the env, agent and learner of a RunConfig, and an agent from a run directory."""

from __future__ import annotations

from pathlib import Path

import torch

from rlcli.algos import REGISTRY, spec_for
from rlcli.algos.base import Agent, Learner
from rlcli.algos.threads import ThreadPlan, Threads, available_cores
from rlcli.algos.world import SINGLE, World
from rlcli.config import RunConfig
from rlcli.envs import VecEnv, env_group, import_env_module, make_vec_env
from rlcli.errors import CheckpointError, UsageError
from rlcli.runs.rundir import RunDir

EVAL_ENVS = 8  # `rlcli eval` and publish: the setting every published evaluation of a run was made with


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
    return torch.device(name)


def thread_plan(cfg: RunConfig, sharing: int = 1) -> ThreadPlan:
    """Torch threads for acting and updating: ``torch_threads`` for both where set, else the algorithm's
    own plan over the cores this process may use (at most 16), shared evenly by ``sharing`` processes
    (a distributed run's on this machine), for the device ``auto`` resolves to."""
    if cfg.torch_threads is not None:
        return ThreadPlan(cfg.torch_threads, cfg.torch_threads)
    resolved = cfg.model_copy(update={"device": resolve_device(cfg.device).type})
    return spec_for(cfg.algo.algo).thread_plan(resolved, cores_each(sharing))


def cores_each(sharing: int = 1) -> int:
    """The cores (at most 16) each of ``sharing`` processes on this machine may use, at least one."""
    return max(min(available_cores(), 16) // sharing, 1)


def make_env(cfg: RunConfig, num_envs: int, seed: int, render_mode: str | None = None,
             threads: int | None = None, device: torch.device | None = None) -> VecEnv:
    """``num_envs`` envs of the run, env i seeded ``seed + i``; ``threads`` caps envpool's workers where the
    run's ``env_threads`` does not. ``device``: where a device-resident backend's envs live, taking and
    returning tensors there (the training envs, on the process's own device); None: numpy arrays for every
    backend."""
    import_env_module(cfg.env.env_module)
    return make_vec_env(cfg.env.id, num_envs, seed, cfg.env.backend, dict(cfg.env.kwargs),
                        render_mode=render_mode, threads=cfg.env_threads or threads, multiagent=cfg.env.multiagent,
                        device=device)


def check_env_fits(cfg: RunConfig) -> None:
    """Raises a UsageError when the algorithm cannot act in the environment (e.g. SAC on Discrete)."""
    env = make_env(cfg, 1, cfg.seed)
    try:
        check_spaces(cfg.algo.algo, env)
    finally:
        env.close()


def check_spaces(algo: str, env: VecEnv) -> None:
    """Raises a UsageError when ``algo`` cannot act in ``env``: its spaces, or a Dict observation or an
    action mask (the env's ``obs_layout``) that the algorithm does not read."""
    spec = spec_for(algo)
    layout = env.obs_layout
    if layout is not None and not spec.takes_layout:
        what = "an action mask" if layout.observed_keys == ("observation",) else "Dict observations"
        raise UsageError(f"{algo} does not take {what}; train this environment with ppo")
    spec.check_spaces(env.single_observation_space, env.single_action_space)


def build_agent(cfg: RunConfig, env: VecEnv, device: torch.device, world: World = SINGLE) -> Agent:
    """The configured agent for ``env``'s spaces, learning with ``world``'s processes; a UsageError where the
    algorithm cannot act in them."""
    spec = spec_for(cfg.algo.algo)
    check_spaces(cfg.algo.algo, env)
    layout = env.obs_layout
    extra: dict[str, object] = {} if layout is None else {"obs_layout": layout}  # a Box env's agent as it always was
    if world.size > 1:
        check_distributed(cfg)
        extra["world"] = world
    return spec.agent(cfg.algo, env.single_observation_space, env.single_action_space, env.num_envs, device,
                      **extra)


def check_distributed(cfg: RunConfig) -> None:
    """Raises a UsageError where the run cannot train across several processes."""
    if not spec_for(cfg.algo.algo).distributed:
        names = ", ".join(name for name, spec in REGISTRY.items() if spec.distributed)
        raise UsageError(f"{cfg.algo.algo} trains in one process; drop --nproc (several processes train {names})")
    if env_group(cfg.env.id) == "games":
        raise UsageError(f"{cfg.env.id} is a turn-based game, whose self-play opponents live in one process; "
                         "drop --nproc")


def build_learner(cfg: RunConfig, env: VecEnv, agent: Agent, plan: Threads) -> Learner:
    return spec_for(cfg.algo.algo).learner(env, agent, cfg.algo, plan)


def agent_from_run(run: RunDir, env: VecEnv, device: torch.device, best: bool = False) -> Agent:
    """An agent with a saved run's weights and normalisation statistics (``best``: the best evaluated)."""
    agent = build_agent(run.cfg, env, device)
    load_model(agent, run.model(best), run.path)
    return agent


def load_model(agent: Agent, model: dict[str, torch.Tensor], where: Path) -> None:
    """``model`` into ``agent``; a CheckpointError naming ``where`` when the weights do not fit its network."""
    try:
        agent.load_state_dict(model)
    except RuntimeError as e:
        raise CheckpointError(f"{where}: weights do not fit the configured network ({str(e).splitlines()[0]})"
                              ) from None
