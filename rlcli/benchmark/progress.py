"""The lines ``rlcli benchmark`` shows: what the plan holds and does with each run, one line per run as it
ends, and the totals. Text only; the command prints it."""

from __future__ import annotations

from rlcli.benchmark.execute import LOG, RunRecord, RunStatus
from rlcli.benchmark.plan import BenchmarkPlan, RunSpec
from rlcli.benchmark.results import read_run


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def headline(plan: BenchmarkPlan, algos: list[str], statuses: list[RunStatus], workers: int,
             ray: str | None) -> list[str]:
    """The plan in a line, the pairs it skips, and what is kept or resumed from an earlier run of it."""
    env_ids = list(dict.fromkeys(r.env_id for r in plan.runs))
    seeds = len({r.seed for r in plan.runs})
    threads, nproc = plan.options.threads, plan.options.nproc
    each = "" if nproc == 1 else f" ({nproc} processes each)"
    where = (f"on Ray ({ray}), {plan.options.cpus} CPU(s) per run{each}" if ray else
             f"{count(workers, 'worker')} x {count(threads, 'thread')}{each}")
    lines = [f"Benchmark: {count(len(plan.runs), 'run')} ({'+'.join(algos)} x {count(len(env_ids), 'env')} x "
             f"{count(seeds, 'seed')}), {where} -> {plan.directory}"]
    lines += [f"skipped {line}" for line in plan.skipped]
    actions = {action: sum(s.action == action for s in statuses) for action in ("done", "resume", "new")}
    if actions["done"] or actions["resume"]:
        lines.append(f"{actions['done']} finished already (kept), {actions['resume']} to resume, "
                     f"{actions['new']} to start")
    return lines


def dry_run(statuses: list[RunStatus]) -> list[str]:
    """A line per run: what executing the plan would do with it."""
    width = max((len(s.run.env_id) for s in statuses), default=0)
    lines = []
    for status in statuses:
        run = status.run
        what = {"done": "finished (kept)", "resume": f"resume at step {status.step:,}", "new": "new"}
        lines.append(f"  {run.algo:<4} {run.env_id:<{width}}  seed {run.seed:<4} {run.steps:>12,} steps  "
                     f"{what[status.action]}")
    return lines


def run_ended(plan: BenchmarkPlan, run: RunSpec, record: RunRecord, number: int, total: int) -> str:
    """``[number/total] status run: its final evaluation, or why it failed``."""
    head = f"[{number}/{total}] {record.status:<8} {run.label}"
    if record.status != "finished":
        return f"{head}: {record.error} (log: {plan.run_dir(run) / LOG})"
    row = read_run(plan.run_dir(run))
    score = f"eval {row.final_return:.2f}" if row and row.final_return is not None else "no evaluation"
    return f"{head}: {score} at {row.steps if row else 0:,} steps ({record.process_s:.1f} s)"
