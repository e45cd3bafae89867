"""The benchmark report (``report.md`` + PNG figures) and the side-by-side comparison of two benchmarks.

Per env: the final evaluated return as mean ± std across seeds (population std, as the published
numbers beside it are computed), the best evaluation, and the published score for the same algorithm,
env and budget. Learning curves: per env, the mean over seeds with a ±1 std band. Aggregates across
envs: IQM, median, mean and optimality gap of normalised scores with 95% stratified-bootstrap
intervals (``rlcli.benchmark.stats``). A comparison adds the probability of improvement and the difference of
IQMs, each with its interval.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from rlcli.benchmark import stats
from rlcli.benchmark.plan import safe_name
from rlcli.benchmark.results import RunResult
from rlcli.benchmark.scores import normalization_for, published_elsewhere, published_for
from rlcli.errors import UsageError
from rlcli.runs import checkpoint

REPORT, FIGURES = "report.md", "figures"
BOOTSTRAP_REPS = 10_000
CONFIDENCE = 0.95


# ---------------------------------------------------------------------------------------------------
# Formatting


def number(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}"


def plus_minus(mean: float, std: float | None) -> str:
    """``mean ± std``, both with the decimals that suit the mean (just the mean without a std)."""
    decimals = 0 if abs(mean) >= 1000 else 1 if abs(mean) >= 100 else 2
    return f"{mean:,.{decimals}f}" + (f" ± {std:,.{decimals}f}" if std is not None else "")


def mean_std(values: list[float]) -> str:
    """Mean ± population std of ``values``."""
    return plus_minus(float(np.mean(values)), float(np.std(values))) if values else "—"


def steps_range(steps: list[int]) -> str:
    """``100,352``, or ``min–max`` where runs trained for different numbers of steps."""
    if not steps:
        return "—"
    low, high = min(steps), max(steps)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def interval_text(i: stats.Interval) -> str:
    return f"{i.estimate:.3f} [{i.low:.3f}, {i.high:.3f}]"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _ordered(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _finished(rows: list[RunResult]) -> list[RunResult]:
    return [r for r in rows if r.status == "finished" and r.final_return is not None]


def _published_text(algo: str, env_id: str, budget: int) -> str:
    same = published_for(algo, env_id, budget)
    if same:
        return "; ".join(f"{plus_minus(p.mean, p.std)} ({p.source}, {p.env}-{p.env_version}, "
                         f"{p.seeds or '?'} seed{'s' * (p.seeds != 1)}, {p.return_kind})" for p in same)
    other = published_elsewhere(algo, env_id)
    if other:
        return "— (" + "; ".join(f"{p.source}: {number(p.mean)} at {p.steps:,}, {p.return_kind}" for p in other) + ")"
    return "—"


def normalized_scores(rows: list[RunResult]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Normalised final returns of finished runs by env, and the envs left out for want of a normalisation."""
    by_env: dict[str, list[float]] = {}
    missing = []
    for env_id in _ordered(r.env_id for r in rows):
        norm = normalization_for(env_id)
        finals = [r.final_return for r in _finished(rows) if r.env_id == env_id]
        if norm is None:
            missing.append(env_id)
        elif finals:
            by_env[env_id] = np.array([stats.normalize(f, norm.random, norm.reference) for f in finals])
    return by_env, missing


# ---------------------------------------------------------------------------------------------------
# Figures


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:  # noqa: ANN001  (a matplotlib Figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    checkpoint.atomic_write(path, buffer.getvalue())


def mean_curve(curves: list[tuple[tuple[int, float], ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean and std across runs of evaluation curves, each interpolated onto the union of their
    steps within its own range (a shorter, unfinished run counts only where it has data)."""
    curves = [c for c in curves if c]
    if not curves:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    grid = np.unique(np.concatenate([[s for s, _ in c] for c in curves]))
    values = np.full((len(curves), grid.size), np.nan)
    for i, curve in enumerate(curves):
        steps, returns = np.array([s for s, _ in curve], dtype=float), np.array([v for _, v in curve])
        inside = (grid >= steps[0]) & (grid <= steps[-1])
        values[i, inside] = np.interp(grid[inside], steps, returns)
    return grid, np.nanmean(values, axis=0), np.nanstd(values, axis=0)


def plot_curves(rows: list[RunResult], env_id: str, path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for algo in _ordered(r.algo for r in rows):
        runs = [r for r in rows if r.algo == algo and r.env_id == env_id]
        steps, mean, std = mean_curve([r.curve for r in runs])
        if steps.size == 0:
            continue
        line, = ax.plot(steps, mean, label=f"{algo} ({sum(1 for r in runs if r.curve)} seeds)")
        ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.25, linewidth=0)
        for p in published_for(algo, env_id, max(r.budget for r in runs)):
            ax.axhline(p.mean, color=line.get_color(), linestyle=":", linewidth=1,
                       label=f"{algo} published ({p.source}, {p.env_version})")
    ax.set_title(env_id)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no evaluation yet", ha="center", va="center", transform=ax.transAxes)
    _save(fig, path)
    plt.close(fig)
    return True


def plot_aggregates(intervals: dict[str, dict[str, stats.Interval]], path: Path) -> bool:
    """rliable-style interval estimates: one panel per metric, one row per algorithm."""
    plt = _pyplot()
    if plt is None:
        return False
    algos = list(intervals)
    metrics = list(stats.AGGREGATES)
    fig, axes = plt.subplots(1, len(metrics), figsize=(3 * len(metrics), 0.5 * len(algos) + 1.4), sharey=True,
                             constrained_layout=True)
    for ax, metric in zip(axes, metrics, strict=True):
        lows = [intervals[a][metric].low for a in algos]
        highs = [intervals[a][metric].high for a in algos]
        pad = max(0.1 * (max(highs) - min(lows)), 0.05)
        for y, algo in enumerate(algos):
            i = intervals[algo][metric]
            ax.barh(y, i.high - i.low, left=i.low, height=0.5, alpha=0.5, color=f"C{y}")
            ax.plot([i.estimate, i.estimate], [y - 0.25, y + 0.25], color="black", linewidth=1.5)
        ax.set_xlim(min(lows) - pad, max(highs) + pad)
        ax.set_ylim(-0.6, len(algos) - 0.4)
        ax.ticklabel_format(axis="x", useOffset=False, style="plain")
        ax.set_title(metric)
        ax.set_yticks(range(len(algos)), algos)
        ax.grid(axis="x", alpha=0.3)
    fig.supxlabel("normalised score (95% stratified bootstrap interval)")
    _save(fig, path)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------------
# The report


def write_report(results: list[RunResult], directory: Path, reps: int = BOOTSTRAP_REPS) -> Path:
    """``report.md`` and ``figures/*.png`` in ``directory``; returns the report's path."""
    if not results:
        raise UsageError(f"{directory} has no runs to report on")
    figures = directory / FIGURES
    envs = _ordered(r.env_id for r in results)
    algos = _ordered(r.algo for r in results)
    finished = _finished(results)
    failed = [r for r in results if r.status == "failed"]
    seeds = sorted({r.seed for r in results})
    lines = [f"# Benchmark: {', '.join(algos)} on {', '.join(envs)}", "",
             f"{len(results)} runs ({len(finished)} finished, {len(failed)} failed, "
             f"{len(results) - len(finished) - len(failed)} not finished); seeds {', '.join(map(str, seeds))}. "
             "Returns are deterministic-policy evaluation returns (the game's own score). "
             "Remake with `rlcli benchmark report DIR`.", ""]

    lines += ["## Final return per environment", "",
              "Mean ± std across seeds of each run's last evaluation (and of its best one), made at the "
              "steps trained (the budget rounded up to whole rollouts). Published: "
              "the same algorithm and env at the same budget in env steps (other budgets in brackets); "
              "env versions differ between sources, and so does the kind of return (training: the learning "
              "policy's own episodes; eval: separate evaluation episodes); sources at the end.", ""]
    rows = []
    for env_id in envs:
        for algo in algos:
            group = [r for r in results if r.env_id == env_id and r.algo == algo]
            if not group:
                continue
            done = _finished(group)
            budget = max(r.budget for r in group)
            count = f"{len(done)}" if len(done) == len(group) else f"{len(done)} of {len(group)}"
            rows.append([env_id, algo, f"{budget:,}", steps_range([r.steps for r in done]), count,
                         mean_std([r.final_return for r in done]),
                         mean_std([r.best_return for r in done if r.best_return is not None]),
                         _published_text(algo, env_id, budget)])
    lines += _table(["env", "algo", "budget", "steps trained", "seeds", "final return", "best return", "published"],
                    rows)

    lines += ["", "## Learning curves", "", "Mean evaluation return across seeds, shaded ±1 std.", ""]
    for env_id in envs:
        path = figures / f"curves_{safe_name(env_id)}.png"
        if plot_curves(results, env_id, path):
            lines += [f"![{env_id}]({FIGURES}/{path.name})", ""]
        else:
            lines += [f"({env_id}: no figure; install matplotlib for the learning curves)", ""]

    lines += _aggregate_section(results, algos, figures, reps)

    lines += ["", "## Runs", ""]
    lines += ["Training time and steps/s as `rlcli train` measures them; process: wall-clock seconds of the "
              "run's processes, start-up and every attempt included.", ""]
    lines += _table(["algo", "env", "seed", "status", "steps", "final", "best", "training (s)", "steps/s",
                     "process (s)", "error"],
                    [[r.algo, r.env_id, str(r.seed), r.status, f"{r.steps:,}", number(r.final_return),
                      number(r.best_return), number(r.wall_time_s), number(r.sps), number(r.process_s),
                      r.error or ""] for r in results])
    lines += _sources_section(results)
    lines += ["", "## Versions", ""]
    for versions in _ordered(", ".join(f"{k} {v}" for k, v in r.versions.items()) for r in results if r.versions):
        lines.append(f"- {versions}")
    commits = sorted({r.git_commit for r in results if r.git_commit})
    if commits:
        lines.append(f"- git commit {', '.join(commits)}")
    path = directory / REPORT
    checkpoint.atomic_write(path, ("\n".join(lines) + "\n").encode())
    return path


def _sources_section(results: list[RunResult]) -> list[str]:
    shown = {(p.source, p.url): p for r in results for p in published_elsewhere(r.algo, r.env_id)}
    if not shown:
        return []
    return ["", "## Published scores: sources", ""] + [
        f"- {p.source}: [{p.where}]({p.url})" + (f" at commit {p.commit[:10]}" if p.commit else "")
        for p in shown.values()]


def _aggregate_section(results: list[RunResult], algos: list[str], figures: Path, reps: int) -> list[str]:
    lines = ["## Aggregate metrics", "",
             "Normalised score = (return − random) / (reference − random) per env (sources below). IQM: mean "
             "of the middle 50% of all runs' scores; median and mean: of the per-env means; optimality gap: "
             f"1 − mean(min(score, 1)). Brackets: {CONFIDENCE:.0%} stratified bootstrap intervals "
             f"({reps:,} resamples).", ""]
    intervals: dict[str, dict[str, stats.Interval]] = {}
    rows, used, missing = [], [], []
    by_algo: dict[str, dict[str, np.ndarray]] = {}
    for algo in algos:
        scores, left_out = normalized_scores([r for r in results if r.algo == algo])
        missing += left_out
        if scores:
            by_algo[algo] = scores
    # algorithms are compared on the same envs: SAC, say, skips the discrete ones PPO ran
    shared = [e for e in _ordered(e for scores in by_algo.values() for e in scores)
              if all(e in scores for scores in by_algo.values())]
    apart = [e for e in _ordered(e for scores in by_algo.values() for e in scores) if e not in shared]
    if len(by_algo) > 1 and shared:
        by_algo = {algo: {e: scores[e] for e in shared} for algo, scores in by_algo.items()}
        lines += [f"Over the {len(shared)} env(s) every algorithm ran: {', '.join(shared)}"
                  + (f"; left out, not run by every algorithm: {', '.join(apart)}." if apart else "."), ""]
    elif len(by_algo) > 1:
        lines += ["The algorithms share no env: each row aggregates its own envs, and the rows are not comparable.",
                  ""]
    for algo, scores in by_algo.items():
        used += list(scores)
        intervals[algo] = stats.aggregate_intervals(scores, reps=reps, confidence=CONFIDENCE)
        rows.append([algo, *(interval_text(i) for i in intervals[algo].values()), str(len(scores)),
                     str(sum(s.size for s in scores.values()))])
    if not intervals:
        return lines + ["No finished run on an env with a normalisation (rlcli/data/normalization.csv)."]
    lines += _table(["algo", *stats.AGGREGATES, "envs", "runs"], rows)
    if plot_aggregates(intervals, figures / "aggregate.png"):
        lines += ["", f"![aggregate metrics]({FIGURES}/aggregate.png)"]
    if missing:
        lines += ["", f"Left out (no normalisation): {', '.join(_ordered(missing))}."]
    lines += ["", "Normalisation:", ""]
    norms = [n for n in (normalization_for(e) for e in _ordered(used)) if n is not None]
    lines += _table(["env", "random", "reference", "source of random", "source of reference"],
                    [[n.env_id, number(n.random), f"{number(n.reference)} ({n.reference_kind})", n.random_source,
                      n.reference_source] for n in norms])
    return lines


# ---------------------------------------------------------------------------------------------------
# Comparing two benchmarks


def compare(results_a: list[RunResult], results_b: list[RunResult], label_a: str, label_b: str,
            reps: int = BOOTSTRAP_REPS) -> str:
    """Markdown comparing A with B for each algorithm both ran, on the envs both have: final returns
    side by side, P(A > B) with its interval, and IQM(A) − IQM(B) on normalised scores with its interval."""
    algos = [a for a in _ordered(r.algo for r in results_a) if a in {r.algo for r in results_b}]
    lines = [f"# {label_a} (A) vs {label_b} (B)", "",
             "P(A > B): probability that a run of A beats a run of B on the same env (ties count half), "
             "averaged over envs. IQM difference: on normalised scores. Brackets: "
             f"{CONFIDENCE:.0%} stratified bootstrap intervals ({reps:,} resamples), A and B resampled "
             "independently within each env.", ""]
    compared = False
    for algo in algos:
        a = _finished([r for r in results_a if r.algo == algo])
        b = _finished([r for r in results_b if r.algo == algo])
        envs = [e for e in _ordered(r.env_id for r in a) if e in {r.env_id for r in b}]
        if not envs:
            continue
        compared = True
        lines += [f"## {algo}", ""]
        rows = []
        for env_id in envs:
            fa = [r for r in a if r.env_id == env_id]
            fb = [r for r in b if r.env_id == env_id]
            rows.append([env_id, f"{max(r.budget for r in fa):,}", mean_std([r.final_return for r in fa]),
                         str(len(fa)), f"{max(r.budget for r in fb):,}", mean_std([r.final_return for r in fb]),
                         str(len(fb))])
        lines += _table(["env", "budget A", "A final return", "A seeds", "budget B", "B final return", "B seeds"],
                        rows)
        raw_a = {e: [r.final_return for r in a if r.env_id == e] for e in envs}
        raw_b = {e: [r.final_return for r in b if r.env_id == e] for e in envs}
        poi = stats.probability_of_improvement_interval(raw_a, raw_b, reps=reps, confidence=CONFIDENCE)
        lines += ["", f"- P(A > B) over {len(envs)} envs: {interval_text(poi)}"]
        norm_a, _ = normalized_scores([r for r in a if r.env_id in envs])
        norm_b, _ = normalized_scores([r for r in b if r.env_id in envs])
        common = [e for e in norm_a if e in norm_b]
        if common:
            diff = stats.iqm_difference_interval({e: norm_a[e] for e in common}, {e: norm_b[e] for e in common},
                                                 reps=reps, confidence=CONFIDENCE)
            lines.append(f"- IQM(A) − IQM(B) over {len(common)} normalised envs: {interval_text(diff)}")
        else:
            lines.append("- IQM difference: no env with a normalisation in common")
        lines.append("")
    if not compared:
        raise UsageError(f"{label_a} and {label_b} have no finished runs of the same algorithm on the same env")
    return "\n".join(lines)
