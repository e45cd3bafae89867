"""Parameter importances and PNG figures of a study (optimisation history, importances, parallel
coordinates), drawn with Optuna's matplotlib backend."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from rlcli.runs.checkpoint import atomic_write

PLOTS = ("optimization_history.png", "param_importances.png", "parallel_coordinate.png")


def importances(study: Any) -> dict[str, float]:
    """Each sampled parameter's share of the objective's variation (PED-ANOVA, which needs no
    scikit-learn), largest first; empty while fewer than two trials are complete or nothing varied."""
    import optuna

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study, evaluator=evaluator).items()}
    except (ValueError, RuntimeError, ZeroDivisionError):
        return {}


def save_plots(study: Any, directory: Path) -> list[Path]:
    """Writes the figures that the study's trials allow into ``directory``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as figures

    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    makers = {
        PLOTS[0]: lambda: figures.plot_optimization_history(study),
        PLOTS[1]: lambda: figures.plot_param_importances(study, evaluator=evaluator),
        PLOTS[2]: lambda: figures.plot_parallel_coordinate(study),
    }
    written = []
    for name, make in makers.items():
        path = directory / name
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                axes = make()
        except (ValueError, RuntimeError, ZeroDivisionError, IndexError, KeyError):
            path.unlink(missing_ok=True)  # a figure from an earlier run would describe other trials
            continue
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.set_size_inches(10, 6)
        # rendered in memory, then written atomically: a reader (or a second process summarising the
        # same study) never sees half a PNG
        png = io.BytesIO()
        try:
            figure.savefig(png, format="png", dpi=100, bbox_inches="tight")
        finally:
            plt.close(figure)
        atomic_write(path, png.getvalue())
        written.append(path)
    return written
