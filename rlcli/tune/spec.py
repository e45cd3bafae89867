"""What a tuning study is: the settings every worker shares (``TuneSpec``), and where a study lives."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rlcli.algos import DEFAULT
from rlcli.config import BackendName, Frozen
from rlcli.share.names import safe_name
from rlcli.tune.space import SearchSpace

SAMPLERS = ("tpe", "random", "cmaes")
PRUNERS = ("median", "halving", "none")
BEST, SUMMARY = "best.yml", "summary.json"
# what a study's folder holds once it has run (with the plots): any of them marks one
STUDY_FILES = ("study.db", "trials", "workers", BEST, SUMMARY)
# settings that change what a trial's value means; a study continues only with the same ones
RESULT_SETTINGS = ("env_ids", "algo", "steps", "seeds_per_trial", "evaluations", "eval_episodes", "backend",
                   "seed", "space")


class TuneSpec(Frozen):
    """Everything a tuning worker needs; sent as JSON to worker processes."""

    env_ids: tuple[str, ...]
    algo: str = DEFAULT  # a registered algorithm (rlcli.algos)
    trials: Annotated[int, Field(gt=0)] = 50  # the study's total, over every run of the command
    steps: Annotated[int, Field(gt=0)] = 100_000  # env steps per training run
    seeds_per_trial: Annotated[int, Field(gt=0)] = 1
    sampler: Literal["tpe", "random", "cmaes"] = "tpe"
    pruner: Literal["median", "halving", "none"] = "median"
    startup_trials: Annotated[int, Field(ge=0)] = 5  # sampled at random and never pruned
    evaluations: Annotated[int, Field(gt=0)] = 10  # periodic evaluations per run, each reported to the pruner
    eval_episodes: Annotated[int, Field(gt=0)] = 10
    study_dir: Path
    study_name: str
    storage: str
    space: dict[str, Any]
    space_source: str = "built-in"
    jobs: Annotated[int, Field(gt=0)] = 1
    threads: Annotated[int, Field(gt=0)] | None = None  # torch (and envpool) threads per worker
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: BackendName = "auto"
    env_module: str | None = None
    seed: int = 0

    def search_space(self) -> SearchSpace:
        return SearchSpace(self.algo, self.space, self.space_source)

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(mode="json").items() if k in RESULT_SETTINGS}


def default_study_dir(env_ids: tuple[str, ...], algo: str, root: Path = Path("tunes")) -> Path:
    """``tunes/ENV__ALGO`` (several envs joined by ``+``; ids like ``ALE/Pong-v5`` made path-safe)."""
    return root / f"{'+'.join(safe_name(e) for e in env_ids)}__{algo}"
