"""From what ``rlcli tune`` was asked to the TuneSpec of its study: every check that can fail before a trial
runs (packages, env ids, the search space against each env, the envs' scores), then the study directory."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rlcli.algos import hyperparams_for, resolve
from rlcli.config import MAX_SEED, RunConfig
from rlcli.envs import env_group
from rlcli.errors import UsageError
from rlcli.runs.folders import check_own_folder
from rlcli.training.agents import check_env_fits
from rlcli.tune.objective import check_normalisable
from rlcli.tune.space import default_space, load_space
from rlcli.tune.spec import STUDY_FILES, TuneSpec, default_study_dir
from rlcli.tune.storage import redact


def check_packages(sampler: str) -> None:
    """A UsageError naming the package to install when Optuna (or CMA-ES for its sampler) is missing."""
    needed = [("optuna", "rlcli tune")] + ([("cmaes", "--sampler cmaes")] if sampler == "cmaes" else [])
    for module, why in needed:
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"{why} needs the '{module}' package: pip install 'rlcli[tune]'")


def plan_study(env_ids: list[str], algo: str, *, space_file: Path | None, steps: int | None, out: Path | None,
               storage: str | None, study_name: str | None, threads: int | None, backend: str,
               env_module: str | None, **settings: Any) -> TuneSpec:
    """The spec of a study of ``algo`` on ``env_ids`` (duplicates dropped), once everything it names has
    been checked; its directory is made by whoever opens the study. ``steps`` defaults to the largest tuned
    budget of the envs, ``threads`` to 1 per worker with several jobs. ``settings``: the other TuneSpec fields,
    as given."""
    check_packages(settings.get("sampler", "tpe"))
    last_seed = settings.get("seed", 0) + settings.get("seeds_per_trial", 1) - 1  # a trial's seeds follow --seed
    if last_seed > MAX_SEED:
        raise UsageError(f"--seed {settings['seed']} with --seeds-per-trial {settings.get('seeds_per_trial', 1)} "
                         f"runs seeds up to {last_seed}, past the largest, {MAX_SEED}")
    runs: dict[str, RunConfig] = {}
    for env_id in env_ids:  # unknown ids fail here, with close matches
        cfg = resolve(algo, env_id, backend=backend, env_module=env_module)
        runs.setdefault(cfg.env.id, cfg)
    ids = tuple(runs)
    check_normalisable(ids)
    search = load_space(space_file, algo) if space_file is not None else default_space(algo)
    bases = {}
    for env_id, cfg in runs.items():
        bases[env_id] = hyperparams_for(algo, env_id, env_group(env_id))
        search.check(bases[env_id], f" for {env_id}" if len(ids) > 1 else "")
        check_env_fits(cfg)
    budget = steps if steps is not None else max(int(b.get("steps", 1_000_000)) for b in bases.values())
    directory = out or default_study_dir(ids, algo)
    check_own_folder(directory, "--out", STUDY_FILES, "a study's")
    jobs = settings.get("jobs", 1)
    return TuneSpec(env_ids=ids, algo=algo, steps=budget, study_dir=directory, study_name=study_name or directory.name,
                    storage=storage or f"sqlite:///{(directory / 'study.db').resolve()}", space=search.data,
                    space_source=search.source, threads=threads if threads is not None else (1 if jobs > 1 else None),
                    backend=backend, env_module=env_module, **settings)


def describe(spec: TuneSpec, done: int) -> str:
    """What the study is, in the line ``rlcli tune`` starts with; ``done``: the trials it already counts."""
    threads = f" x {spec.threads} thread(s)" if spec.threads else ""
    return (f"Tuning {' '.join(spec.env_ids)} with {spec.algo}: {spec.trials} trials ({done} done) of {spec.steps:,} "
            f"steps x {spec.seeds_per_trial} seed(s), sampler {spec.sampler}, pruner {spec.pruner}, {spec.jobs} job(s)"
            f"{threads} -> {spec.study_dir} ({redact(spec.storage)})")
