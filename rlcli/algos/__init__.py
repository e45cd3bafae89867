"""The registry of algorithms, the one place that names each, and ``resolve``: a run's configuration,
assembled the one way every caller uses. Adding an algorithm is a module (its config model, agent, search
space and thread policy), one ``register`` line here and a ``hyperparams/NAME.yml``.

The package also holds what algorithms are built from: the learners (``learners``, the only code that steps
envs while training), rollout and replay storage (``buffers``), Adam (``optim``), the compile switch and CUDA
graphs (``compiling``), thread plans (``threads``) and a run's processes (``world``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from rlcli import config
from rlcli.algos import dqn, ppo, pqn, sac, td3
from rlcli.algos.base import AlgoSpec
from rlcli.algos.learners import OffPolicyLearner, OnPolicyLearner
from rlcli.config import (
    AlgoConfig,
    EnvConfig,
    EvalConfig,
    RunConfig,
    config_source,
    deep_merge,
    describe_validation_error,
    field_description,
    flatten,
    load_yaml,
    split_env_sections,
)
from rlcli.envs import env_group, import_env_module
from rlcli.envs.registry import entry_id, resolve_backend, resolve_env_id
from rlcli.errors import UsageError

REGISTRY: dict[str, AlgoSpec] = {}
DEFAULT = "ppo"  # what a command trains when no --algo is given


def register(spec: AlgoSpec) -> None:
    """Makes ``spec.name`` an algorithm every command accepts."""
    REGISTRY[spec.name] = spec


def spec_for(name: str) -> AlgoSpec:
    """The registered algorithm ``name``; a UsageError naming the registered ones otherwise."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise UsageError(f"unknown algorithm '{name}'; choose one of: {', '.join(REGISTRY)}")
    return spec


def hyperparams_file(algo: str) -> Path:
    """The tuned entries of ``algo``: its spec's own file, else ``hyperparams/ALGO.yml``."""
    return spec_for(algo).hyperparams or config.hyperparams_dir() / f"{algo}.yml"


def hyperparams_layers(algo: str, env_id: str, group: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The parts of ``algo``'s hyperparameter file that apply to ``env_id``, named, in merge order."""
    return config.hyperparams_layers(hyperparams_file(algo), entry_id(env_id), group)


def hyperparams_for(algo: str, env_id: str, group: str | None) -> dict[str, Any]:
    """The merged default <- group <- env entry of ``algo``'s hyperparameter file."""
    merged: dict[str, Any] = {}
    for _, values in hyperparams_layers(algo, env_id, group):
        merged = deep_merge(merged, values)
    return merged


def build_algo_config(algo: str, values: dict[str, Any]) -> AlgoConfig:
    """Merged hyperparameters validated into the algorithm's frozen config, with one-line errors (the env's
    keywords, which the files give beside them, are checked and left to the env's config)."""
    model = spec_for(algo).config
    values, _ = split_env_sections(values)
    try:
        return model.model_validate({**values, "algo": algo})
    except ValidationError as e:
        raise UsageError(describe_validation_error(e, model)) from None


def run_config(data: dict[str, Any]) -> RunConfig:
    """A saved run's config (``config.yaml`` read as a mapping), its ``algo`` validated by that algorithm's
    model; runs saved before the env's keywords moved out of the algorithm's section still load. A
    ValidationError where a value is wrong, a UsageError where the algorithm is unknown."""
    algo = data.get("algo")
    if not isinstance(algo, dict) or "algo" not in algo:  # the shared fields' own errors name what is wrong
        return RunConfig.model_validate(data)
    algo, env = dict(algo), data.get("env")
    # runs saved before the setting kept subnormal floats: resumed, they keep them and stay exact
    algo.setdefault("flush_denormal", False)
    if "env_kwargs" in algo and isinstance(env, dict):
        env = {**env, "kwargs": algo.pop("env_kwargs")}
    model = spec_for(str(algo.get("algo"))).config
    return RunConfig.model_validate({**data, "env": env, "algo": model.model_validate(algo)})


def resolve(algo: str, env_id: str, *, backend: str = "auto", env_module: str | None = None,
            config_file: Path | None = None, overrides: dict[str, Any] | None = None,
            eval_every: int | None = None, eval_episodes: int = 10, **run: Any) -> RunConfig:
    """The configuration of a run, assembled the one way every caller uses: hyperparameters for
    ``env_id`` (default <- its group <- its entry <- ``config_file`` <- ``overrides``), the env's
    keywords, and the run-level settings in ``run`` (seed, device, threads, ...), validated into one
    RunConfig. ``eval_every`` None evaluates (and checkpoints) about 20 times over the run."""
    import_env_module(env_module)
    env_id = resolve_env_id(env_id)[0]
    resolve_backend(env_id, backend)  # an unknown id fails here, with close matches
    entry = hyperparams_for(algo, env_id, env_group(env_id))
    chosen = load_yaml(config_source(Path(config_file))) if config_file is not None else {}
    chosen = deep_merge(chosen, overrides or {})
    values = deep_merge(entry, chosen)
    fit = spec_for(algo).fit
    if fit is not None:
        values = fit(entry, chosen, values)
    values, sections = split_env_sections(values)
    algo_cfg = build_algo_config(algo, values)
    every = eval_every if eval_every is not None else max(algo_cfg.steps // 20, 1)
    try:
        env = EnvConfig(id=env_id, backend=backend, env_module=env_module, kwargs=sections.kwargs,
                        multiagent=sections.multiagent)
        return RunConfig(env=env, algo=algo_cfg, eval=EvalConfig(every=every, episodes=eval_episodes), **run)
    except ValidationError as e:
        raise UsageError(describe_validation_error(e, RunConfig)) from None


class Setting(NamedTuple):
    """One hyperparameter of a resolved run: its dotted key, value, where it came from, and what it is."""

    key: str
    value: Any
    source: str  # "default", "group NAME", "entry ENV", "--config FILE", "-p", "fitted", "built-in"
    description: str


def explain(algo: str, env_id: str, *, env_module: str | None = None, config_file: Path | None = None,
            overrides: dict[str, Any] | None = None) -> tuple[RunConfig, list[Setting]]:
    """The run ``resolve`` makes of these, and each of its hyperparameters (and env keywords) with the last
    layer that set it: a part of hyperparams/ALGO.yml, the ``--config`` file, ``-p`` (and the command's
    options), "fitted" where it follows another setting (``AlgoSpec.fit``), "built-in" for the model's
    own default."""
    cfg = resolve(algo, env_id, env_module=env_module, config_file=config_file, overrides=overrides)
    layers = hyperparams_layers(algo, cfg.env.id, env_group(cfg.env.id))
    if config_file is not None:
        layers.append((f"--config {config_file}", load_yaml(config_source(Path(config_file)))))
    if overrides:
        layers.append(("-p", overrides))
    merged: dict[str, Any] = {}
    for _, values in layers:
        merged = deep_merge(merged, values)
    unfitted = flatten(merged)
    flat_layers = [(name, flatten(values)) for name, values in reversed(layers)]

    def source(key: str, value: Any) -> str:
        name = next((name for name, flat in flat_layers if key in flat), "built-in")
        return "fitted" if name != "built-in" and unfitted[key] != value else name

    algo_values = flatten(cfg.algo.model_dump(mode="json"))
    settings = [Setting(key, value, source(key, value), field_description(type(cfg.algo), key))
                for key, value in algo_values.items()]
    settings += [Setting(f"env_kwargs.{key}", value, source(f"env_kwargs.{key}", value), "A keyword of the env")
                 for key, value in cfg.env.kwargs.items()]
    return cfg, settings


register(AlgoSpec("ppo", ppo.PPOConfig, ppo.PPO, OnPolicyLearner, ppo.check_spaces, ppo.thread_plan,
                  ppo.SEARCH_SPACE, ppo.COUPLED, takes_layout=True, distributed=True, fit=ppo.fit_minibatches))
register(AlgoSpec("sac", sac.SACConfig, sac.SAC, OffPolicyLearner, sac.SAC.check_spaces, sac.thread_plan,
                  sac.SEARCH_SPACE, optional_metrics=sac.ACTOR_METRICS))
register(AlgoSpec("dqn", dqn.DQNConfig, dqn.DQN, OffPolicyLearner, dqn.DQN.check_spaces, dqn.thread_plan,
                  dqn.SEARCH_SPACE, takes_layout=True))
register(AlgoSpec("pqn", pqn.PQNConfig, pqn.PQN, OnPolicyLearner, pqn.PQN.check_spaces, pqn.thread_plan,
                  pqn.SEARCH_SPACE))
register(AlgoSpec("td3", td3.TD3Config, td3.TD3, OffPolicyLearner, td3.TD3.check_spaces, td3.thread_plan,
                  td3.SEARCH_SPACE, optional_metrics=td3.ACTOR_METRICS))
