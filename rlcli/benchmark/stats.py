"""Aggregate metrics over runs on several tasks, as rliable defines them (Agarwal et al. 2021), in numpy.

Scores are given per task: ``{"CartPole-v1": array([...one score per run...]), ...}``; tasks may have
different numbers of runs (a failed seed leaves a task with fewer). With equal numbers of runs every
function here agrees with rliable on the ``(runs, tasks)`` matrix:

- IQM: the mean of the middle 50% of all scores pooled over tasks and runs (``scipy.stats.trim_mean``
  with 25% cut from each end: ``int(0.25 * n)`` scores each side);
- median and mean: of the per-task mean scores;
- optimality gap: how far scores fall short of ``threshold`` (1.0 on normalised scores), on average:
  ``threshold - mean(min(score, threshold))`` over all scores;
- probability of improvement P(X > Y): per task, the Mann-Whitney statistic over all pairs of runs,
  ``P(x > y) + P(x == y) / 2``, averaged over the tasks both have.

Confidence intervals come from the stratified bootstrap: each task's runs are resampled with
replacement, separately, and the statistic recomputed; the interval is the percentile interval of those
replicates. Every random draw takes an explicit seed, so a report is the same each time it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

Scores = Mapping[str, Sequence[float] | np.ndarray]  # task -> one score per run
# A batched statistic: one array per task, each of shape (..., runs of that task) -> shape (...)
Statistic = Callable[[Sequence[np.ndarray]], np.ndarray]


class Interval(NamedTuple):
    """A point estimate and its confidence interval (``low`` <= ``high``)."""

    estimate: float
    low: float
    high: float


def normalize(score: float | np.ndarray, random: float, reference: float) -> float | np.ndarray:
    """``(score - random) / (reference - random)``: 0 is a uniform random policy, 1 the reference."""
    return (score - random) / (reference - random)


# ---------------------------------------------------------------------------------------------------
# Aggregates, batched over leading axes so that bootstrap replicates are computed at once


def _iqm(tasks: Sequence[np.ndarray]) -> np.ndarray:
    pooled = np.sort(np.concatenate(tasks, axis=-1), axis=-1)
    cut = int(0.25 * pooled.shape[-1])
    return pooled[..., cut:pooled.shape[-1] - cut].mean(axis=-1)


def _task_means(tasks: Sequence[np.ndarray]) -> np.ndarray:
    return np.stack([t.mean(axis=-1) for t in tasks], axis=-1)


def _median(tasks: Sequence[np.ndarray]) -> np.ndarray:
    return np.median(_task_means(tasks), axis=-1)


def _mean(tasks: Sequence[np.ndarray]) -> np.ndarray:
    return _task_means(tasks).mean(axis=-1)


def _optimality_gap(tasks: Sequence[np.ndarray], threshold: float = 1.0) -> np.ndarray:
    pooled = np.concatenate(tasks, axis=-1)
    return threshold - np.minimum(pooled, threshold).mean(axis=-1)


AGGREGATES: dict[str, Statistic] = {"IQM": _iqm, "median": _median, "mean": _mean,
                                    "optimality gap": _optimality_gap}


def _arrays(scores: Scores) -> list[np.ndarray]:
    tasks = [np.asarray(v, dtype=np.float64) for v in scores.values()]
    if not tasks or any(t.ndim != 1 or t.size == 0 for t in tasks):
        raise ValueError("scores need at least one task, each with a 1-D array of at least one run")
    return tasks


def iqm(scores: Scores) -> float:
    """Interquartile mean of all scores pooled over tasks and runs."""
    return float(_iqm(_arrays(scores)))


def median(scores: Scores) -> float:
    """Median over tasks of each task's mean score."""
    return float(_median(_arrays(scores)))


def mean(scores: Scores) -> float:
    """Mean over tasks of each task's mean score."""
    return float(_mean(_arrays(scores)))


def optimality_gap(scores: Scores, threshold: float = 1.0) -> float:
    """``threshold`` minus the mean of all scores clipped from above at ``threshold`` (lower is better)."""
    return float(_optimality_gap(_arrays(scores), threshold))


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """P(X > Y) over the tasks both have: per task the probability that a run of X scores above a run of
    Y (ties count half), averaged over tasks."""
    return float(_probability_of_improvement(*_paired(x, y)))


def _paired(x: Scores, y: Scores) -> tuple[list[np.ndarray], list[np.ndarray]]:
    common = [task for task in x if task in y]
    if not common:
        raise ValueError("the two sets of scores have no task in common")
    return _arrays({t: x[t] for t in common}), _arrays({t: y[t] for t in common})


def _probability_of_improvement(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> np.ndarray:
    per_task = []
    for x, y in zip(xs, ys, strict=True):
        greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
        ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
        per_task.append(greater + 0.5 * ties)
    return np.mean(per_task, axis=0)


# ---------------------------------------------------------------------------------------------------
# Stratified bootstrap


def bootstrap_replicates(scores: Scores, statistic: Statistic, reps: int = 10_000, seed: int = 0) -> np.ndarray:
    """``reps`` values of ``statistic`` on resamples that draw each task's runs with replacement from
    that task alone (shape ``(reps,)``)."""
    rng = np.random.default_rng(seed)
    return statistic(_resample(_arrays(scores), reps, rng))


def _resample(tasks: Sequence[np.ndarray], reps: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [t[rng.integers(0, t.size, size=(reps, t.size))] for t in tasks]


def _percentiles(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def interval(scores: Scores, statistic: Statistic, reps: int = 10_000, confidence: float = 0.95,
             seed: int = 0) -> Interval:
    """The statistic on ``scores`` and its stratified-bootstrap percentile interval."""
    estimate = float(statistic(_arrays(scores)))
    return Interval(estimate, *_percentiles(bootstrap_replicates(scores, statistic, reps, seed), confidence))


def aggregate_intervals(scores: Scores, reps: int = 10_000, confidence: float = 0.95,
                        seed: int = 0) -> dict[str, Interval]:
    """IQM, median, mean and optimality gap of normalised ``scores``, each with its interval."""
    return {name: interval(scores, stat, reps, confidence, seed) for name, stat in AGGREGATES.items()}


def probability_of_improvement_interval(x: Scores, y: Scores, reps: int = 10_000, confidence: float = 0.95,
                                        seed: int = 0) -> Interval:
    """P(X > Y) with an interval from resampling X's and Y's runs independently within each task."""
    xs, ys = _paired(x, y)
    rng = np.random.default_rng(seed)
    replicates = _probability_of_improvement(_resample(xs, reps, rng), _resample(ys, reps, rng))
    return Interval(float(_probability_of_improvement(xs, ys)), *_percentiles(replicates, confidence))


def iqm_difference_interval(x: Scores, y: Scores, reps: int = 10_000, confidence: float = 0.95,
                            seed: int = 0) -> Interval:
    """IQM(X) - IQM(Y) over the tasks both have, with an interval from resampling X's and Y's runs
    independently within each task."""
    xs, ys = _paired(x, y)
    rng = np.random.default_rng(seed)
    replicates = _iqm(_resample(xs, reps, rng)) - _iqm(_resample(ys, reps, rng))
    return Interval(float(_iqm(xs) - _iqm(ys)), *_percentiles(replicates, confidence))
