"""``rlcli benchmark`` end to end: real training processes, a real crashing env, a real Ctrl-C, local Ray."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlcli.benchmark.plan as planning
from rlcli.benchmark import RunSpec, TrainOptions, default_workers, load_suites, run_memory_gib
from rlcli.benchmark.execute import result_settings, train_command
from rlcli.benchmark.scores import normalization_for, published_for
from rlcli.cli import app
from rlcli.cli.benchmark import spread_values
from tests.waiting import wait_for

runner = CliRunner()
# tiny PPO runs: 4 envs x 64 steps per update, 2 epochs, 2 evaluation episodes every 512 steps
TINY = ["--steps", "2048", "-p", "n_envs=4", "-p", "n_steps=64", "-p", "minibatch_size=128", "-p", "n_epochs=2",
        "--eval-episodes", "2", "--eval-every", "512"]
PNG = b"\x89PNG\r\n\x1a\n"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def report_of(directory, rows):
    """The report ``rlcli benchmark report`` makes from a results.json holding ``rows``."""
    (directory / "results.json").write_text(json.dumps({"format": "rlcli-benchmark-results-v1", "runs": rows}))
    result = runner.invoke(app, ["benchmark", "report", str(directory)])
    assert result.exit_code == 0, result.output
    return (directory / "report.md").read_text()


def record(run_dir):
    return json.loads((run_dir / "benchmark-run.json").read_text())


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """2 envs x 2 seeds with 2 workers, as a user would type it."""
    out = tmp_path_factory.mktemp("bench") / "grid"
    start = time.monotonic()
    result = runner.invoke(app, ["benchmark", "--envs", "CartPole-v1", "Acrobot-v1", "--seeds", "1", "2",
                                 "--workers", "2", "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    return out, result.output, time.monotonic() - start


def test_tiny_grid_runs_end_to_end_and_writes_table_and_figures(grid):
    out, output, elapsed = grid
    assert "Benchmark: 4 runs (ppo x 2 envs x 2 seeds), 2 workers x 1 thread" in output
    assert output.count(" finished ppo ") == 4 and "4 finished, 0 failed" in output
    rows = read_csv(out / "results.csv")
    assert [(r["env_id"], r["seed"]) for r in rows] == [("CartPole-v1", "1"), ("CartPole-v1", "2"),
                                                        ("Acrobot-v1", "1"), ("Acrobot-v1", "2")]
    for row in rows:
        assert row["algo"] == "ppo" and row["status"] == "finished" and row["budget"] == "2048"
        assert int(row["steps"]) >= 2048 and float(row["sps"]) > 0 and float(row["wall_time_s"]) > 0
        assert float(row["best_return"]) >= float(row["final_return"])
        assert row["rlcli"] and row["torch"] and row["gymnasium"] and not row["error"]
        run_dir = out / "runs" / f"{row['env_id']}__ppo__s{row['seed']}"
        assert json.loads((run_dir / "meta.json").read_text())["finished"]
        assert "Evaluated return" in (run_dir / "train.log").read_text()
        command = record(run_dir)["command"]
        assert command[command.index("--threads") + 1] == "1"  # each run limited to one thread
        assert command[command.index("--env-threads") + 1] == "1"  # envpool's workers too
    # two workers: some runs trained at the same time, never more than two at once
    spans = [(record(d)["started_at"], record(d)["ended_at"]) for d in (out / "runs").iterdir()]
    live = [sum(start <= t < end for start, end in spans) for t, _ in spans]
    assert max(live) == 2
    saved = json.loads((out / "results.json").read_text())["runs"]
    assert len(saved) == 4 and all(len(r["curve"]) >= 4 for r in saved)
    for name in ("curves_CartPole-v1.png", "curves_Acrobot-v1.png", "aggregate.png"):
        data = (out / "figures" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000
    report = (out / "report.md").read_text()
    assert "![CartPole-v1](figures/curves_CartPole-v1.png)" in report
    assert re.search(r"\| CartPole-v1 \| ppo \| 2,048 \| 2,048 \| 2 \| -?[\d.]+ ± [\d.]+ \|", report)
    assert "— (cleanrl: 490.0 at 500,000, training)" in report  # published at another budget only


def _aggregate_row(report):
    section = report.split("## Aggregate metrics")[1].split("##")[0]
    (line,) = [line for line in section.splitlines() if line.startswith("| ppo | ")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    return {name: float(cells[i + 1].split(" [")[0]) for i, name in enumerate(["IQM", "median", "mean", "gap"])}


def test_aggregate_metrics_match_a_hand_computation(grid):
    out = grid[0]
    finals = {}
    for row in read_csv(out / "results.csv"):
        finals.setdefault(row["env_id"], []).append(float(row["final_return"]))
    # normalization.csv: CartPole random 23.68, reference 475; Acrobot random -497.08, reference -100
    cartpole = [(f - 23.68) / (475 - 23.68) for f in finals["CartPole-v1"]]
    acrobot = [(f + 497.08) / (-100 + 497.08) for f in finals["Acrobot-v1"]]
    pooled = sorted(cartpole + acrobot)
    means = [sum(cartpole) / 2, sum(acrobot) / 2]
    expected = {"IQM": (pooled[1] + pooled[2]) / 2,  # 4 scores: one cut from each end
                "median": (means[0] + means[1]) / 2, "mean": (means[0] + means[1]) / 2,
                "gap": 1 - sum(min(s, 1.0) for s in pooled) / 4}
    got = _aggregate_row((out / "report.md").read_text())
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=0.0006), name


def test_rerunning_keeps_finished_runs(grid):
    out = grid[0]
    result = runner.invoke(app, ["benchmark", "--envs", "CartPole-v1", "Acrobot-v1", "--seeds", "1", "2",
                                 "--workers", "2", "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    assert "4 finished already (kept), 0 to resume, 0 to start" in result.output
    assert all(record(d)["attempts"] == 1 for d in (out / "runs").iterdir())
    dry = runner.invoke(app, ["benchmark", "-e", "CartPole-v1", "--seeds", "1", "3", "--out", str(out), "--dry-run",
                              *TINY])
    assert dry.exit_code == 0, dry.output
    assert re.search(r"CartPole-v1 +seed 1 +2,048 steps +finished \(kept\)", dry.output)
    assert re.search(r"CartPole-v1 +seed 3 +2,048 steps +new", dry.output)
    assert not (out / "runs" / "CartPole-v1__ppo__s3").exists()


def test_report_is_remade_from_the_directory_and_from_a_results_copy(grid, tmp_path):
    out = grid[0]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("report.md", "figures"))
    result = runner.invoke(app, ["benchmark", "report", str(copy)])
    assert result.exit_code == 0 and "4 runs" in result.output, result.output
    assert (copy / "report.md").read_text() == (out / "report.md").read_text().replace(str(out), str(copy))
    assert (copy / "figures" / "aggregate.png").read_bytes().startswith(PNG)

    release = tmp_path / "release"  # what zoo/benchmarks keeps: the table and report, no run directories
    assert runner.invoke(app, ["benchmark", "report", str(copy), "--out", str(release)]).exit_code == 0
    assert not (release / "runs").exists()
    result = runner.invoke(app, ["benchmark", "report", str(release)])
    assert result.exit_code == 0 and _aggregate_row((release / "report.md").read_text()) == _aggregate_row(
        (out / "report.md").read_text())


def test_compare_two_benchmarks(grid, tmp_path):
    out = grid[0]
    better = tmp_path / "better"
    better.mkdir()
    results = json.loads((out / "results.json").read_text())
    for row in results["runs"]:
        row["final_return"] += 1000.0
    (better / "results.json").write_text(json.dumps(results))

    result = runner.invoke(app, ["benchmark", "compare", str(out), str(out)])
    assert result.exit_code == 0, result.output
    assert "P(A > B) over 2 envs: 0.500" in result.output
    assert "IQM(A) − IQM(B) over 2 normalised envs: 0.000 [" in result.output

    md = tmp_path / "cmp.md"
    result = runner.invoke(app, ["benchmark", "compare", str(better), str(out), "--out", str(md)])
    assert result.exit_code == 0, result.output
    assert "P(A > B) over 2 envs: 1.000 [1.000, 1.000]" in md.read_text()
    assert re.search(r"\| CartPole-v1 \| 2,048 \| [\d,.]+ ± [\d.]+ \| 2 \| 2,048 \|", md.read_text())


CRASHING_ENV = '''
import gymnasium as gym
import numpy as np


class CrashingEnv(gym.Env):
    """Ends an episode every 20 steps; its simulator "crashes" on the 100th step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps >= 100:
            raise RuntimeError("the simulator crashed")
        return np.zeros(4, np.float32), 1.0, self.steps % 20 == 0, False, {}


gym.register("Crash-v0", entry_point=CrashingEnv)
'''


def test_a_failing_run_is_reported_and_the_others_complete(tmp_path, monkeypatch):
    (tmp_path / "crashing_env.py").write_text(CRASHING_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "bench"
    result = runner.invoke(app, ["benchmark", "--envs", "Crash-v0", "CartPole-v1", "--seeds", "1", "--workers", "2",
                                 "--env-module", "crashing_env", "--out", str(out), *TINY])
    assert result.exit_code == 1, result.output
    assert "failed   ppo Crash-v0 seed 1: RuntimeError: the simulator crashed" in result.output
    assert "1 finished, 1 failed" in result.output
    rows = {r["env_id"]: r for r in read_csv(out / "results.csv")}
    assert rows["Crash-v0"]["status"] == "failed"
    assert rows["Crash-v0"]["error"] == "RuntimeError: the simulator crashed"
    assert rows["CartPole-v1"]["status"] == "finished" and not rows["CartPole-v1"]["error"]
    assert "Traceback" in (out / "runs" / "Crash-v0__ppo__s1" / "train.log").read_text()
    report = (out / "report.md").read_text()
    assert "| Crash-v0 | ppo | 2,048 | — | 0 of 1 | — |" in report
    assert "RuntimeError: the simulator crashed" in report
    assert "Left out (no normalisation): Crash-v0." in report


BLOCKING_ENV = '''
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

STEPS = [0]


class BlockingCartPole(CartPoleEnv):
    """CartPole that, after 1,500 steps in its process, blocks until the file $RLCLI_TEST_RELEASE exists:
    the run is still training whenever the test interrupts it. With $RLCLI_TEST_STUBBORN set it also
    ignores Ctrl-C while it blocks, as a run stuck in a simulator would."""

    def step(self, action):
        STEPS[0] += 1
        if STEPS[0] > 1500 and not os.path.exists(os.environ["RLCLI_TEST_RELEASE"]):
            open(os.environ["RLCLI_TEST_RELEASE"] + ".blocked", "w").close()
        while STEPS[0] > 1500 and not os.path.exists(os.environ["RLCLI_TEST_RELEASE"]):
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:
                if not os.environ.get("RLCLI_TEST_STUBBORN"):
                    raise
        return super().step(action)


gym.register("BlockingCartPole-v0", entry_point=BlockingCartPole, max_episode_steps=500)
'''


@pytest.fixture
def blocking_env(tmp_path, monkeypatch):
    """``--env-module blocking_env`` registers BlockingCartPole-v0; returns the file that releases it."""
    (tmp_path / "blocking_env.py").write_text(BLOCKING_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    release = tmp_path / "release"
    monkeypatch.setenv("RLCLI_TEST_RELEASE", str(release))
    return release


def _start_benchmark(args, release):
    """A benchmark process, once its run has saved a first checkpoint and is blocked in its env."""
    proc = subprocess.Popen([sys.executable, "-m", "rlcli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wait_for(Path(f"{release}.blocked").is_file, proc, 90, poll_s=0.1)
    return proc


def test_an_interrupted_benchmark_resumes(tmp_path, blocking_env):
    out = tmp_path / "bench"
    args = ["benchmark", "--envs", "BlockingCartPole-v0", "--env-module", "blocking_env", "--seeds", "1",
            "--workers", "1", "--out", str(out), *TINY, "--steps", "4096", "--eval-every", "256"]
    run_dir = out / "runs" / "BlockingCartPole-v0__ppo__s1"
    proc = _start_benchmark(args, blocking_env)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    blocking_env.touch()  # the run finishes the iteration the interrupt found it in, then saves
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert "Stopping 1 running run(s), each saves a checkpoint" in output
    assert "Interrupted. Re-run the same command to resume" in output
    assert record(run_dir)["status"] == "interrupted"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert not meta["finished"] and 0 < meta["steps"] < 4096
    interrupted_at = meta["steps"]

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "0 finished already (kept), 1 to resume, 0 to start" in result.output
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["finished"] and meta["steps"] == 4096
    assert meta["resumes"] == [{"step": interrupted_at, "exact": True}]  # the envs went on mid-episode
    assert record(run_dir)["attempts"] == 2 and record(run_dir)["status"] == "finished"
    log = (run_dir / "train.log").read_text()
    assert f"Resuming BlockingCartPole-v0 (ppo) in {run_dir} at step {interrupted_at:,}" in log
    steps = [int(line.split(",")[0]) for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # continued, not started again


def test_a_run_interrupted_on_its_own_is_kept_to_resume_and_the_others_go_on(tmp_path, blocking_env):
    out = tmp_path / "bench"
    args = ["benchmark", "--envs", "BlockingCartPole-v0", "--env-module", "blocking_env", "--seeds", "1", "2",
            "--workers", "1", "--out", str(out), *TINY, "--eval-every", "2048"]
    first = out / "runs" / "BlockingCartPole-v0__ppo__s1"
    proc = _start_benchmark(args, blocking_env)
    os.kill(record(first)["pid"], signal.SIGINT)  # Ctrl-C to that run alone (its own terminal, a process list)
    blocking_env.touch()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, output
    assert record(first)["status"] == "interrupted" and record(first)["returncode"] == 130, output
    assert "interrupted on its own; re-run the benchmark to resume it" in output
    assert "1 finished, 1 interrupted (re-run to continue them), 0 failed" in output
    assert record(out / "runs" / "BlockingCartPole-v0__ppo__s2")["status"] == "finished"
    stopped_at = json.loads((first / "meta.json").read_text())["steps"]
    assert 0 < stopped_at < 2048

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 finished already (kept), 1 to resume, 0 to start" in result.output
    assert json.loads((first / "meta.json").read_text())["resumes"] == [{"step": stopped_at, "exact": True}]


def test_a_hangup_stops_the_runs_and_a_second_ctrl_c_terminates_a_stuck_one(tmp_path, blocking_env, monkeypatch):
    monkeypatch.setenv("RLCLI_TEST_STUBBORN", "1")
    out = tmp_path / "bench"
    run_dir = out / "runs" / "BlockingCartPole-v0__ppo__s1"
    proc = _start_benchmark(["benchmark", "--envs", "BlockingCartPole-v0", "--env-module", "blocking_env",
                             "--seeds", "1", "--out", str(out), *TINY, "--steps", "4096"], blocking_env)
    child = record(run_dir)["pid"]
    proc.send_signal(signal.SIGHUP)  # the terminal closed: the run is asked to save, and ignores it
    time.sleep(2)
    assert proc.poll() is None and os.path.exists(f"/proc/{child}"), "the stuck run was not waited for"
    proc.send_signal(signal.SIGINT)  # a second stop: the run is terminated
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert "Sent SIGTERM to the running runs." in output
    assert record(run_dir)["status"] == "interrupted" and record(run_dir)["returncode"] == -signal.SIGTERM
    assert not os.path.exists(f"/proc/{child}") or "zombie" in Path(f"/proc/{child}/status").read_text().lower()


def test_a_ray_task_stops_its_run_with_a_checkpoint_at_each_level(tmp_path):
    from rlcli.jobs.workers import Job, run_until_stopped

    script = tmp_path / "run.py"
    script.write_text("import signal, sys, time\n"
                      "signal.signal(signal.SIGINT, lambda *_: (print('saved', flush=True), sys.exit(130)))\n"
                      "print('training', flush=True)\ntime.sleep(60)\n")
    asked = iter([0, 0, 1, 1, 1, 1])
    start = time.monotonic()
    # a Ray worker blocks SIGINT (and a shell's background job ignores it); the run must still hear it
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        end = run_until_stopped(Job("run", (sys.executable, str(script)), 1), lambda: next(asked, 1), poll_s=0.2)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, previous)
    assert end.returncode == 130 and end.output.split() == ["training", "saved"]
    assert time.monotonic() - start < 30
    ignores = tmp_path / "stuck.py"
    ignores.write_text("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n")
    levels = iter([0] * 10 + [1] * 5)  # 2 s to start and ignore SIGINT, then SIGINT (ignored), then SIGTERM
    end = run_until_stopped(Job("stuck", (sys.executable, str(ignores)), 1), lambda: next(levels, 2), poll_s=0.2)
    assert end.returncode == -signal.SIGTERM


def test_aggregates_compare_algorithms_on_the_envs_they_share(tmp_path):
    def row(algo, env_id, seed, final):
        return {"algo": algo, "env_id": env_id, "seed": seed, "budget": 1000, "status": "finished", "steps": 1000,
                "final_return": final, "best_return": final, "curve": [[1000, final]]}

    report = report_of(tmp_path, [row("ppo", "CartPole-v1", 1, 500.0), row("ppo", "Pendulum-v1", 1, -200.0),
                                  row("sac", "Pendulum-v1", 1, -150.0)])
    assert ("Over the 1 env(s) every algorithm ran: Pendulum-v1; left out, not run by every algorithm: "
            "CartPole-v1.") in report
    # Pendulum random -1207.56, reference 0: ppo (-200 + 1207.56) / 1207.56, not averaged with CartPole's 1.1
    assert _aggregate_row(report)["mean"] == pytest.approx(1 - 200 / 1207.56, abs=0.0006)


def test_ray_runs_the_same_grid_as_tasks(tmp_path):
    ray = pytest.importorskip("ray")
    out = tmp_path / "bench"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = runner.invoke(app, ["benchmark", "--envs", "CartPole-v1", "--seeds", "1", "2", "--ray", "auto",
                                     "--out", str(out), *TINY])
    finally:
        ray.shutdown()
    assert result.exit_code == 0, result.output
    assert "on Ray (auto), 1 CPU(s) per run" in result.output and "2 finished, 0 failed" in result.output
    for seed in (1, 2):
        run_dir = out / "runs" / f"CartPole-v1__ppo__s{seed}"
        assert record(run_dir)["where"] == "ray" and record(run_dir)["status"] == "finished"
        assert (run_dir / "model.safetensors").is_file() and "Evaluated return" in (run_dir / "train.log").read_text()
    assert [r["status"] for r in read_csv(out / "results.csv")] == ["finished", "finished"]
    assert (out / "figures" / "curves_CartPole-v1.png").read_bytes().startswith(PNG)


@pytest.mark.parametrize("args, expected", [
    (["--envs", "atar", "--dry-run"], "unknown suite or environment 'atar'; did you mean atari?"),
    (["--envs", "CartPol-v1", "--dry-run"], "unknown environment 'CartPol-v1'; did you mean CartPole-v1"),
    (["--envs", "CartPole-v1", "--workers", "0"], "Invalid value for '--workers'"),
    (["--envs", "CartPole-v1", "-p", "learning_rte=1", "--dry-run"], "unknown hyperparameter 'learning_rte'"),
    (["--envs", "CartPole-v1", "--algo", "sac"], "nothing to run: sac on CartPole-v1: SAC needs continuous"),
    (["--seeds", "1", "--dry-run"], "missing --envs"),
    (["--envs", "--dry-run"], "--envs needs at least one value"),
    (["--envs", "CartPole-v1", "--seeds", "one"], "Invalid value for '--seeds'"),
    (["--envs", "CartPole-v1", "--seeds", "1", "-1", "--dry-run"], "--seeds must be 0 or more"),
    (["report", "/no/such/dir"], "no benchmark directory /no/such/dir"),
    (["compare", "/no/such/dir", "."], "no benchmark directory /no/such/dir"),
    (["CartPole-v1"], "environments go after --envs, e.g. rlcli benchmark --envs CartPole-v1"),
    (["--envs", "CartPole-v1", "--out", __file__], "is a file; give a directory for the benchmark"),
    (["--envs", "CartPole-v1", "--out", f"{__file__}/sub"], "which is a file; give a directory"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, expected):
    result = runner.invoke(app, ["benchmark", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.output


def test_a_different_budget_in_the_same_directory_is_refused(grid):
    result = runner.invoke(app, ["benchmark", "--envs", "CartPole-v1", "--seeds", "1", "--steps", "4096",
                                 "--out", str(grid[0])])
    assert result.exit_code == 2 and "budget of 2,048 steps, not 4,096" in result.output


def test_other_settings_in_the_same_directory_are_refused(grid):
    result = runner.invoke(app, ["benchmark", "--envs", "CartPole-v1", "--seeds", "1", *TINY, "-p", "gamma=0.9",
                                 "--out", str(grid[0])])
    assert result.exit_code == 2 and "trained with other settings" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_multi_value_options_take_every_value_up_to_the_next_option():
    assert spread_values(["--envs", "atari", "mujoco", "--seeds", "1", "-2", "--steps", "5", "--algo=ppo", "sac"]) == [
        "--envs", "atari", "--envs", "mujoco", "--seeds", "1", "--seeds", "-2", "--steps", "5",
        "--algo", "ppo", "--algo", "sac"]
    assert spread_values(["report", "DIR", "--out", "x"]) == ["report", "DIR", "--out", "x"]


def test_suites_and_reference_data_hold_together():
    suites = load_suites()
    assert {"classic", "mujoco", "atari"} <= set(suites)
    for suite in suites.values():
        for env_id in suite.envs:
            norm = normalization_for(env_id)
            if not suite.normalized:  # none of its envs is normalised by halves
                assert norm is None, env_id
                continue
            assert norm is not None and norm.reference != norm.random, env_id
            assert norm.random_source and norm.reference_source
    assert normalization_for("ALE/Pong-v5") == normalization_for("Pong-v5")
    sources = {p.source for p in published_for("ppo", "Hopper-v5", 1_000_000)}
    assert sources == {"cleanrl", "sb3-zoo"}
    (pong,) = [p for p in published_for("ppo", "Pong-v5", 10_000_000) if p.env_version == "v5-envpool"]
    assert pong.mean == pytest.approx(20.45) and pong.where.startswith("cleanrl docs")
    assert published_for("sac", "Humanoid-v5", 2_000_000)[0].mean == pytest.approx(6232.287)
    assert len(suites["atari57"].envs) == 57
    for score in published_for("ppo", "Hopper-v5", 1_000_000):  # each number says where it is from and what it is
        assert score.return_kind in ("training", "eval-deterministic", "eval-stochastic")
        assert score.url.startswith("https://github.com/") and len(score.commit) == 40


def test_default_workers_count_the_memory_a_suite_states_for_its_runs(monkeypatch):
    """The playground suite's runs take up to 10 GiB each, so a 16-core machine with 32 GiB runs 3 of them at
    once, not the 16 runs of 2 GiB an env no suite sizes gets."""
    suite = load_suites()["playground"]
    assert run_memory_gib(["CartPole-v1", suite.envs[0]]) == suite.run_memory_gib == 10.0
    assert run_memory_gib(["CartPole-v1"]) == run_memory_gib([]) == planning.RUN_MEMORY_GIB
    monkeypatch.setattr(planning, "available_cores", lambda: 16)
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 32 * 2**30 // 4096}[name])
    assert default_workers(1, run_memory_gib(list(suite.envs))) == 3
    assert default_workers(1) == 16 and default_workers(4, 10.0) == 3 and default_workers(8, 10.0) == 2
    monkeypatch.setattr(os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert default_workers(1, 10.0) == 1  # the memory unknown


def test_the_playground_suite_plans_each_task_at_its_tuned_budget(tmp_path):
    pytest.importorskip("envpool")
    dry = runner.invoke(app, ["benchmark", "--envs", "playground", "--seeds", "1", "--out", str(tmp_path / "b"),
                              "--dry-run"])
    assert dry.exit_code == 0, dry.output
    for env_id in load_suites()["playground"].envs:
        assert re.search(rf"{env_id} +seed 1 +10,000,000 steps +new", dry.output), env_id


def test_report_from_a_results_file_shows_the_published_score_at_the_same_budget(tmp_path):
    rows = [{"algo": "ppo", "env_id": "CartPole-v1", "seed": seed, "budget": 500_000, "status": "finished",
             "steps": 500_000, "final_return": final, "best_return": 500.0,
             "curve": [[250_000, 300.0], [500_000, final]]}
            for seed, final in ((1, 480.0), (2, 500.0))]
    report = report_of(tmp_path, rows)
    assert ("| CartPole-v1 | ppo | 500,000 | 500,000 | 2 | 490.0 ± 10.0 | 500.0 ± 0.0 | "
            "490.0 ± 6.1 (cleanrl, CartPole-v1, 3 seeds, training) |") in report
    assert "- cleanrl: [cleanrl docs rl-algorithms/ppo.md (ppo.py)](https://github.com/vwxyzjn/cleanrl/blob/" in report
    # normalised (480 - 23.68) / (475 - 23.68) = 1.0111 and 1.0554: both above 1, so the gap is 0
    got = _aggregate_row(report)
    assert got["IQM"] == pytest.approx(1.033, abs=0.0006) and got["gap"] == 0.0
    assert (tmp_path / "figures" / "curves_CartPole-v1.png").read_bytes().startswith(PNG)


def test_a_run_trained_by_several_processes_is_one_task_of_their_cpus(tmp_path):
    """--nproc: each run's command starts its processes (rlcli train --nproc), a Ray task would ask for every
    process's threads, and the number of processes, which sets the global batch, is part of what a result means."""
    options = TrainOptions(threads=2, nproc=3)
    run = RunSpec(algo="ppo", env_id="CartPole-v1", seed=0, steps=1000)
    for resume in (False, True):
        command = train_command(run, options, tmp_path, resume=resume)
        assert command[command.index("--nproc") + 1] == "3" and command[command.index("--threads") + 1] == "2"
    assert "--nproc" not in train_command(run, TrainOptions(), tmp_path, resume=False)
    assert options.cpus == 6 and result_settings(options)["nproc"] == 3
    assert "nproc" not in result_settings(TrainOptions())  # records written before --nproc still match
    dry = runner.invoke(app, ["benchmark", "-e", "CartPole-v1", "--seeds", "1", "--nproc", "2", "--workers", "1",
                              "--out", str(tmp_path / "bench"), "--dry-run"])
    assert dry.exit_code == 0 and "1 worker x 1 thread (2 processes each)" in dry.output, dry.output


def test_save_buffer_reaches_every_train_command_and_leaves_what_a_result_means_alone(tmp_path):
    """--save-buffer: a stopped benchmark resumes its SAC runs with their replay buffers (rlcli train
    --save-buffer); a run trained with or without it means the same."""
    run = RunSpec(algo="sac", env_id="Pendulum-v1", seed=0, steps=1000)
    for resume in (False, True):
        assert "--save-buffer" in train_command(run, TrainOptions(save_buffer=True), tmp_path, resume=resume)
        assert "--save-buffer" not in train_command(run, TrainOptions(), tmp_path, resume=resume)
    assert result_settings(TrainOptions(save_buffer=True)) == result_settings(TrainOptions())
    dry = runner.invoke(app, ["benchmark", "-e", "Pendulum-v1", "-a", "sac", "--seeds", "1", "--save-buffer",
                              "--out", str(tmp_path / "bench"), "--dry-run"])
    assert dry.exit_code == 0, dry.output
