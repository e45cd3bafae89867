"""Search spaces: one per algorithm, declared as data, and the same data format for ``--space FILE``.

Each key names a hyperparameter (dotted for nested fields: ``network.hidden``) and says how to sample it:

- a list: one of these values (``n_epochs: [3, 5, 10]``, ``network.hidden: [[64, 64], [256, 256]]``);
- ``{low, high}``: a number in the range, an integer when both bounds are integers; ``log: true`` samples
  it on a log scale; ``one_minus: true`` samples ``1 - value`` in ``[low, high]`` (a discount of 0.999 is
  as far from 0.99 as 0.99 is from 0.9);
- ``{minibatches: [1, 2, 4]}`` (``minibatch_size`` only): the rollout ``n_envs * n_steps`` split into
  that many minibatches, so that a minibatch never exceeds the rollout and always divides it;
- ``targets: [actor_lr, critic_lr]`` in a mapping gives one sampled value to several fields.

Sampled floats are rounded to three significant digits before they are applied: the written
hyperparameters are then exactly the ones a trial trained with, and read like the hand-written ones.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel

from rlcli.algos import build_algo_config, spec_for
from rlcli.config import deep_merge, load_yaml
from rlcli.errors import UsageError

SIGNIFICANT_DIGITS = 3
ENV_KWARGS = "env_kwargs"


@dataclass(frozen=True)
class Param:
    """One sampled quantity: its name in the study, the config fields it sets and how it is drawn."""

    name: str
    targets: tuple[str, ...]
    kind: Literal["float", "int", "choice", "minibatches"]
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    one_minus: bool = False
    choices: tuple[Any, ...] = ()

    @property
    def study_name(self) -> str:
        """The parameter's name in the study (``1-gamma`` where the sample is the complement)."""
        return f"1-{self.name}" if self.one_minus else self.name


class SearchSpace:
    """A parsed, checked search space for one algorithm."""

    def __init__(self, algo: str, data: dict[str, Any], source: str) -> None:
        spec_for(algo)
        self.algo, self.data, self.source = algo, data, source
        self.params = [_parse(algo, key, spec, source) for key, spec in data.items()]
        if not self.params:
            raise UsageError(f"{source} declares no hyperparameters; give at least one, e.g. "
                             "learning_rate: {low: 1.0e-5, high: 1.0e-3, log: true}")

    def sample(self, trial: Any, base: dict[str, Any]) -> dict[str, Any]:
        """Nested overrides drawn from ``trial`` (an optuna trial); ``base`` is the env's merged
        hyperparameters, which supply the rollout shape when the space does not sample it."""
        flat: dict[str, Any] = {}
        for param in self.params:
            if param.kind == "minibatches":
                continue
            if param.kind == "float":
                value: Any = _round(trial.suggest_float(param.study_name, param.low, param.high, log=param.log))
                if param.one_minus:
                    value = round(1.0 - value, 12)
            elif param.kind == "int":
                value = trial.suggest_int(param.study_name, int(param.low), int(param.high), log=param.log)
            else:
                labels = [_label(c) for c in param.choices]
                value = param.choices[labels.index(trial.suggest_categorical(param.study_name, labels))]
            for target in param.targets:
                flat[target] = value
        for param in self.params:
            if param.kind == "minibatches":
                rollout = _get(self.algo, flat, base, "n_envs") * _get(self.algo, flat, base, "n_steps")
                count = trial.suggest_categorical(param.study_name, list(param.choices))
                if _recurrent(flat, base):
                    # whole env sequences per minibatch: at most one minibatch per env
                    count = min(count, _get(self.algo, flat, base, "n_envs"))
                flat["minibatch_size"] = rollout // count
        overrides: dict[str, Any] = {}
        for key, value in flat.items():
            overrides = deep_merge(overrides, nest(key, value))
        return overrides

    def check(self, base: dict[str, Any], where: str) -> None:
        """Raises a UsageError naming the key when a value the space can produce is invalid with the
        hyperparameters in ``base`` (one env's merged entry; call it for every env tuned). The parameters
        that constrain one another (``COUPLED``: the rollout shape) are tried in every combination of
        their choices and bounds, each other parameter at each of its choices and bounds; every rollout
        shape is also tried against every minibatch count."""
        for param in self.params:
            if param.kind == "minibatches":
                envs, steps = (_choices_of(self, base, key, where) for key in ("n_envs", "n_steps"))
                for n_envs, n_steps, count in itertools.product(envs, steps, param.choices):
                    if (n_envs * n_steps) % count or count > n_envs * n_steps:
                        raise UsageError(
                            f"{self.source}: minibatches {count} does not divide the rollout "
                            f"n_envs*n_steps = {n_envs}*{n_steps}{where}; use counts that divide every "
                            "rollout, e.g. powers of two with power-of-two n_envs and n_steps")
        fields = set(spec_for(self.algo).coupled)
        coupled = [p for p in self.params if p.kind == "minibatches" or set(p.targets) & fields]
        first = {p.study_name: _extremes(p)[0] for p in self.params}
        # the constraints among coupled fields are monotonic (minibatch_size <= n_envs * n_steps), so the
        # bounds of a range stand for the values between them
        probes = []
        for values in itertools.product(*(_extremes(p) for p in coupled)):
            combination = {p.study_name: x for p, x in zip(coupled, values, strict=True)}
            described = ", ".join(f"{k}={x}" for k, x in combination.items()) or "its first values"
            probes.append((described, {**first, **combination}))
        probes += [(f"{p.study_name}={x}", {**first, p.study_name: x})
                   for p in self.params if p not in coupled for x in _extremes(p)[1:]]
        for described, probe in probes:
            values = deep_merge(base, self.sample(_Fixed(probe), base))
            try:
                build_algo_config(self.algo, values)
            except UsageError as e:
                raise UsageError(f"{self.source}: the sample with {described} is invalid{where}: {e}") from None


def default_space(algo: str) -> SearchSpace:
    """The built-in search space of ``algo``."""
    return SearchSpace(algo, spec_for(algo).search_space, f"the built-in {algo} search space")


def load_space(path: Path, algo: str) -> SearchSpace:
    """The search space in a YAML file (``--space``), in the format of this module's docstring."""
    return SearchSpace(algo, load_yaml(path), f"--space {path}")


def nest(key: str, value: Any) -> dict[str, Any]:
    """``("network.hidden", v)`` -> ``{"network": {"hidden": v}}``."""
    *parents, leaf = key.split(".")
    node: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        node = {part: node}
    return node


# ---------------------------------------------------------------------------------------------------


class _Fixed:
    """Answers suggest_* from a fixed mapping, to try a space's extreme values without a study."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def suggest_float(self, name: str, *_: Any, **__: Any) -> float:
        return float(self.params[name])

    def suggest_int(self, name: str, *_: Any, **__: Any) -> int:
        return int(self.params[name])

    def suggest_categorical(self, name: str, *_: Any, **__: Any) -> Any:
        return self.params[name]


def _parse(algo: str, key: str, spec: Any, source: str) -> Param:
    where = f"{source}: '{key}'"
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, dict):
        raise UsageError(f"{where} must be a list of choices or a mapping such as {{low: 0.9, high: 0.999}}, "
                         f"got {spec!r}")
    known = {"low", "high", "log", "one_minus", "choices", "minibatches", "targets"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise UsageError(f"{where} has unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
    targets = tuple(spec.get("targets") or [key])
    for target in targets:
        _check_field(algo, target, source)
    if "minibatches" in spec:
        counts = spec["minibatches"]
        rollout = {"minibatch_size", "n_envs", "n_steps"}
        if targets != ("minibatch_size",) or not rollout <= set(spec_for(algo).config.model_fields):
            raise UsageError(f"{where}: minibatches applies to PPO's minibatch_size only")
        if not (isinstance(counts, list) and counts and all(isinstance(c, int) and c > 0 for c in counts)):
            raise UsageError(f"{where}: minibatches must be a list of positive integers, e.g. [1, 2, 4, 8]")
        return Param("n_minibatches", targets, "minibatches", choices=tuple(counts))
    if "choices" in spec:
        choices = spec["choices"]
        if not (isinstance(choices, list) and choices):
            raise UsageError(f"{where}: choices must be a non-empty list")
        labels = [_label(c) for c in choices]
        if len(set(labels)) != len(labels):
            raise UsageError(f"{where}: choices repeat a value")
        return Param(key, targets, "choice", choices=tuple(tuple(c) if isinstance(c, list) else c for c in choices))
    low, high = spec.get("low"), spec.get("high")
    if not (_is_number(low) and _is_number(high)):
        raise UsageError(f"{where} needs numeric low and high, e.g. {{low: 1.0e-5, high: 1.0e-3, log: true}} "
                         "(write floats with a dot: 1.0e-5)")
    if not low < high:
        raise UsageError(f"{where}: low ({low}) must be below high ({high})")
    log, one_minus = bool(spec.get("log", False)), bool(spec.get("one_minus", False))
    if log and low <= 0:
        raise UsageError(f"{where}: a log-scale range needs low > 0, got {low}")
    if one_minus and not (0 <= low and high <= 1):
        raise UsageError(f"{where}: one_minus bounds are 1 - value and must lie in [0, 1], got [{low}, {high}]")
    kind: Literal["float", "int"] = "int" if isinstance(low, int) and isinstance(high, int) and not one_minus \
        else "float"
    return Param(key, targets, kind, low=low, high=high, log=log, one_minus=one_minus)


def _is_number(x: object) -> TypeGuard[int | float]:
    """An int or a float as YAML gives one (a bool is an int to Python, not a bound to YAML)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check_field(algo: str, dotted: str, source: str) -> None:
    if dotted == ENV_KWARGS or dotted.startswith(ENV_KWARGS + "."):
        return  # the env's keywords, which hyperparameter files give beside the algorithm's
    model: type[BaseModel] = spec_for(algo).config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        fields = model.model_fields
        if part in fields:
            annotation = fields[part].annotation
            if i == len(parts) - 1:
                return
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
                continue
        import difflib

        close = difflib.get_close_matches(part, sorted(fields), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"valid keys: {', '.join(sorted(fields))}"
        raise UsageError(f"{source}: unknown {algo} hyperparameter '{dotted}'; {hint}")


def _choices_of(space: SearchSpace, base: dict[str, Any], key: str, where: str) -> list[int]:
    for param in space.params:
        if key in param.targets:
            if param.kind != "choice":
                raise UsageError(f"{space.source}: with minibatches, '{key}' must be a list of choices, so that "
                                 "every rollout shape can be checked to divide")
            return [int(c) for c in param.choices]
    return [int(base.get(key, spec_for(space.algo).config.model_fields[key].default))]


def _extremes(param: Param) -> list[Any]:
    if param.kind in ("choice", "minibatches"):
        return [_label(c) if param.kind == "choice" else c for c in param.choices]
    return [param.low, param.high]


def _get(algo: str, flat: dict[str, Any], base: dict[str, Any], key: str) -> int:
    return int(flat[key] if key in flat else base.get(key, spec_for(algo).config.model_fields[key].default))


def _recurrent(flat: dict[str, Any], base: dict[str, Any]) -> bool:
    """Whether the sampled (else the base) network is recurrent."""
    if "network.recurrent" in flat:
        return bool(flat["network.recurrent"])
    return bool((base.get("network") or {}).get("recurrent"))


def _label(choice: Any) -> Any:
    """Optuna's categorical values are scalars: lists and mappings become their JSON text."""
    if isinstance(choice, (list, tuple)):
        return json.dumps(list(choice))
    return json.dumps(choice, sort_keys=True) if isinstance(choice, dict) else choice


def _round(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
