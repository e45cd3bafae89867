"""Aggregate metrics and their bootstrap intervals against values worked out by hand."""

import numpy as np
import pytest

from rlcli.benchmark import stats


def test_iqm_is_the_mean_of_the_middle_half_pooled_over_tasks():
    # 8 scores: 25% of 8 = 2 cut from each end, leaving 3, 4, 5, 6
    assert stats.iqm({"a": [1, 2, 3, 4], "b": [5, 6, 7, 8]}) == pytest.approx(4.5)
    assert stats.iqm({"a": [8, 1, 7, 2, 6, 3, 5, 4]}) == pytest.approx(4.5)
    # 6 scores: int(1.5) = 1 cut from each end: mean(1, 2, 10, 20) = 8.25
    assert stats.iqm({"a": [0, 1, 2], "b": [10, 20, 100]}) == pytest.approx(8.25)
    # 3 scores: int(0.75) = 0 cut, the plain mean
    assert stats.iqm({"a": [0, 3, 9]}) == pytest.approx(4.0)


def test_iqm_agrees_with_scipy_trim_mean():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for n in range(1, 12):
        scores = rng.normal(size=(n, 3))
        expected = scipy_stats.trim_mean(scores, 0.25, axis=None)
        assert stats.iqm({str(t): scores[:, t] for t in range(3)}) == pytest.approx(expected)


def test_median_and_mean_are_over_per_task_means():
    scores = {"a": [0, 1], "b": [2, 2], "c": [4, 6]}  # task means 0.5, 2, 5
    assert stats.median(scores) == pytest.approx(2.0)
    assert stats.mean(scores) == pytest.approx(2.5)
    assert stats.median({"a": [1.0], "b": [3.0]}) == pytest.approx(2.0)


def test_optimality_gap_counts_only_the_shortfall_below_one():
    # min(x, 1): 0.5, 1, 0.2, 1 -> mean 0.675 -> gap 0.325
    assert stats.optimality_gap({"a": [0.5, 1.5], "b": [0.2, 1.0]}) == pytest.approx(0.325)
    assert stats.optimality_gap({"a": [2.0, 3.0]}) == pytest.approx(0.0)
    assert stats.optimality_gap({"a": [0.4]}, threshold=0.5) == pytest.approx(0.1)


def test_probability_of_improvement_counts_ties_as_half():
    # pairs (1,0) win, (1,2) loss, (2,0) win, (2,2) tie -> (1 + 0 + 1 + 0.5) / 4
    assert stats.probability_of_improvement({"a": [1, 2]}, {"a": [0, 2]}) == pytest.approx(0.625)
    # averaged over tasks: 0.625 on a, 0 on b; a task only one side has is left out
    x = {"a": [1, 2], "b": [0, 0], "only_x": [9]}
    y = {"a": [0, 2], "b": [5, 6, 7]}
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.3125)
    assert stats.probability_of_improvement(y, x) == pytest.approx(1 - 0.3125)
    with pytest.raises(ValueError, match="no task in common"):
        stats.probability_of_improvement({"a": [1]}, {"b": [1]})


def test_normalize():
    assert stats.normalize(14.6, -20.7, 14.6) == pytest.approx(1.0)
    assert stats.normalize(-20.7, -20.7, 14.6) == pytest.approx(0.0)
    assert stats.normalize(-100.0, -500.0, -100.0) == pytest.approx(1.0)


def test_bootstrap_of_two_runs_follows_the_closed_form():
    # resampling [0, 1] twice with replacement: mean 0 (1/4), 0.5 (1/2), 1 (1/4)
    replicates = stats.bootstrap_replicates({"a": [0.0, 1.0]}, stats.AGGREGATES["mean"], reps=40_000, seed=1)
    values, counts = np.unique(replicates, return_counts=True)
    assert values.tolist() == [0.0, 0.5, 1.0]
    assert counts / counts.sum() == pytest.approx([0.25, 0.5, 0.25], abs=0.01)
    assert stats.interval({"a": [0.0, 1.0]}, stats.AGGREGATES["mean"]) == (0.5, 0.0, 1.0)


def test_bootstrap_is_stratified_by_task():
    # every task's runs agree, so any resample within tasks gives the same IQM; a bootstrap that
    # pooled the tasks would not
    scores = {"a": [0.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0]}
    for name, expected in [("IQM", 0.5), ("median", 0.5), ("mean", 0.5), ("optimality gap", 0.5)]:
        assert stats.interval(scores, stats.AGGREGATES[name]) == pytest.approx((expected, expected, expected))


def test_intervals_are_seeded_and_contain_the_estimate():
    rng = np.random.default_rng(3)
    scores = {str(t): rng.uniform(size=5) for t in range(4)}
    first = stats.aggregate_intervals(scores, reps=2000, seed=7)
    assert first == stats.aggregate_intervals(scores, reps=2000, seed=7)
    for interval in first.values():
        assert interval.low <= interval.estimate <= interval.high
    assert first["IQM"].estimate == pytest.approx(stats.iqm(scores))


def test_comparison_intervals():
    x = {"a": [1.0, 2.0], "b": [3.0, 3.0]}
    better = {t: [v + 10 for v in runs] for t, runs in x.items()}
    assert stats.probability_of_improvement_interval(better, x, reps=1000) == (1.0, 1.0, 1.0)
    assert stats.probability_of_improvement_interval(x, x, reps=1000).estimate == pytest.approx(0.5)
    diff = stats.iqm_difference_interval(better, x, reps=1000)
    assert diff.estimate == pytest.approx(10.0) and diff.low < 10.0 < diff.high  # resampled independently
    steady = {"a": [1.0, 1.0], "b": [3.0, 3.0]}  # runs that agree within each task: every resample is the same
    assert stats.iqm_difference_interval({t: [v + 10 for v in r] for t, r in steady.items()}, steady,
                                         reps=1000) == pytest.approx((10.0, 10.0, 10.0))
