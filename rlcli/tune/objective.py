"""A trial's objective: real training runs (one per env and seed) with the sampled hyperparameters, each
periodic evaluation reported to the pruner; the mean final evaluated return (mean normalised score with
several envs) is the trial's value. A run that diverges or crashes fails the trial, not the study."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from rlcli.algos import hyperparams_for, resolve
from rlcli.benchmark.scores import normalization_for, normalizations
from rlcli.config import RunConfig, deep_merge
from rlcli.envs import env_group
from rlcli.errors import UsageError
from rlcli.share.names import safe_name
from rlcli.tune.space import SearchSpace
from rlcli.tune.spec import TuneSpec
from rlcli.tune.storage import describe_error

OVERRIDES_BY_ENV = "hyperparams_by_env"  # a trial's user attribute when several envs are tuned


class TrialFailed(Exception):
    """A trial that diverged or crashed; the message is its recorded reason."""


def base_hyperparams(spec: TuneSpec, env_id: str) -> dict[str, Any]:
    """The env's merged hyperparameters (default <- group <- env entry) that a trial's sample overrides."""
    return hyperparams_for(spec.algo, env_id, env_group(env_id))


def report_step(unit: int, spec: TuneSpec, step: int, every: int) -> int:
    """The pruner's step for an evaluation at env step ``step`` of the ``unit``-th run of a trial: the
    index of the evaluation multiple reached, so that trials with different rollout sizes compare at
    the same point of training (and runs of several seeds or envs follow one another)."""
    return unit * (spec.evaluations + 1) + min(step // every, spec.evaluations)


def trial_overrides(trial: Any, spec: TuneSpec, space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Per env id: the overrides of its hyperparameters that ``trial`` samples. The drawn values are the
    same for every env (a trial answers a name it has drawn with that draw); what derives from an env's
    own entry can differ: the minibatch size, when the space splits a rollout shape it does not sample."""
    return {env_id: space.sample(trial, base_hyperparams(spec, env_id)) for env_id in spec.env_ids}


def stored_overrides(user_attrs: dict[str, Any], env_ids: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per env id: the overrides a finished trial trained with, from its user attributes."""
    by_env = user_attrs.get(OVERRIDES_BY_ENV) or {}
    return {env_id: by_env.get(env_id, user_attrs.get("hyperparams", {})) for env_id in env_ids}


def run_config(spec: TuneSpec, env_id: str, seed: int, overrides: dict[str, Any], every: int) -> RunConfig:
    """The config of one training run of a trial: the env's hyperparameters with the trial's overrides,
    evaluated every ``every`` env steps. A UsageError when the sample is invalid for this env."""
    return resolve(spec.algo, env_id, backend=spec.backend, env_module=spec.env_module,
                   overrides=deep_merge(overrides, {"steps": spec.steps}), seed=seed, device=spec.device,
                   torch_threads=spec.threads, env_threads=spec.threads,
                   eval_every=every, eval_episodes=spec.eval_episodes)


def objective(trial: Any, spec: TuneSpec, space: SearchSpace, on_report: Callable[[], None] | None = None) -> float:
    """Samples hyperparameters, trains every env x seed of the trial and returns the mean final evaluated
    return (mean normalised score with several envs). Raises optuna.TrialPruned, TrialFailed,
    optuna.exceptions.UpdateFinishedTrialError (another worker recorded the trial as interrupted while it
    ran), or KeyboardInterrupt (Ctrl-C)."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    from rlcli.training.train import EnvFault, TrainingDiverged, TrainingInterrupted, TrainState, train

    by_env = trial_overrides(trial, spec, space)
    trial.set_user_attr("hyperparams", by_env[spec.env_ids[0]])  # what the display and summary show
    if len(by_env) > 1:
        trial.set_user_attr(OVERRIDES_BY_ENV, by_env)
    twin = finished_twin(trial, spec, by_env)
    if twin is not None:
        return repeated(trial, twin)
    every = max(spec.steps // spec.evaluations, 1)
    seeds = [spec.seed + i for i in range(spec.seeds_per_trial)]
    units = [(env_id, seed) for env_id in spec.env_ids for seed in seeds]
    scores, returns = [], {}
    last_reported = -1
    for unit, (env_id, seed) in enumerate(units):
        try:
            cfg = run_config(spec, env_id, seed, by_env[env_id], every)
        except UsageError as e:
            raise TrialFailed(f"invalid configuration: {e}") from None

        def report(state: TrainState, env_id: str = env_id, seed: int = seed, unit: int = unit) -> bool:
            nonlocal last_reported
            for key, value in state.metrics.items():
                if key.startswith("losses/") and not math.isfinite(value):
                    raise TrialFailed(f"diverged: {key} is {value} at step {state.step:,} ({env_id}, seed {seed})")
            if "eval/mean_return" not in state.metrics:
                return False
            score = _score(env_id, state.metrics["eval/mean_return"], len(spec.env_ids) > 1)
            if not math.isfinite(score):
                raise TrialFailed(f"diverged: evaluated return is {score} at step {state.step:,} ({env_id})")
            index = report_step(unit, spec, state.step, every)
            if index > last_reported:  # the final evaluation can fall on the last periodic one's index
                last_reported = index
                trial.report(score, index)
                if on_report is not None:
                    on_report()
                if trial.should_prune():
                    reason = f"{score:.4g} at step {state.step:,} ({env_id}, seed {seed})"
                    trial.set_user_attr("prune_reason", reason)
                    raise optuna.TrialPruned(reason)
            return False

        run_dir = spec.study_dir / "trials" / f"{trial.number:04d}" / f"{safe_name(env_id)}__s{seed}"
        try:
            state = train(cfg, run_dir, [report])
        except (optuna.TrialPruned, TrialFailed, UpdateFinishedTrialError):
            raise
        except TrainingInterrupted:
            raise KeyboardInterrupt from None
        except EnvFault as e:
            raise TrialFailed(f"environment fault: a non-finite {e.what} at step {e.step:,} ({env_id}, seed {seed})"
                              ) from None
        except TrainingDiverged as e:
            raise TrialFailed(f"diverged: {e.quantity} is not finite at step {e.state.step:,} ({env_id}, seed {seed})"
                              ) from None
        except Exception as e:  # a crash of one trial's training, or a failed report, must not end the study
            raise TrialFailed(f"{describe_error(e)} ({env_id}, seed {seed})") from None
        final = _score(env_id, state.eval_return, len(spec.env_ids) > 1)
        if not math.isfinite(final):
            raise TrialFailed(f"diverged: final evaluated return is {state.eval_return} ({env_id}, seed {seed})")
        returns[f"{env_id}/s{seed}"] = state.eval_return
        scores.append(final)
        trial.set_user_attr("returns", returns)
    return float(sum(scores) / len(scores))


def finished_twin(trial: Any, spec: TuneSpec, by_env: dict[str, dict[str, Any]]) -> Any | None:
    """The first finished trial (complete, pruned, or failed other than by an interruption) of ``trial``'s
    study that trained with the same overrides, or None. A random draw can repeat a small space's point,
    and a continued study's sampler once repeated its first run's draws."""
    from optuna.trial import TrialState

    drawn = json.dumps(by_env, sort_keys=True, default=str)
    for other in sorted(trial.study.get_trials(deepcopy=False), key=lambda t: t.number):
        if (other.number != trial.number and other.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
                and not other.user_attrs.get("interrupted") and "same_as" not in other.user_attrs
                and json.dumps(stored_overrides(other.user_attrs, spec.env_ids), sort_keys=True, default=str) == drawn):
            return other
    return None


def repeated(trial: Any, twin: Any) -> float:
    """``twin``'s outcome as ``trial``'s, without training again: its value, or its pruning or failure
    (raised as in ``objective``); the ``same_as`` user attribute names it."""
    import optuna
    from optuna.trial import TrialState

    trial.set_user_attr("same_as", twin.number)
    as_twin = f"(as trial {twin.number}, whose hyperparameters it drew)"
    if twin.state == TrialState.PRUNED:
        reason = f"{twin.user_attrs.get('prune_reason', 'pruned')} {as_twin}"
        trial.set_user_attr("prune_reason", reason)
        raise optuna.TrialPruned(reason)
    if twin.state == TrialState.FAIL:
        raise TrialFailed(f"{twin.user_attrs.get('fail_reason', 'failed')} {as_twin}")
    if "returns" in twin.user_attrs:
        trial.set_user_attr("returns", twin.user_attrs["returns"])
    return float(twin.value)


def _score(env_id: str, mean_return: float | None, normalise: bool) -> float:
    if mean_return is None:
        return math.nan
    if not normalise:
        return float(mean_return)
    norm = normalization_for(env_id)
    assert norm is not None  # check_normalisable() ran before the study started
    return (float(mean_return) - norm.random) / (norm.reference - norm.random)


def check_normalisable(env_ids: tuple[str, ...]) -> None:
    """Several envs are scored by normalised return; each needs random and reference returns."""
    if len(env_ids) < 2:
        return
    missing = [e for e in env_ids if normalization_for(e) is None]
    if missing:
        raise UsageError(f"tuning several envs scores them by normalised return, and {', '.join(missing)} "
                         f"has no random/reference return in rlcli/data/normalization.csv; envs that have "
                         f"one: {', '.join(sorted(normalizations()))}")
