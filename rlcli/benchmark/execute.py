"""Executing a benchmark's runs: each one a separate ``rlcli train`` process, locally or as a Ray task.

Every run has its own directory ``BENCH/runs/ENV__ALGO__sSEED``: the usual run directory of ``rlcli
train``, plus ``train.log`` (the process's output, every attempt) and ``benchmark-run.json`` (what was
run, how it ended, the last line of its error). Re-running a benchmark keeps finished runs, resumes the
ones with a checkpoint and starts the others again; a run that fails does not stop the others.

Locally each run is a job of the supervisor that tune shares (``rlcli.jobs.workers``): limited to ``threads``
torch/OpenMP/BLAS threads so that runs do not fight over cores, stopped on Ctrl-C with a checkpoint. On
Ray, a task declares ``num_cpus=threads`` (times ``nproc`` for a run trained by several processes, which the
task's ``rlcli train --nproc`` starts; and ``num_gpus``) and trains in a temporary directory on whichever
node runs it; the run directory travels to the task (to resume) and back (to be gathered under
``BENCH/runs``) as a tar archive, so the cluster needs no shared filesystem.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple

from rlcli.benchmark.plan import BenchmarkPlan, RunSpec, TrainOptions
from rlcli.config import Frozen
from rlcli.errors import UsageError
from rlcli.jobs import workers
from rlcli.jobs.processes import alive
from rlcli.runs import checkpoint

LOG, RECORD, PLAN, LOCK = "train.log", "benchmark-run.json", "benchmark.json", ".lock"
Status = Literal["pending", "running", "finished", "failed", "interrupted"]
Action = Literal["done", "resume", "new"]


class RunRecord(Frozen):
    """``benchmark-run.json``: a run's identity and how its last attempt ended."""

    algo: str
    env_id: str
    seed: int
    steps: int  # budget in env steps
    status: Status = "pending"
    attempts: int = 0
    returncode: int | None = None
    error: str | None = None  # the last line the failed process wrote
    process_s: float = 0.0  # wall-clock seconds of every attempt, process start-up included
    # the options that change what a result means (-p, backend, evaluation, env module); a re-run with
    # others must not keep these results as its own
    settings: dict[str, Any] | None = None
    started_at: float | None = None  # unix time the last attempt started
    ended_at: float | None = None  # unix time the last attempt ended
    where: Literal["local", "ray"] = "local"
    pid: int | None = None  # the local training process while it runs
    command: tuple[str, ...] = ()

    @classmethod
    def of(cls, run: RunSpec) -> RunRecord:
        return cls(algo=run.algo, env_id=run.env_id, seed=run.seed, steps=run.steps)


class RunStatus(NamedTuple):
    """What executing ``run`` will do: keep it (``done``), ``resume`` it from ``step``, or start it (``new``)."""

    run: RunSpec
    action: Action
    step: int = 0


class BenchmarkInterrupted(Exception):
    """Ctrl-C during a benchmark; running runs were stopped with a checkpoint where they could save one."""

    def __init__(self, records: list[RunRecord]) -> None:
        super().__init__("benchmark interrupted")
        self.records = records


OnFinish = Callable[[RunSpec, RunRecord], None]
Notify = Callable[[str], None]  # a line for the user, such as what happens while running runs stop


# ---------------------------------------------------------------------------------------------------
# Run directories


def read_record(run_dir: Path) -> RunRecord | None:
    path = run_dir / RECORD
    if not path.is_file():
        return None
    try:
        return RunRecord.model_validate_json(path.read_text())
    except ValueError:
        return None


def write_record(run_dir: Path, record: RunRecord) -> None:
    checkpoint.write_json(run_dir / RECORD, record.model_dump(mode="json"))


def read_meta(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / checkpoint.META).read_text())
    except (OSError, ValueError):
        return {}


def has_checkpoint(run_dir: Path) -> bool:
    return all((run_dir / name).is_file() for name in (checkpoint.CONFIG, checkpoint.MODEL, checkpoint.META))


def run_statuses(plan: BenchmarkPlan) -> list[RunStatus]:
    """What executing the plan does with each run, given what its directory already holds. A run
    directory trained for another budget is a UsageError (the budget is part of what a result means)."""
    statuses = []
    for run in plan.runs:
        run_dir = plan.run_dir(run)
        record = read_record(run_dir)
        if record is not None and record.status == "running" and _still_training(record.pid, run_dir):
            raise UsageError(f"{run_dir} is still being trained by process {record.pid} (left running by a "
                             "benchmark that was killed); wait for it to end, or stop it, then run again")
        if record is not None and record.steps != run.steps:
            raise UsageError(f"{run_dir} holds a run with a budget of {record.steps:,} steps, not {run.steps:,}; "
                             "choose another --out for a different budget")
        settings = result_settings(plan.options)
        if record is not None and record.settings is not None and record.settings != settings:
            changed = ", ".join(f"{k} {record.settings.get(k)!r} -> {v!r}" for k, v in settings.items()
                                if record.settings.get(k) != v)
            raise UsageError(f"{run_dir} holds a run trained with other settings ({changed}); "
                             "choose another --out for these")
        if has_checkpoint(run_dir):
            meta = read_meta(run_dir)
            statuses.append(RunStatus(run, "done" if meta.get("finished") else "resume", int(meta.get("steps", 0))))
        else:
            statuses.append(RunStatus(run, "new"))
    return statuses


def _still_training(pid: int | None, run_dir: Path) -> bool:
    """Whether process ``pid`` is alive and (where /proc tells) an ``rlcli train`` of ``run_dir``."""
    if pid is None or not alive(pid):
        return False
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True
    return "rlcli" in command_line and run_dir.name in command_line


def _clear(run_dir: Path) -> None:
    """Empty a run directory for a fresh start, keeping its log and record."""
    if not run_dir.is_dir():
        return
    for path in run_dir.iterdir():
        if path.name in (LOG, RECORD):
            continue
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def train_command(run: RunSpec, options: TrainOptions, run_dir: Path, resume: bool) -> list[str]:
    """The ``rlcli train`` command line of one run (``resume``: continue the checkpoint in ``run_dir``)."""
    command = [sys.executable, "-m", "rlcli", "train"]
    common = ["--steps", str(run.steps), "--threads", str(options.threads), "--env-threads", str(options.threads),
              "--device", options.device, *(["--nproc", str(options.nproc)] if options.nproc > 1 else []),
              *(["--save-buffer"] if options.save_buffer else [])]
    if resume:
        return [*command, "--resume", str(run_dir), *common]
    command += [run.env_id, "--algo", run.algo, "--seed", str(run.seed), "--run-dir", str(run_dir), *common,
                "--backend", options.backend, "--eval-episodes", str(options.eval_episodes)]
    if options.eval_every is not None:
        command += ["--eval-every", str(options.eval_every)]
    if options.env_module:
        command += ["--env-module", options.env_module]
    for param in options.params:
        command += ["-p", param]
    return command


def _ended(run_dir: Path, record: RunRecord, returncode: int, output: str, seconds: float,
           stopping: bool) -> RunRecord:
    meta = read_meta(run_dir)
    if returncode == 0 and meta.get("finished"):
        status: Status = "finished"
        error = None
    elif stopping and returncode in (130, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL):
        status, error = "interrupted", "interrupted"
    elif returncode == 130:  # the run alone was stopped (its own Ctrl-C)
        status = "interrupted"
        error = ("interrupted on its own; re-run the benchmark to resume it" if has_checkpoint(run_dir) else
                 "interrupted on its own before its first checkpoint; re-run the benchmark to start it again")
    else:
        status = "failed"
        error = workers.last_line(output) if returncode >= 0 else f"killed by signal {-returncode}"
        error = error or f"exit code {returncode}"
    record = record.model_copy(update={"status": status, "returncode": returncode, "error": error, "pid": None,
                                       "process_s": record.process_s + seconds, "ended_at": time.time()})
    write_record(run_dir, record)
    return record


def result_settings(options: TrainOptions) -> dict[str, Any]:
    """The options that change what a run's result means (not threads or device, which change only speed;
    processes, which set the global batch, where there are several)."""
    return options.model_dump(mode="json", include={"params", "backend", "env_module", "eval_episodes", "eval_every",
                                                     *(["nproc"] if options.nproc > 1 else [])})


def _started(run_dir: Path, run: RunSpec, options: TrainOptions, command: Sequence[str],
             where: Literal["local", "ray"]) -> RunRecord:
    previous = read_record(run_dir) or RunRecord.of(run)
    record = previous.model_copy(update={"settings": result_settings(options), "status": "running",
                                         "attempts": previous.attempts + 1,
                                         "returncode": None, "error": None, "where": where,
                                         "command": tuple(command), "started_at": time.time(),
                                         "ended_at": None})
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, record)
    return record


def _log_header(record: RunRecord, command: Sequence[str]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"\n=== {stamp} attempt {record.attempts} ({record.where}): {' '.join(command)}\n"


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One benchmark process per directory at a time."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK, "w") as handle:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover  (not POSIX)
            pass
        except OSError:
            raise UsageError(f"another rlcli benchmark is running in {directory}") from None
        yield


# ---------------------------------------------------------------------------------------------------
# Executing


def execute(plan: BenchmarkPlan, workers: int, ray_address: str | None = None, gpus_per_run: float = 0.0,
            on_finish: OnFinish | None = None, notify: Notify | None = None) -> list[RunRecord]:
    """Runs every run of ``plan`` that is not finished yet, ``workers`` at a time (or on the Ray cluster at
    ``ray_address``); returns one record per run of the plan, in its order. ``on_finish`` is called in
    this thread as each run ends, ``notify`` with what happens while runs stop. Raises
    BenchmarkInterrupted on Ctrl-C, SIGTERM or SIGHUP, after the running runs saved (a second Ctrl-C
    terminates them, a third kills them)."""
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    with _locked(plan.directory):
        statuses = run_statuses(plan)
        checkpoint.write_json(plan.directory / PLAN, plan.model_dump(mode="json"))
        todo = [s for s in statuses if s.action != "done"]
        if ray_address is not None:
            ended = _execute_on_ray(plan, todo, ray_address, gpus_per_run, on_finish, notify)
        else:
            ended = _execute_locally(plan, todo, workers, on_finish, notify)
    kept = [(read_record(plan.run_dir(s.run)) or RunRecord.of(s.run)).model_copy(update={"status": "finished"})
            if s.action == "done" else None for s in statuses]
    return [ended.get(s.run) or k or RunRecord.of(s.run) for s, k in zip(statuses, kept, strict=True)]


def _execute_locally(plan: BenchmarkPlan, todo: list[RunStatus], at_once: int, on_finish: OnFinish | None,
                     notify: Notify | None) -> dict[RunSpec, RunRecord]:
    """Each run a job of the shared supervisor (``rlcli.jobs.workers``); its record follows the job's start and end."""
    runs = {s.run.name: s.run for s in todo}
    running: dict[RunSpec, RunRecord] = {}
    ended: dict[RunSpec, RunRecord] = {}

    def finished(run: RunSpec, record: RunRecord) -> None:
        ended[run] = record
        if on_finish:
            on_finish(run, record)

    def jobs() -> Iterator[workers.Job]:
        for status in todo:
            try:
                running[status.run], job = _prepare(plan, status)
            except Exception as e:  # a full disk, a directory that cannot be cleared: this run fails, not all
                finished(status.run, _failed(plan.run_dir(status.run), status.run, f"{type(e).__name__}: {e}"))
                continue
            yield job

    def started(job: workers.Job, pid: int) -> None:
        run = runs[job.name]
        running[run] = running[run].model_copy(update={"pid": pid})
        write_record(plan.run_dir(run), running[run])

    def done(end: workers.Ended) -> None:
        run = runs[end.job.name]
        if end.returncode is None:
            finished(run, _failed(plan.run_dir(run), run, end.error or "it did not start"))
        else:
            finished(run, _ended(plan.run_dir(run), running[run], end.returncode, end.output, end.seconds,
                                 end.stopping))

    def stopping(sent: signal.Signals, live: int) -> None:
        if notify and sent != signal.SIGINT:
            notify(f"Sent {sent.name} to the running runs.")
        elif notify and live:
            notify(f"Stopping {live} running run(s), each saves a checkpoint; Ctrl-C again to terminate them.")

    try:
        workers.supervise(jobs(), at_once, on_start=started, on_end=done, on_stop=stopping)
    except workers.Stopped:
        raise BenchmarkInterrupted(list(ended.values())) from None
    return ended


def _prepare(plan: BenchmarkPlan, status: RunStatus) -> tuple[RunRecord, workers.Job]:
    """The run's directory made ready (emptied for a fresh start), its record of this attempt, and its job."""
    run, run_dir = status.run, plan.run_dir(status.run)
    resume = status.action == "resume"
    command = train_command(run, plan.options, run_dir, resume)
    if not resume:
        _clear(run_dir)
    record = _started(run_dir, run, plan.options, command, "local")
    header = _log_header(record, command)
    return record, workers.Job(run.name, tuple(command), plan.options.threads, run_dir / LOG, header)


def _failed(run_dir: Path, run: RunSpec, error: str) -> RunRecord:
    """Records a run that could not start."""
    record = (read_record(run_dir) or RunRecord.of(run)).model_copy(update={"status": "failed", "error": error})
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, record)
    return record


# ---------------------------------------------------------------------------------------------------
# Ray


def pack(run_dir: Path) -> bytes:
    """A run directory (without the benchmark's log and record) as gzipped tar bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(run_dir.iterdir()):
            if path.name not in (LOG, RECORD):
                tar.add(path, arcname=path.name)
    return buffer.getvalue()


def unpack(data: bytes, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(run_dir, **safe)  # type: ignore[arg-type]


class RemoteResult(NamedTuple):
    returncode: int | None  # None: the task did not start training (the benchmark was being stopped)
    output: str
    archive: bytes | None  # the run directory after training
    seconds: float


def train_in_temporary_directory(run: RunSpec, options: TrainOptions, archive: bytes | None,
                                 stop_level: Any = None) -> RemoteResult:
    """The body of a Ray task: train (or resume from ``archive``) in a temporary directory on this node
    and return the process's output and the run directory. ``stop_level``: a StopLevel actor handle."""
    def level() -> int:
        if stop_level is None:
            return 0
        import ray

        return int(ray.get(stop_level.get.remote()))

    if level():
        return RemoteResult(None, "", archive, 0.0)
    with tempfile.TemporaryDirectory(prefix="rlcli-benchmark-") as tmp:
        run_dir = Path(tmp) / run.name
        if archive is not None:
            unpack(archive, run_dir)
        command = train_command(run, options, run_dir, resume=archive is not None)
        job_end = workers.run_until_stopped(workers.Job(run.name, tuple(command), options.threads), level)
        archive = pack(run_dir) if run_dir.is_dir() else None
        return RemoteResult(job_end.returncode, job_end.output, archive, job_end.seconds)


def _connect_to_ray(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (unless this process already is)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'rlcli[ray]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UsageError(f"--ray {address}: cannot connect to a Ray cluster there ({e})") from None
    return ray


def _execute_on_ray(plan: BenchmarkPlan, todo: list[RunStatus], address: str, gpus_per_run: float,
                    on_finish: OnFinish | None, notify: Notify | None) -> dict[RunSpec, RunRecord]:
    ray = _connect_to_ray(address)
    task = ray.remote(train_in_temporary_directory).options(
        num_cpus=plan.options.cpus, num_gpus=gpus_per_run, max_retries=0)
    stop_level = ray.remote(workers.StopLevel).options(num_cpus=0).remote()
    pending: dict[Any, tuple[RunSpec, RunRecord, list[str], RunRecord | None]] = {}
    ended: dict[RunSpec, RunRecord] = {}
    stopping = False

    def gather(ref: Any) -> None:
        run, record, command, before = pending.pop(ref)
        run_dir = plan.run_dir(run)
        try:
            result: RemoteResult = ray.get(ref)
        except ray.exceptions.RayError as e:
            result = RemoteResult(1, f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}", None, 0.0)
        if result.returncode is None:  # never started: the run is as it was before this benchmark
            ended[run] = (before or RunRecord.of(run)).model_copy(update={"status": "interrupted",
                                                                           "error": "interrupted"})
            write_record(run_dir, ended[run])
            return
        with open(run_dir / LOG, "ab") as log:
            log.write((_log_header(record, command) + result.output).encode())
        if result.archive is not None:
            _clear(run_dir)
            unpack(result.archive, run_dir)
        ended[run] = _ended(run_dir, record, result.returncode, result.output, result.seconds, stopping)
        if on_finish:
            on_finish(run, ended[run])

    with workers.stop_signals_interrupt():
        try:
            for status in todo:
                run, run_dir = status.run, plan.run_dir(status.run)
                resume = status.action == "resume"
                before = read_record(run_dir)
                if not resume:
                    _clear(run_dir)
                archive = pack(run_dir) if resume else None
                command = train_command(run, plan.options, run_dir, resume)
                record = _started(run_dir, run, plan.options, command, "ray")
                pending[task.remote(run, plan.options, archive, stop_level)] = (run, record, command, before)
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                gather(ref)
        except KeyboardInterrupt:
            stopping = True
            level = 1
            stop_level.raise_to.remote(level)
            if notify and pending:
                notify(f"Stopping {len(pending)} Ray task(s), each saves a checkpoint; Ctrl-C again to terminate.")
            while pending:
                try:
                    (ref,), _ = ray.wait(list(pending), num_returns=1)
                    gather(ref)
                except KeyboardInterrupt:
                    level += 1
                    if level <= len(workers.ESCALATION):
                        stop_level.raise_to.remote(level)
                        if notify:
                            notify(f"Sent {signal.Signals(workers.ESCALATION[level - 1]).name} to the running runs.")
                        continue
                    for ref, (run, record, _, _) in list(pending.items()):  # the tasks themselves do not answer
                        ray.cancel(ref, force=True)
                        ended[run] = record.model_copy(update={"status": "interrupted", "error": "interrupted"})
                        write_record(plan.run_dir(run), ended[run])
                    pending.clear()
            raise BenchmarkInterrupted(list(ended.values())) from None
    return ended
