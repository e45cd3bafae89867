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
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, model_validator

from rlcli.errors import UsageError


class Frozen(BaseModel):
    """A config model: immutable, unknown keys refused; the docstring under a field is its description
    (``rlcli hyperparams`` prints it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# Arithmetic of the training passes (the update, and PPO's rollout acting). "bf16": matrix products and
# convolutions of the hidden layers run in bfloat16 under autocast, about twice the throughput on CPUs
# with bf16 instructions (AVX512-BF16, AMX) and on recent GPUs; output layers, losses, weights and
# optimiser state stay float32. Evaluation, play and export always run float32.
Precision = Literal["fp32", "bf16"]
# torch.compile of the acting and update steps: "on", "off", or "auto" (rlcli.algos.compiling says when)
Compile = Literal["off", "on", "auto"]


class Schedule(str, Enum):
    constant = "constant"
    linear = "linear"
    adaptive_kl = "adaptive_kl"  # rl_games: lr /= 1.5 when KL > 2*target, *= 1.5 when KL < target/2


class NetworkConfig(Frozen):
    """Actor-critic network shape."""

    trunk: Literal["mlp", "cnn"] = "mlp"
    """The layers before the heads: an MLP, or the Nature CNN over stacked frames."""
    hidden: tuple[Annotated[int, Field(gt=0)], ...] = (64, 64)
    """Units of each MLP layer."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """The MLP's activation."""
    shared: bool = False
    """One trunk for actor and critic (Atari), or one each (MuJoCo)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of a Gaussian policy (Box actions)."""
    ortho_init: bool = True
    """Orthogonal initialisation of the layers (PPO's usual), else torch's default."""
    recurrent: Literal["lstm", "gru"] | None = None
    """A memory after the trunk, for partially observed tasks; none by default."""
    recurrent_size: Annotated[int, Field(gt=0)] = 128
    """Hidden units of the recurrent memory."""
    actor_keys: tuple[str, ...] | None = None
    """Dict observations: the keys the actor reads (default: all but the action mask and "state")."""
    critic_keys: tuple[str, ...] | None = None
    """Dict observations: the keys the critic reads (default: all but the mask; "state" is its own)."""


class AlgoConfig(Frozen):
    """What every algorithm's hyperparameters share; each algorithm's module subclasses it, with an
    ``algo`` field whose literal is its registered name."""

    algo: str
    """The algorithm."""
    steps: Annotated[int, Field(gt=0)] = 1_000_000
    """Env steps to train for, over all envs."""
    n_envs: Annotated[int, Field(gt=0)] = 8
    """Envs stepped in parallel."""
    precision: Precision = "fp32"
    """Arithmetic of the training passes: fp32, or bf16 hidden layers under autocast."""
    compile: Compile = "auto"
    """torch.compile of acting and update steps (CUDA graphs on a GPU): on, off, or auto (on a GPU only)."""
    flush_denormal: bool = True
    """Subnormal floats (below 1.2e-38) read and written as zero on the CPU from a run's set-up on, in the
    process that trains it: Adam's moments of weights whose gradient stays zero decay into that range, where
    each operation on them costs the CPU ~10x (a saved run without the setting kept them)."""

    @model_validator(mode="before")
    @classmethod
    def _compile_from_bool(cls, data: Any) -> Any:
        """Runs saved when ``compile`` was a yes/no switch still load."""
        if isinstance(data, dict) and isinstance(data.get("compile"), bool):
            return {**data, "compile": "on" if data["compile"] else "off"}
        return data


EnvKwargs = dict[str, bool | int | float | str]


class SelfPlayConfig(Frozen):
    """The opponents of a turn-based game's learner: snapshots of itself, or one fixed opponent."""

    # "pool": past snapshots of the learner; "random" (uniform over legal moves) or "scripted" (the game's
    # own heuristic player) train against that player alone
    opponent: Literal["pool", "random", "scripted"] = "pool"
    snapshot_every: Annotated[int, Field(gt=0)] = 10  # updates between snapshots added to the pool
    latest: Annotated[float, Field(ge=0, le=1)] = 0.5  # probability the newest snapshot plays, else any
    # how an older snapshot is drawn: "uniform", or "prioritized", in proportion to (1 - p)^2 where p is the
    # learner's expected score against it by the ratings (AlphaStar's prioritised fictitious self-play:
    # the opponents it still loses to most often)
    sampling: Literal["uniform", "prioritized"] = "uniform"
    # probability a game is against the uniform random player instead of a snapshot: keeps the learner
    # meeting positions its own sharpening snapshots no longer reach
    random: Annotated[float, Field(ge=0, le=1)] = 0.0
    # probability a game is against the game's scripted player (where rlcli has one): a sparring partner
    # that punishes every missed block, while the pool is still weak
    scripted: Annotated[float, Field(ge=0, le=1)] = 0.0
    # snapshots play their most likely move (as the learner is evaluated) rather than a sampled one: an
    # opponent that takes every chance it sees punishes the learner's mistakes every time
    greedy: bool = False
    pool_size: Annotated[int, Field(gt=0)] = 20  # snapshots kept, the oldest dropped first
    elo_k: Annotated[float, Field(gt=0)] = 16.0  # Elo's K-factor: rating points a result moves at most

    @model_validator(mode="after")
    def _shares_fit(self) -> SelfPlayConfig:
        if self.random + self.scripted > 1:
            raise ValueError(f"random + scripted = {self.random + self.scripted:g} leaves the pool a negative share; "
                             "keep their sum at most 1")
        return self


class MultiAgentConfig(Frozen):
    """How a PettingZoo environment's agents are presented to one shared policy. Hyperparameter files
    give it as the key ``multiagent`` beside the algorithm's."""

    # a one-hot agent index among the observations, so that agents sharing parameters can act differently
    agent_id: bool = False
    # the env's global state() as the observation key ``state``: read by the critic alone (MAPPO's
    # centralised critic); false gives every agent's critic its own observation only (IPPO)
    state: bool = True
    selfplay: SelfPlayConfig = SelfPlayConfig()
    # the players periodic evaluation and `rlcli eval` measure a game's agent against, the first being the
    # one whose score is the run's evaluated return; None: scripted (where the game has one), then random
    eval_opponents: tuple[Literal["random", "scripted"], ...] | None = None


# the env backends a run, a tune or a benchmark may name (rlcli.envs.registry.resolve_backend picks for auto)
BackendName = Literal["auto", "envpool", "gymnasium", "torch", "playground", "mjlab"]


class EnvConfig(Frozen):
    id: str
    backend: BackendName = "auto"
    env_module: str | None = None  # imported first; registers custom gymnasium ids
    # keywords for the env's constructor (Atari: envpool's preprocessing options); hyperparameter files
    # give them as the key ``env_kwargs`` beside the algorithm's
    kwargs: EnvKwargs = {}
    multiagent: MultiAgentConfig = MultiAgentConfig()


class EvalConfig(Frozen):
    every: Annotated[int, Field(ge=0)] = 0  # env steps between evaluations; 0 = only at the end
    episodes: Annotated[int, Field(gt=0)] = 10
    deterministic: bool = True


# the largest seed: numpy's (envpool's int32 seeds are folded into its range where they pass it)
MAX_SEED = 2**32 - 1


class RunConfig(Frozen):
    """Everything that defines a training run; saved fully resolved as ``config.yaml`` and read back with
    ``rlcli.algos.run_config``, which validates ``algo`` by its algorithm's own model."""

    env: EnvConfig
    algo: SerializeAsAny[AlgoConfig]
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # torch intra-op threads; None chooses per algorithm (rlcli.training.agents.thread_plan)
    torch_threads: Annotated[int, Field(gt=0)] | None = None
    env_threads: Annotated[int, Field(gt=0)] | None = None  # envpool worker threads; None: envpool's default
    eval: EvalConfig = EvalConfig()
    stop_at: float | None = None  # stop once an evaluation reaches this mean return
    # a turn-based game's evaluation opponent whose win rate ``stop_at`` is compared with (a fraction)
    stop_opponent: Literal["random", "scripted"] | None = None
    # "module:function" called with the TrainState after each iteration; returns True to stop
    stop_when: str | None = None


# ---------------------------------------------------------------------------------------------------
# Loading hyperparameter files


def data_dir() -> Path:
    """What rlcli ships beside its code: ``hyperparams/``, ``zoo/`` agents, suites and reference scores (in a
    checkout, ``hyperparams`` and ``zoo`` are links to the repository's own folders)."""
    return Path(str(resources.files("rlcli") / "data"))


def hyperparams_dir() -> Path:
    """The directory of shipped hyperparameter YAML."""
    return data_dir() / "hyperparams"


def config_source(path: Path) -> Path:
    """``path``; where no such file exists and it is a bare name, the shipped preset of that name
    (hyperparams/presets/NAME.yml: ``--config atari-lstm``). A UsageError naming the presets otherwise."""
    if path.exists():
        return path
    presets = hyperparams_dir() / "presets"
    preset = presets / f"{path}.yml"
    if not path.suffix and path.parent == Path(".") and preset.is_file():
        return preset
    names = ", ".join(sorted(p.stem for p in presets.glob("*.yml")))
    raise UsageError(f"config file not found: {path} (or a shipped preset: {names})")


MAX_YAML_BYTES = 1 << 20  # a config or hyperparameter file; a larger one is not a config


MAX_YAML_VALUES = 100_000  # values a file may expand to through its aliases


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load``, refusing a document whose aliases expand it past ``MAX_YAML_VALUES`` values: a few
    hundred bytes of nested anchors expand into gigabytes wherever the result is copied or printed."""
    data = yaml.safe_load(text)
    if _expanded_size(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise yaml.YAMLError(f"its aliases expand it to more than {MAX_YAML_VALUES:,} values")
    return data


def _expanded_size(data: Any, budget: int) -> int:
    """Values in ``data`` counted as often as aliases repeat them, up to just past ``budget``."""
    count, stack = 0, [data]
    while stack and count <= budget:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def read_yaml_text(path: Path) -> Any:
    """The parsed YAML of ``path``: at most ``MAX_YAML_BYTES``, expanding to at most ``MAX_YAML_VALUES``.
    Raises OSError, UnicodeDecodeError or yaml.YAMLError (the callers name the file)."""
    if path.stat().st_size > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"{path.stat().st_size:,} bytes, more than a config's {MAX_YAML_BYTES:,}")
    return parse_yaml(path.read_text())


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = read_yaml_text(path)
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


def hyperparams_layers(file: Path, env_id: str, group: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The parts of a hyperparameter ``file`` that apply to ``env_id``, each named, in the order they are
    merged: ``default``, ``group NAME``, ``entry ENV``; those the file lacks are left out."""
    table = load_yaml(file)
    names = (("default", "default"), (group, f"group {group}"), (env_id, f"entry {env_id}"))
    return [(name, table[key] or {}) for key, name in names if key and key in table]


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested keys dotted: ``{"network": {"hidden": [64]}}`` -> ``{"network.hidden": [64]}``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def field_description(model: type[BaseModel], key: str) -> str:
    """The description of the dotted ``key``'s field in ``model`` (through nested models); "" if none."""
    head, _, rest = key.partition(".")
    info = model.model_fields.get(head)
    if info is None:
        return ""
    if rest and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
        return field_description(info.annotation, rest)
    return info.description or ""


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
        return float(raw) if "e" in raw.lower() and not raw.lower().startswith(("n", "i")) else parse_yaml(raw)
    except (ValueError, yaml.YAMLError):
        try:
            return parse_yaml(raw)
        except yaml.YAMLError:
            return raw


def split_env_sections(values: dict[str, Any]) -> tuple[dict[str, Any], EnvConfig]:
    """Merged hyperparameters without the env's sections (``env_kwargs``, ``multiagent``), and those
    sections validated, as an EnvConfig of no id."""
    values = dict(values)
    env_kwargs = values.pop("env_kwargs", None) or {}
    multiagent = values.pop("multiagent", None) or {}
    try:
        return values, EnvConfig(id="-", kwargs=env_kwargs, multiagent=multiagent)
    except ValidationError as e:
        raise UsageError(describe_validation_error(e, EnvConfig).replace("'kwargs", "'env_kwargs")) from None


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
    got = repr(first.get("input"))
    got = f" (got {got})" if len(got) <= 80 else ""  # a whole section's dump says nothing the message does not
    if first["type"] == "value_error":  # a check across settings: the message names them and the fix
        where = f" in '{key}'" if key != "config" else ""
        return f"inconsistent settings{where}: {first['msg'].removeprefix('Value error, ')}{got}"
    return f"invalid value for '{key}': {first['msg']}{got}"


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
