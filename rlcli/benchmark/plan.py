"""What a benchmark runs: suites, the algorithm x env x seed grid, each run's budget and directory.

Planning validates everything it can before any run starts (env ids, suite names, ``-p`` overrides,
whether each algorithm can act in each env), so that a typo is one line and exit code 2, not a grid of
failed runs.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError

from rlcli.algos import resolve
from rlcli.algos.threads import available_cores
from rlcli.config import MAX_SEED, BackendName, Frozen, RunConfig, data_dir, deep_merge, parse_overrides
from rlcli.envs import make_vec_env
from rlcli.errors import UsageError
from rlcli.share.names import safe_name
from rlcli.training.agents import check_spaces

RUNS_DIR = "runs"
DEFAULT_ROOT = Path("benchmarks")
RUN_MEMORY_GIB = 2.0  # what one run is assumed to need when choosing the default number of workers


class Suite(Frozen):
    """A named set of env ids (``rlcli/data/suites.yml``)."""

    description: str = ""
    envs: tuple[str, ...]
    # False declares that its tasks have no row in normalization.csv (the suites test holds the two together), so
    # that no one adds a made-up reference: a report leaves them out of the normalised aggregate
    normalized: bool = True
    # memory one of its runs takes with its entries' env counts, for the default number of workers
    run_memory_gib: Annotated[float, Field(gt=0)] = RUN_MEMORY_GIB


class TrainOptions(Frozen):
    """What every run of a benchmark passes to ``rlcli train``."""

    params: tuple[str, ...] = ()  # -p key=value overrides, in order
    backend: BackendName = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: Annotated[int, Field(gt=0)] = 1  # torch (and OpenMP/BLAS) threads per run
    env_module: str | None = None
    eval_episodes: Annotated[int, Field(gt=0)] = 10
    eval_every: Annotated[int, Field(ge=0)] | None = None  # env steps; None: train's default (budget / 20)
    # processes that train each run together (``rlcli train --nproc``), each with ``threads`` threads and its
    # own envs: the run's global batch is nproc times the configured one
    nproc: Annotated[int, Field(gt=0)] = 1
    # off-policy runs also checkpoint their replay buffer, so a stopped benchmark resumes them with their data
    save_buffer: bool = False

    @property
    def cpus(self) -> int:
        """The cores one run takes: ``threads`` for each of its processes."""
        return self.threads * self.nproc


class RunSpec(Frozen):
    """One run of the grid. ``steps`` is its budget in env steps."""

    algo: str
    env_id: str
    seed: int
    steps: Annotated[int, Field(gt=0)]

    @property
    def name(self) -> str:
        """Directory name under ``runs/``: ``ENV__ALGO__sSEED`` with the id made path-safe."""
        return f"{safe_name(self.env_id)}__{self.algo}__s{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.algo} {self.env_id} seed {self.seed}"


class BenchmarkPlan(Frozen):
    directory: Path
    runs: tuple[RunSpec, ...]
    options: TrainOptions
    skipped: tuple[str, ...] = ()  # "sac on CartPole-v1: ..." for pairs an algorithm cannot act in

    def run_dir(self, run: RunSpec) -> Path:
        return self.directory / RUNS_DIR / run.name


def load_suites() -> dict[str, Suite]:
    """The suites shipped in ``rlcli/data/suites.yml``, by name."""
    raw = yaml.safe_load((data_dir() / "suites.yml").read_text()) or {}
    try:
        return {name: Suite.model_validate(body) for name, body in raw.items()}
    except ValidationError as e:  # a broken data file is a bug, not the user's input
        raise RuntimeError(f"rlcli/data/suites.yml: {e}") from None


def expand_envs(tokens: list[str]) -> list[str]:
    """The ``--envs`` tokens with each suite name replaced by its env ids, in order, without repeats."""
    suites = load_suites()
    envs: list[str] = []
    for token in tokens:
        envs.extend(suites[token].envs if token in suites else [token])
    return list(dict.fromkeys(envs))


def resolve_token(algo: str, token: str, options: TrainOptions, overrides: dict[str, Any]) -> RunConfig:
    """The run of ``algo`` on one ``--envs`` entry; a token that is no env id is a UsageError naming close
    suites or env ids."""
    try:
        return resolve(algo, token, backend=options.backend, env_module=options.env_module, overrides=overrides)
    except UsageError as e:
        if not str(e).startswith(("unknown environment", "unknown env")):
            raise
        suites = list(load_suites())
        close = difflib.get_close_matches(token, suites, n=1, cutoff=0.6)
        if close:
            raise UsageError(f"unknown suite or environment '{token}'; did you mean {close[0]}?") from None
        raise UsageError(f"{e} (suites: {', '.join(suites)})") from None


def _incompatible(algos: list[str], env_id: str, backend: str) -> dict[str, str]:
    """{algo: reason} for the algorithms that cannot act in ``env_id``'s spaces."""
    env = make_vec_env(env_id, 1, 0, backend)
    try:
        reasons = {}
        for algo in algos:
            try:
                check_spaces(algo, env)
            except UsageError as e:
                reasons[algo] = str(e).split(". ")[0]
        return reasons
    finally:
        env.close()


def plan_benchmark(algos: list[str], env_tokens: list[str], seeds: list[int], options: TrainOptions,
                   steps: int | None = None, directory: Path | None = None) -> BenchmarkPlan:
    """The grid algos x envs x seeds, each run with its budget (``steps``, else the tuned one in
    ``hyperparams/{algo}.yml``), checked before anything runs."""
    if not env_tokens:
        raise UsageError("missing --envs: give env ids or suites (e.g. --envs classic CartPole-v1)")
    if not seeds:
        raise UsageError("--seeds needs at least one seed")
    if any(seed < 0 for seed in seeds):
        raise UsageError(f"--seeds must be 0 or more (environments refuse negative seeds), got {min(seeds)}")
    if any(seed > MAX_SEED for seed in seeds):
        raise UsageError(f"--seeds must be at most {MAX_SEED} (numpy's seeds are 32-bit), got {max(seeds)}")
    if steps is not None and steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if directory is not None:
        check_directory(directory)
    algos = list(dict.fromkeys(algos))
    seeds = list(dict.fromkeys(seeds))
    overrides = parse_overrides(list(options.params))
    if steps is not None:
        overrides = deep_merge(overrides, {"steps": steps})
    runs: list[RunSpec] = []
    skipped: list[str] = []
    envs: list[str] = []
    for token in expand_envs(env_tokens):
        first = resolve_token(algos[0], token, options, overrides)
        env_id = first.env.id
        if env_id in envs:
            continue
        envs.append(env_id)
        reasons = _incompatible(algos, env_id, options.backend)
        skipped.extend(f"{algo} on {env_id}: {reason}" for algo, reason in reasons.items())
        for algo in (a for a in algos if a not in reasons):
            cfg = first if algo == algos[0] else resolve_token(algo, env_id, options, overrides)
            runs.extend(RunSpec(algo=algo, env_id=env_id, seed=seed, steps=cfg.algo.steps) for seed in seeds)
    if not runs:
        raise UsageError("nothing to run: " + "; ".join(skipped))
    runs.sort(key=lambda r: (algos.index(r.algo), envs.index(r.env_id), seeds.index(r.seed)))
    return BenchmarkPlan(directory=directory or default_directory(algos, env_tokens, steps), runs=tuple(runs),
                         options=options, skipped=tuple(skipped))


def check_directory(directory: Path) -> None:
    """A UsageError unless ``directory`` is a directory or could be made one (no file in the way)."""
    for path in (directory, *directory.parents):
        if path.exists():
            if not path.is_dir():
                what = "is a file" if path == directory else f"is inside {path}, which is a file"
                raise UsageError(f"--out {directory} {what}; give a directory for the benchmark")
            return


def default_directory(algos: list[str], env_tokens: list[str], steps: int | None) -> Path:
    """``benchmarks/ALGOS__ENVS__STEPS``: the same command always finds the same directory (and so
    resumes); seeds are left out so that more seeds can be added to a benchmark later."""
    name = f"{'+'.join(algos)}__{'+'.join(safe_name(t) for t in env_tokens)}__{steps or 'tuned'}"
    if len(name) > 100:
        name = f"{'+'.join(algos)}__{hashlib.sha1(name.encode()).hexdigest()[:10]}__{steps or 'tuned'}"
    return DEFAULT_ROOT / name


def run_memory_gib(env_ids: list[str]) -> float:
    """The memory the largest of these envs' runs takes: for each env the most any suite holding it states,
    ``RUN_MEMORY_GIB`` where no suite holds it."""
    suites = load_suites().values()
    return max((max((s.run_memory_gib for s in suites if env_id in s.envs), default=RUN_MEMORY_GIB)
                for env_id in env_ids), default=RUN_MEMORY_GIB)


def default_workers(threads: int, run_memory: float = RUN_MEMORY_GIB) -> int:
    """Runs at once that this machine can hold: cores / threads per run, and at most one run per
    ``run_memory`` GiB of memory; at least 1 (1 where the memory cannot be read)."""

    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = run_memory
    return max(1, min(available_cores() // threads, int(memory_gib // run_memory)))
