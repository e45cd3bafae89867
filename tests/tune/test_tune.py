"""``rlcli tune`` end to end: real tiny studies on CartPole (pruning, resume, two worker processes on one
SQLite study, PostgreSQL when CI provides one), diverging trials, and the search spaces."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from typer.testing import CliRunner

from rlcli import config
from rlcli.algos import build_algo_config, hyperparams_for, resolve
from rlcli.cli import app
from rlcli.errors import UsageError
from rlcli.runs import checkpoint
from rlcli.runs.rundir import load_config
from rlcli.tune import results
from rlcli.tune import study as tuning
from rlcli.tune.objective import OVERRIDES_BY_ENV, base_hyperparams, stored_overrides, trial_overrides
from rlcli.tune.results import _float, apply_entries, entry_lines
from rlcli.tune.space import SearchSpace, default_space
from rlcli.tune.spec import TuneSpec
from rlcli.tune.storage import open_storage
from tests.waiting import wait_for

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
# 4 envs x 32-64 steps, 1-4 minibatches, tiny networks; a wide learning-rate range so that trials differ
TINY_SPACE = """\
learning_rate: {low: 1.0e-5, high: 3.0e-2, log: true}
gamma: {one_minus: true, low: 1.0e-3, high: 0.1, log: true}
n_envs: [4]
n_steps: [32, 64]
minibatch_size: {minibatches: [1, 2, 4]}
n_epochs: [2, 4]
network.hidden: [[16], [32, 32]]
"""
# the tiny study's space adds a hopeless arm: with Sutton and Barto's CartPole reward (0 a step, -1 at
# the fall) every evaluated return is <= 0, below any return of the usual +1 a step, so a trial drawing
# it after a complete trial of the usual reward is pruned whatever the training's numerics; the random
# sampler's draws (seed 0) do not depend on them either
PRUNING_SPACE = TINY_SPACE + "env_kwargs: [{}, {sutton_barto_reward: true}]\n"
TINY = ["--steps", "2048", "--evaluations", "3", "--eval-episodes", "3", "--threads", "1", "--startup-trials", "1"]
# two workers sharing a study: the point is the sharing, so shorter runs
SHARED = ["--trials", "4", "--jobs", "2", "--pruner", "none", *TINY[2:], "--steps", "1024"]
FAULTY_ENV = '''\
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class FaultyCartPole(CartPoleEnv):
    """CartPole whose rewards are all ``reward`` when it is given: NaN is the env's fault, a finite reward
    whose square overflows float32 makes training diverge."""

    def __init__(self, reward=None, **kwargs):
        super().__init__(**kwargs)
        self.reward = reward

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (reward if self.reward is None else float(self.reward)), terminated, truncated, info


gym.register("FaultyCartPole-v0", entry_point=FaultyCartPole, max_episode_steps=200)
'''


def tune(*args: str):
    return runner.invoke(app, ["tune", *args], catch_exceptions=False)


def load(out: Path, name: str | None = None):
    return optuna.load_study(study_name=name or out.name, storage=f"sqlite:///{(out / 'study.db').resolve()}")


def states(study) -> list[TrialState]:
    return [t.state for t in sorted(study.trials, key=lambda t: t.number)]


@pytest.fixture(scope="module")
def hyperparams(tmp_path_factory):
    """A copy of hyperparams/ for --write to edit."""
    directory = tmp_path_factory.mktemp("hyperparams")
    for name in ("ppo.yml", "sac.yml"):
        shutil.copy(REPO / "hyperparams" / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory, hyperparams):
    """5 trials, median pruning after the first, the best entry written into a copy of hyperparams/."""
    root = tmp_path_factory.mktemp("tune")
    (root / "space.yml").write_text(PRUNING_SPACE)
    out = root / "study"
    patch = pytest.MonkeyPatch()
    patch.setattr(config, "hyperparams_dir", lambda: hyperparams)
    try:
        result = tune("CartPole-v1", "--trials", "5", "--sampler", "random", "--space", str(root / "space.yml"),
                      "--out", str(out), "--write", *TINY)
    finally:
        patch.undo()
    return root, out, result


def test_tiny_study_completes_with_pruning(tiny_study):
    root, out, result = tiny_study
    assert result.exit_code == 0, result.output
    study = load(out)
    assert [t.number for t in sorted(study.trials, key=lambda t: t.number)] == [0, 1, 2, 3, 4]
    found = states(study)
    hopeless = [bool(t.params["env_kwargs"] != "{}") for t in sorted(study.trials, key=lambda t: t.number)]
    # what makes the pruning certain: the first trial (complete, as the startup trial) has the usual
    # reward and a later one the hopeless arm
    assert not hopeless[0] and any(hopeless), hopeless
    assert TrialState.PRUNED in found and TrialState.COMPLETE in found, found
    assert TrialState.RUNNING not in found
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert all(len(t.intermediate_values) < 3 for t in pruned)  # stopped before the last evaluation
    assert all(t.intermediate_values for t in study.trials)  # every trial reported its evaluations
    assert re.search(r"trial\s+\d+\s+pruned", result.output)
    assert re.search(r"Best: trial \d+, mean evaluated return", result.output)
    for name in ("best.yml", "summary.json", "optimization_history.png", "param_importances.png",
                 "parallel_coordinate.png"):
        assert (out / name).is_file(), name
    assert (out / "optimization_history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*")), list(out.glob(".*"))  # no temporary file of an atomic write left
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["number"] == study.best_trial.number
    assert summary["best"]["value"] == pytest.approx(study.best_value)
    assert sum(summary["trials"].values()) == 5
    assert set(summary["importances"]) <= {"learning_rate", "1-gamma", "n_steps", "n_minibatches", "n_epochs",
                                           "network.hidden", "n_envs", "env_kwargs"}
    # each trial trained in its own run directory under the study directory
    for t in study.trials:
        assert (out / "trials" / f"{t.number:04d}" / "CartPole-v1__s0" / checkpoint.CONFIG).is_file()


def test_best_yaml_loads_back_through_the_config_models(tiny_study, hyperparams, monkeypatch):
    root, out, result = tiny_study
    best = load(out).best_trial
    trained = load_config(out / "trials" / f"{best.number:04d}" / "CartPole-v1__s0")
    entry = yaml.safe_load((out / "best.yml").read_text())["CartPole-v1"]
    # best.yml is an env entry of hyperparams/ppo.yml: default <- group <- entry is what the trial trained
    monkeypatch.setattr(config, "hyperparams_dir", lambda: hyperparams)
    cfg = resolve("ppo", "CartPole-v1")
    assert cfg.algo == trained.algo.model_copy(update={"steps": cfg.algo.steps})
    assert cfg.algo.learning_rate == best.user_attrs["hyperparams"]["learning_rate"]
    assert cfg.algo.gamma == pytest.approx(1 - best.params["1-gamma"], rel=1e-2)
    # --write replaced that entry only: every other entry and every comment outside it is as it was
    original = (REPO / "hyperparams" / "ppo.yml").read_text()
    written = (hyperparams / "ppo.yml").read_text()
    assert yaml.safe_load(written)["CartPole-v1"] == entry
    assert {k: v for k, v in yaml.safe_load(written).items() if k != "CartPole-v1"} == \
        {k: v for k, v in yaml.safe_load(original).items() if k != "CartPole-v1"}
    kept = [line for line in original.splitlines() if line.startswith("#")]
    assert all(line in written.splitlines() for line in kept)
    assert "# rlcli tune CartPole-v1 --algo ppo --steps 2048: best trial" in written


def test_resume_continues_trial_numbering(tiny_study):
    root, out, _ = tiny_study
    result = tune("CartPole-v1", "--trials", "6", "--space", str(root / "space.yml"), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    assert "6 trials (5 done)" in result.output
    study = load(out)
    assert sorted(t.number for t in study.trials) == [0, 1, 2, 3, 4, 5]
    assert study.trials[5].state != TrialState.RUNNING
    # the same target again runs nothing; other settings are refused rather than mixed in
    again = tune("CartPole-v1", "--trials", "6", "--space", str(root / "space.yml"), "--out", str(out), *TINY)
    assert "already holds 6 trials" in again.output and len(load(out).trials) == 6
    other = tune("CartPole-v1", "--trials", "7", "--space", str(root / "space.yml"), "--out", str(out),
                 *TINY[:-4], "--steps", "4096")
    assert other.exit_code == 2
    assert "was run with other settings (steps 2048 -> 4096)" in other.output


def test_a_continued_study_draws_new_parameters(tmp_path):
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    out = tmp_path / "study"
    args = ["--sampler", "random", "--pruner", "none", "--space", str(tmp_path / "space.yml"), "--out", str(out),
            *TINY[:-2], "--steps", "256", "--evaluations", "1"]
    assert tune("CartPole-v1", "--trials", "2", *args).exit_code == 0
    result = tune("CartPole-v1", "--trials", "4", *args)
    assert result.exit_code == 0, result.output
    trials = sorted(load(out).trials, key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    first, second = [t.params for t in trials[:2]], [t.params for t in trials[2:]]
    assert all(params not in first for params in second), (first, second)
    assert not any("same_as" in t.user_attrs for t in trials)


def _check_shared_study(study, trials: int, logs: Path) -> None:
    numbers = sorted(t.number for t in study.trials)
    assert numbers == list(range(trials)), numbers
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials), states(study)
    texts = [log.read_text() for log in sorted(logs.glob("worker-*.log"))]
    started = {int(pid) for text in texts for pid in re.findall(r"worker \d started \(process (\d+)\)", text)}
    # two worker processes shared the study (which of them claims the trials is up to the scheduler: one
    # may have run them all), and between them they ran each trial once
    assert len(texts) == 2 and len(started) == 2, texts
    ran = [json.loads(m) for text in texts for m in re.findall(r"ran trials (\[.*\])", text)]
    assert len(ran) == 2 and sorted(ran[0] + ran[1]) == numbers, ran
    assert {int(t.user_attrs["worker"].rpartition(":")[2]) for t in study.trials} <= started


def test_two_processes_share_one_sqlite_study(tmp_path):
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    out = tmp_path / "shared"
    result = tune("CartPole-v1", *SHARED, "--space", str(tmp_path / "space.yml"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "2 job(s) x 1 thread(s)" in result.output
    _check_shared_study(load(out), 4, out / "workers")


def test_postgresql_storage(tmp_path):
    url = os.environ.get("RLCLI_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must test the PostgreSQL storage: .ci/run sets RLCLI_TEST_POSTGRES_URL")
        pytest.skip("RLCLI_TEST_POSTGRES_URL is not set (.ci/run starts a PostgreSQL server and sets it)")
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    name = f"test-{uuid.uuid4().hex[:8]}"
    result = tune("CartPole-v1", *SHARED, "--storage", url, "--study-name", name, "--space",
                  str(tmp_path / "space.yml"), "--out", str(tmp_path / "pg"))
    assert result.exit_code == 0, result.output
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    _check_shared_study(study, 4, tmp_path / "pg" / "workers")
    optuna.delete_study(study_name=name, storage=storage)


@pytest.mark.parametrize("stop", ["ctrl-c", "command killed"])
def test_stopped_workers_record_their_trials_as_interrupted(tmp_path, stop):
    """Ctrl-C at a terminal signals its whole foreground process group. Workers in their own sessions
    hear only the one interrupt the command forwards, and each records its running trial as interrupted
    (a second interrupt landing in the checkpoint save or the storage write would leave it running).
    Out of the command's session, they interrupt themselves when it is killed rather than outlive it."""
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    out = tmp_path / "stopped"
    args = ["tune", "CartPole-v1", "--trials", "4", "--jobs", "2", "--pruner", "none", "--space",
            str(tmp_path / "space.yml"), "--out", str(out), *TINY[2:], "--steps", "1000000", "--evaluations", "100"]
    # its own session, as a terminal's foreground job, so that the whole group can be signalled
    proc = subprocess.Popen([sys.executable, "-m", "rlcli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        # until both workers train: a logged row, past the checkpoint a new run saves at step 0
        wait_for(lambda: len([d for d in out.glob("trials/*/*") if _trained(d)]) >= 2, proc, 120, poll_s=0.5)
        os.killpg(proc.pid, signal.SIGINT if stop == "ctrl-c" else signal.SIGKILL)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    logs = sorted((out / "workers").glob("worker-*.log"))
    pids = [int(re.search(r"started \(process (\d+)\)", log.read_text()).group(1)) for log in logs]
    deadline = time.time() + 60
    while any(_running(pid) for pid in pids):  # no worker left behind
        assert time.time() < deadline, [log.read_text() for log in logs]
        time.sleep(0.5)
    if stop == "ctrl-c":
        assert proc.returncode == 130, output
        assert "Interrupted; the running trials are recorded as interrupted" in output, output
        assert "Traceback" not in output and (out / "summary.json").is_file()
    trials = load(out).trials
    assert len(trials) == 2 and all(t.state == TrialState.FAIL for t in trials), states(load(out))
    assert all(t.user_attrs["interrupted"] and t.user_attrs["fail_reason"] == "interrupted" for t in trials)
    for t in trials:  # the interrupt let training save its checkpoint, not only the periodic one before it
        run_dir = out / "trials" / f"{t.number:04d}" / "CartPole-v1__s0"
        meta = json.loads((run_dir / checkpoint.META).read_text())
        logged = int((run_dir / "metrics.csv").read_text().splitlines()[-1].split(",")[0])
        assert not meta["finished"] and logged <= meta["steps"] < 1_000_000, (meta["steps"], logged)
    for log in logs:
        text = log.read_text()
        assert text.count(" interrupted\n") == 1 and "Traceback" not in text, text


def test_sigterm_to_a_study_of_one_job_records_its_trial_as_interrupted_and_exits_143(tmp_path):
    """With --jobs 1 the trial runs in the command's own process: a scheduler's stop reaches it directly."""
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "rlcli", "tune", "CartPole-v1", "--trials", "2", "--pruner", "none",
                             "--space", str(tmp_path / "space.yml"), "--out", str(out), *TINY[2:], "--steps",
                             "1000000", "--evaluations", "100"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_for(lambda: any(_trained(d) for d in out.glob("trials/*/*")), proc, 120, poll_s=0.5)
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, output
    assert "Interrupted; the running trials are recorded as interrupted" in output and "Traceback" not in output
    (trial,) = load(out).trials
    assert trial.state == TrialState.FAIL and trial.user_attrs["fail_reason"] == "interrupted"


def _trained(run_dir: Path) -> bool:
    """Whether the run has a checkpoint and has logged a row of metrics (a header and one line)."""
    metrics = run_dir / "metrics.csv"
    return (run_dir / checkpoint.META).is_file() and metrics.is_file() and len(metrics.read_text().splitlines()) >= 2


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan's reaper may be slow, or absent)."""
    if Path("/proc/self/stat").is_file():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("when", ["report", "tell"])
def test_a_trial_recorded_by_another_worker_is_dropped_and_the_study_goes_on(tmp_path, monkeypatch, when):
    """Another worker's clean-up of stale trials (whose heartbeats stopped reaching the storage) can
    record a trial as interrupted while it still runs; its worker then drops its result and goes on."""

    def take(trial) -> None:  # what optuna.storages.fail_stale_trials does, in another worker
        if trial.number == 0:
            trial.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)

    if when == "report":  # while it trains
        report = optuna.trial.Trial.report

        def taken_report(self, value, step):
            take(self)
            return report(self, value, step)

        monkeypatch.setattr(optuna.trial.Trial, "report", taken_report)
    else:  # after it trained, before its result is told
        objective = tuning.objective

        def taken_objective(trial, *args, **kwargs):
            value = objective(trial, *args, **kwargs)
            take(trial)
            return value

        monkeypatch.setattr(tuning, "objective", taken_objective)
    (tmp_path / "space.yml").write_text(TINY_SPACE)
    out = tmp_path / "taken"
    result = tune("CartPole-v1", "--trials", "2", "--pruner", "none", "--space", str(tmp_path / "space.yml"),
                  "--out", str(out), *TINY[2:], "--steps", "512")
    assert result.exit_code == 0, result.output
    assert "trial 0 was recorded as interrupted by another worker while it ran here" in result.output
    trials = sorted(load(out).trials, key=lambda t: t.number)
    # the interrupted trial does not count: two more complete the study
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert "fail_reason" not in trials[0].user_attrs


def test_two_summaries_of_one_study_at_once(tmp_path):
    """Two processes working on one study each write its summary files when they end, maybe at the
    same moment: neither fails, and what is left is one writer's whole file."""
    path = tmp_path / results.SUMMARY
    errors = []

    def summarise(writer: int) -> None:
        try:
            for i in range(50):
                results._write_text(path, f"writer {writer}, summary {i}\n" * 100)
        except Exception as e:  # noqa: BLE001  (collected for the assertion below)
            errors.append(e)

    threads = [threading.Thread(target=summarise, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(set(path.read_text().splitlines())) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results.SUMMARY]


@pytest.mark.filterwarnings("ignore:.*reward is a NaN value")
def test_failing_trials_are_recorded_with_their_reason_and_the_study_goes_on(tmp_path, monkeypatch):
    (tmp_path / "faultyenv.py").write_text(FAULTY_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "space.yml").write_text("env_kwargs: [{reward: .nan}, {reward: 3.0e+38}, {}]\n"
                                        "n_envs: [4]\nn_steps: [32]\nminibatch_size: {minibatches: [2]}\n")
    out = tmp_path / "faulty"
    result = tune("FaultyCartPole-v0", "--env-module", "faultyenv", "--trials", "6", "--sampler", "random",
                  "--seed", "1", "--pruner", "none", "--space", str(tmp_path / "space.yml"), "--out", str(out),
                  "--steps", "512", "--evaluations", "1", "--eval-episodes", "2", "--threads", "1")
    assert result.exit_code == 0, result.output
    trials = sorted(load(out).trials, key=lambda t: t.number)
    assert len(trials) == 6
    reasons = {"nan": "environment fault: a non-finite reward at step ", "3e+38": "diverged: "}
    for t in trials:
        reward = t.user_attrs["hyperparams"]["env_kwargs"].get("reward")
        expected = None if reward is None else reasons["nan" if math.isnan(reward) else f"{reward:g}"]
        assert t.state == (TrialState.COMPLETE if expected is None else TrialState.FAIL)
        if expected is not None:
            assert t.user_attrs["fail_reason"].startswith(expected), t.user_attrs["fail_reason"]
    drawn = {json.dumps(t.user_attrs["hyperparams"]["env_kwargs"]) for t in trials}
    assert len(drawn) == 3, drawn  # the seed draws all three
    # a point drawn again takes its first trial's outcome without training again
    trained = [t for t in trials if "same_as" not in t.user_attrs]
    assert len(trained) == 3 and all((out / "trials" / f"{t.number:04d}").is_dir() for t in trained)
    for t in trials:
        if "same_as" in t.user_attrs:
            twin = trials[t.user_attrs["same_as"]]
            assert twin.number < t.number and twin.user_attrs["hyperparams"] == t.user_attrs["hyperparams"]
            assert t.state == twin.state and t.value == twin.value
            assert not (out / "trials" / f"{t.number:04d}").exists()
    assert "Failed trial" in result.output and "environment fault" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--sampler", "grid"], "'grid' is not one of"),
    (["--pruner", "hyperband"], "'hyperband' is not one of"),
    (["--storage", "postgresql://me:secret@127.0.0.1:9/none"], "cannot open the study storage postgresql://me:***@"),
    (["--storage", "nosuchdb://x"], "cannot open the study storage nosuchdb://x"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    result = runner.invoke(app, ["tune", "CartPole-v1", "--out", str(tmp_path / "s"), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) <= 2 and "Traceback" not in result.output
    assert "secret" not in result.output
    assert not (tmp_path / "s").exists()  # refused: nothing made


@pytest.mark.parametrize(("space", "message"), [
    ("learning_rte: {low: 1.0e-5, high: 1.0e-3}\n", "unknown ppo hyperparameter 'learning_rte'; did you mean"),
    ("learning_rate: {low: 1.0e-3, high: 1.0e-5}\n", "low (0.001) must be below high"),
    ("n_envs: [3]\nn_steps: [5]\nminibatch_size: {minibatches: [2]}\n", "minibatches 2 does not divide"),
    ("n_steps: {low: 8, high: 64}\nminibatch_size: {minibatches: [2]}\n", "'n_steps' must be a list of choices"),
    ("network.hidden: [big]\n", "invalid value for 'network.hidden'"),
    ("- 1\n", "must hold a mapping"),
    # each choice is valid with the others' first values; together the smallest leave a rollout of 8
    # steps, below CartPole's minibatch of 256
    ("n_envs: [64, 1]\nn_steps: [512, 8]\n", "the sample with n_envs=1, n_steps=8 is invalid: "),
])
def test_bad_space_file(tmp_path, space, message):
    (tmp_path / "space.yml").write_text(space)
    result = runner.invoke(app, ["tune", "CartPole-v1", "--space", str(tmp_path / "space.yml"),
                                 "--out", str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "s").exists()


def test_a_space_is_checked_against_every_env_tuned(tmp_path):
    (tmp_path / "space.yml").write_text("n_envs: [1, 16]\n")  # Acrobot's minibatch of 64 needs 1 x 256 steps
    result = runner.invoke(app, ["tune", "Acrobot-v1", "CartPole-v1", "--space", str(tmp_path / "space.yml"),
                                 "--out", str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    assert "the sample with n_envs=1 is invalid for CartPole-v1: " in result.output


def test_each_env_splits_its_own_rollout_into_minibatches():
    """With several envs, a space that splits the rollout but does not sample its shape gives each env
    the minibatch size of its own rollout (Acrobot's is 16 x 256 steps, CartPole's 8 x 32)."""
    spec = TuneSpec(env_ids=("Acrobot-v1", "CartPole-v1"), study_dir=Path("unused"), study_name="s",
                           storage="sqlite://", space={"minibatch_size": {"minibatches": [1, 4]}})
    space = spec.search_space()
    by_env = trial_overrides(optuna.trial.FixedTrial({"n_minibatches": 4}), spec, space)
    for env_id, overrides in by_env.items():
        base = base_hyperparams(spec, env_id)
        assert overrides == {"minibatch_size": base["n_envs"] * base["n_steps"] // 4}
        space.check(base, f" for {env_id}")
        build_algo_config("ppo", config.deep_merge(base, overrides))
    assert by_env["Acrobot-v1"] != by_env["CartPole-v1"]
    stored = {"hyperparams": by_env["Acrobot-v1"], OVERRIDES_BY_ENV: by_env}
    assert stored_overrides(stored, spec.env_ids) == by_env
    # trials of one env keep their overrides under "hyperparams" only
    one = {"hyperparams": {"n_epochs": 3}}
    assert stored_overrides(one, ("CartPole-v1",)) == {"CartPole-v1": {"n_epochs": 3}}


@pytest.mark.parametrize(("algo", "env_id", "group"), [
    ("ppo", "Hopper-v5", "mujoco"), ("sac", "Hopper-v5", "mujoco"), ("td3", "Hopper-v5", "mujoco"),
    ("dqn", "CartPole-v1", "classic")])
def test_built_in_spaces_sample_only_valid_configs(algo, env_id, group):
    space = default_space(algo)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    base = hyperparams_for(algo, env_id, group)
    space.check(base, "")
    for _ in range(200):
        overrides = space.sample(study.ask(), base)
        cfg = build_algo_config(algo, config.deep_merge(base, overrides))
        if algo in ("ppo", "dqn"):
            assert 0.9 <= cfg.gamma <= 0.999
        if algo == "ppo":
            assert cfg.batch_size % cfg.minibatch_size == 0
        elif algo == "dqn":
            assert 0.0 <= cfg.epsilon_end <= 0.2 and cfg.hidden in ((64, 64), (128, 128), (256, 256))
        else:
            assert cfg.actor_lr == cfg.critic_lr == getattr(cfg, "alpha_lr", cfg.actor_lr)
            assert cfg.actor_hidden == cfg.critic_hidden


def test_space_rejects_what_cannot_apply():
    with pytest.raises(UsageError, match="minibatches applies to PPO's minibatch_size only"):
        SearchSpace("sac", {"batch_size": {"minibatches": [2]}}, "--space s.yml")


@pytest.mark.parametrize("value", [3.0e-4, 1.0e-5, 0.98, 0.9487, 2.5e-4, 1e-8, 3.03e-5, 1e6, 1234.5, 0.0, -3e-7])
def test_floats_are_written_as_yaml_reads_them(value):
    text = _float(value)
    assert yaml.safe_load(f"x: {text}") == {"x": value}
    assert "." in text


def test_apply_entries_appends_a_new_env_and_replaces_an_earlier_tune(tmp_path):
    path = tmp_path / "ppo.yml"
    path.write_text("# header\ndefault:\n  steps: 1\n\n# source of A\nA-v0:\n  gamma: 0.9\n\n# last\nB-v0: {}\n")
    apply_entries(path, {"B-v0": {"gamma": 0.95}, "C-v0": {}}, ["# rlcli tune B-v0 ...", "#   details"])
    apply_entries(path, {"B-v0": {"gamma": 0.97, "network": {"hidden": [8, 8]}}}, ["# rlcli tune B-v0 again"])
    text = path.read_text()
    assert yaml.safe_load(text) == {"default": {"steps": 1}, "A-v0": {"gamma": 0.9},
                                    "B-v0": {"gamma": 0.97, "network": {"hidden": [8, 8]}}, "C-v0": {}}
    assert "# source of A\nA-v0:\n  gamma: 0.9\n" in text and "# last\n# rlcli tune B-v0 again\nB-v0:" in text
    assert text.count("#   details") == 1  # B's earlier note went with its entry; C's stays
    assert entry_lines("ALE/Pong-v5", {"n_envs": 8}) == ["ALE/Pong-v5:", "  n_envs: 8"]
