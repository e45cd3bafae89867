"""Typed run configuration and the hyperparameter files it is loaded from.

Every setting is a field of a frozen pydantic model (``extra="forbid"``), so a typo is an error with a
name, never a silently ignored key. Hyperparameter YAML files are keyed by env id, with group fallbacks
(``atari``, ``mujoco``, ``classic``) and a ``default``; the merge order is

    default <- group <- env entry <- --config file <- -p overrides
"""

from __future__ import annotations

import difflib
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlcli.errors import UsageError


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Arithmetic of the training passes (the update, and PPO's rollout acting). "bf16": matrix products and
# convolutions of the hidden layers run in bfloat16 under autocast, about twice the throughput on CPUs
# with bf16 instructions (AVX512-BF16, AMX) and on recent GPUs; output layers, losses, weights and
# optimiser state stay float32. Evaluation, play and export always run float32.
Precision = Literal["fp32", "bf16"]


class Schedule(str, Enum):
    constant = "constant"
    linear = "linear"
    adaptive_kl = "adaptive_kl"  # rl_games: lr /= 1.5 when KL > 2*target, *= 1.5 when KL < target/2


class NetworkConfig(Frozen):
    """Actor-critic network shape."""

    trunk: Literal["mlp", "cnn"] = "mlp"
    hidden: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    shared: bool = False  # one trunk for actor and critic (Atari) or two (MuJoCo)
    log_std_init: float = 0.0
    ortho_init: bool = True


class PPOConfig(Frozen):
    """PPO hyperparameters; one rollout is ``n_envs * n_steps`` env steps."""

    algo: Literal["ppo"] = "ppo"
    steps: Annotated[int, Field(gt=0)] = 1_000_000
    n_envs: Annotated[int, Field(gt=0)] = 8
    n_steps: Annotated[int, Field(gt=0)] = 128
    minibatch_size: Annotated[int, Field(gt=0)] = 256
    n_epochs: Annotated[int, Field(gt=0)] = 10
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    gae_lambda: Annotated[float, Field(ge=0, le=1)] = 0.95
    learning_rate: Annotated[float, Field(gt=0)] = 3e-4
    lr_schedule: Schedule = Schedule.linear
    kl_target: Annotated[float, Field(gt=0)] = 0.008  # used by the adaptive_kl schedule
    clip_range: Annotated[float, Field(gt=0)] = 0.2
    clip_range_schedule: Literal["constant", "linear"] = "constant"
    clip_value: Annotated[float, Field(gt=0)] | None = None  # value-loss clipping range; None disables
    ent_coef: Annotated[float, Field(ge=0)] = 0.0
    vf_coef: Annotated[float, Field(ge=0)] = 0.5
    max_grad_norm: Annotated[float, Field(gt=0)] = 0.5
    adam_eps: Annotated[float, Field(gt=0)] = 1e-5
    normalize_advantage: bool = True
    normalize_obs: bool = False
    normalize_reward: bool = False
    clip_obs: Annotated[float, Field(gt=0)] = 10.0
    network: NetworkConfig = NetworkConfig()
    precision: Precision = "fp32"
    env_kwargs: dict[str, bool | int | float | str] = {}

    @property
    def batch_size(self) -> int:
        """Env steps per rollout (and samples per update epoch)."""
        return self.n_envs * self.n_steps

    @model_validator(mode="after")
    def _cnn_takes_raw_pixels(self) -> PPOConfig:
        if self.network.trunk == "cnn" and self.normalize_obs:
            raise ValueError("normalize_obs must be false with the cnn trunk, which scales pixels by 1/255")
        return self

    @model_validator(mode="after")
    def _minibatch_fits(self) -> PPOConfig:
        if self.minibatch_size > self.batch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} exceeds the rollout size "
                f"n_envs*n_steps={self.batch_size}"
            )
        return self


class SACConfig(Frozen):
    """Soft Actor-Critic hyperparameters (Haarnoja et al. 2018, with automatic entropy tuning)."""

    algo: Literal["sac"] = "sac"
    steps: Annotated[int, Field(gt=0)] = 1_000_000
    n_envs: Annotated[int, Field(gt=0)] = 1
    buffer_size: Annotated[int, Field(gt=0)] = 1_000_000
    learning_starts: Annotated[int, Field(ge=0)] = 5_000  # env steps of uniform random actions first
    batch_size: Annotated[int, Field(gt=0)] = 256
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    target_update_rate: Annotated[float, Field(gt=0, le=1)] = 0.005  # Polyak factor ("tau") of target critics
    actor_lr: Annotated[float, Field(gt=0)] = 3e-4
    critic_lr: Annotated[float, Field(gt=0)] = 3e-4
    alpha_lr: Annotated[float, Field(gt=0)] = 3e-4
    alpha: Annotated[float, Field(gt=0)] = 0.2  # initial (autotune) or fixed entropy temperature
    autotune_alpha: bool = True
    target_entropy: float | None = None  # None: -dim(A)
    utd_ratio: Annotated[float, Field(gt=0)] = 1.0  # gradient steps per env step collected
    policy_delay: Annotated[int, Field(gt=0)] = 1  # critic updates per actor (and alpha) update
    target_update_every: Annotated[int, Field(gt=0)] = 1  # critic updates per Polyak update
    log_every: Annotated[int, Field(gt=0)] = 1_000  # env steps per training iteration (metrics row)
    normalize_obs: bool = False
    clip_obs: Annotated[float, Field(gt=0)] = 10.0
    actor_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    compile: bool = False  # torch.compile the update step
    precision: Precision = "fp32"
    env_kwargs: dict[str, bool | int | float | str] = {}


AlgoConfig = PPOConfig | SACConfig
ALGOS: dict[str, type[Frozen]] = {"ppo": PPOConfig, "sac": SACConfig}


class EnvConfig(Frozen):
    id: str
    backend: Literal["auto", "envpool", "gymnasium"] = "auto"
    env_module: str | None = None  # imported first; registers custom gymnasium ids


class EvalConfig(Frozen):
    every: Annotated[int, Field(ge=0)] = 0  # env steps between evaluations; 0 = only at the end
    episodes: Annotated[int, Field(gt=0)] = 10
    deterministic: bool = True


class RunConfig(Frozen):
    """Everything that defines a training run; saved fully resolved as ``config.yaml``."""

    env: EnvConfig
    algo: Annotated[PPOConfig | SACConfig, Field(discriminator="algo")]
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # torch intra-op threads; None chooses per algorithm (rlcli.train.choose_threads)
    torch_threads: Annotated[int, Field(gt=0)] | None = None
    env_threads: Annotated[int, Field(gt=0)] | None = None  # envpool worker threads; None: envpool's default
    eval: EvalConfig = EvalConfig()
    stop_at: float | None = None  # stop once an evaluation reaches this mean return
    # "module:function" called with the TrainState after each iteration; returns True to stop
    stop_when: str | None = None


# ---------------------------------------------------------------------------------------------------
# Loading hyperparameter files


def hyperparams_dir() -> Path:
    """The directory of shipped hyperparameter YAML (works from a checkout and from a wheel)."""
    packaged = resources.files("rlcli") / "hyperparams"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "hyperparams"


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path} as a YAML text file ({type(e).__name__})") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data


def hyperparams_for(algo: str, env_id: str, group: str | None) -> dict[str, Any]:
    """The merged default <- group <- env entry of ``hyperparams/{algo}.yml``."""
    if algo not in ALGOS:
        raise UsageError(f"unknown algorithm '{algo}'; choose one of: {', '.join(ALGOS)}")
    table = load_yaml(hyperparams_dir() / f"{algo}.yml")
    merged: dict[str, Any] = {}
    for key in ("default", group, env_id):
        if key and key in table:
            merged = deep_merge(merged, table[key] or {})
    return merged


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["network.hidden=[256,256]", "gamma=0.98"]`` -> nested dict, values parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"override '{pair}' must look like key=value, e.g. -p learning_rate=3e-4")
        value = _parse_scalar(raw)
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise UsageError(f"override '{pair}' nests under '{p}', which another -p set to a value")
        node[leaf] = value
    return out


def _parse_scalar(raw: str) -> Any:
    """YAML semantics, except that ``3e-4`` is a float (YAML 1.1 would keep it as a string)."""
    try:
        return float(raw) if "e" in raw.lower() and not raw.lower().startswith(("n", "i")) else yaml.safe_load(raw)
    except (ValueError, yaml.YAMLError):
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError:
            return raw


def build_algo_config(algo: str, values: dict[str, Any]) -> AlgoConfig:
    """Validate merged hyperparameters into the algorithm's frozen config, with one-line errors."""
    model = ALGOS.get(algo)
    if model is None:
        raise UsageError(f"unknown algorithm '{algo}'; choose one of: {', '.join(ALGOS)}")
    try:
        return model.model_validate({**values, "algo": algo})  # type: ignore[return-value]
    except ValidationError as e:
        raise UsageError(describe_validation_error(e, model)) from None


def describe_validation_error(err: ValidationError, model: type[BaseModel]) -> str:
    """One line: the first bad key and what would be right (close matches for unknown keys)."""
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    key = ".".join(loc) or "config"
    if first["type"] == "extra_forbidden":
        valid = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(loc[-1], valid, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"valid keys: {', '.join(valid)}"
        return f"unknown hyperparameter '{key}'; {hint}"
    return f"invalid value for '{key}': {first['msg']} (got {first.get('input')!r})"


def _fields_at(model: type[BaseModel], path: list[str]) -> list[str]:
    for part in path:
        field = model.model_fields.get(part)
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        model = ann
    return sorted(model.model_fields)


def dump_config(cfg: BaseModel) -> str:
    """YAML text of a config, enums and tuples as plain values."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def load_run_config(algo: str, env: EnvConfig, group: str, *, config_file: Path | None = None,
                    overrides: dict[str, Any] | None = None, **run: Any) -> RunConfig:
    """Hyperparameters for ``env`` (default <- group <- env entry <- config file <- overrides), and the
    run-level settings in ``run`` (seed, device, eval, ...), validated into one RunConfig."""
    values = hyperparams_for(algo, env.id, group)
    if config_file is not None:
        values = deep_merge(values, load_yaml(config_file))
    values = deep_merge(values, overrides or {})
    algo_cfg = build_algo_config(algo, values)
    try:
        return RunConfig(env=env, algo=algo_cfg, **run)
    except ValidationError as e:
        raise UsageError(describe_validation_error(e, RunConfig)) from None
