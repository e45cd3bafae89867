"""Bad input and damaged files, as a new user meets them: one line naming what is wrong and what would be right,
exit 2, no traceback; shipped agents stay as they are; SIGTERM saves as Ctrl-C does."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.runs.rundir import zoo_dir

runner = CliRunner()
QUICK = ["--steps", "1024", "--eval-episodes", "1", "--backend", "gymnasium", "-p", "n_envs=2", "-p", "n_steps=64",
         "-p", "minibatch_size=64", "-p", "n_epochs=1"]


def _refused(args: list[str], *words: str) -> str:
    """The one line an invocation is refused with (exit 2, no traceback), checked to name ``words``."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "cartpole"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(path), *QUICK])
    assert result.exit_code == 0, result.output
    return path


def _damaged_copy(run: Path, tmp_path: Path, name: str, content: bytes | None) -> Path:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    if content is None:
        (copy / name).unlink()
    else:
        (copy / name).write_bytes(content)
    return copy


def test_a_negative_layer_size_names_the_key():
    _refused(["train", "CartPole-v1", "-p", "network.hidden=[-5]", "--steps", "100"], "network.hidden.0",
             "greater than 0")


def test_a_minibatch_larger_than_the_rollout_names_both_settings_without_the_config():
    line = _refused(["train", "CartPole-v1", "-p", "minibatch_size=1000000"], "minibatch_size=1000000",
                    "n_envs*n_steps=512")
    assert len(line) < 200 and "{" not in line


def test_a_run_dir_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "f"
    target.touch()
    _refused(["train", "CartPole-v1", "--run-dir", str(target), "--steps", "100"], "is a file")


@pytest.mark.parametrize("name", ["meta.json", "config.yaml", "eval.json"])
def test_a_damaged_run_file_is_one_line_naming_it_for_eval_and_resume(run, tmp_path, name):
    copy = _damaged_copy(run, tmp_path, name, os.urandom(300))
    _refused(["eval", str(copy), "-n", "1"], name)
    _refused(["train", "--resume", str(copy), "--steps", "2048"], name)


def test_a_truncated_eval_history_is_reported_not_reset(run, tmp_path):
    text = (run / "eval.json").read_bytes()
    copy = _damaged_copy(run, tmp_path, "eval.json", text[: len(text) // 2])
    _refused(["train", "--resume", str(copy), "--steps", "2048"], "eval.json", "damaged")
    assert (copy / "eval.json").read_bytes() == text[: len(text) // 2]


def test_a_run_without_meta_is_not_evaluated_at_zero_steps(run, tmp_path):
    copy = _damaged_copy(run, tmp_path, "meta.json", None)
    _refused(["eval", str(copy), "-n", "1"], "no saved checkpoint", "meta.json")


def test_export_into_an_existing_folder_writes_inside_it(run, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    result = runner.invoke(app, ["export", str(run), "--out", str(folder), "--format", "torchscript"])
    assert result.exit_code == 0, result.output
    assert (folder / "policy.pt").is_file() and (folder / "policy.pt.json").is_file()


@pytest.mark.parametrize("source,what", [("raise RuntimeError('boom')\n", "RuntimeError: boom"),
                                         ("def broken(:\n", "SyntaxError")])
def test_an_env_module_that_fails_to_import_is_the_users_one_line(tmp_path, monkeypatch, source, what):
    monkeypatch.chdir(tmp_path)  # found in the working directory, as --stop-when's modules are
    name = f"badmod_{what[:5].lower()}"  # a name of its own: the first test's folder stays on the path
    (tmp_path / f"{name}.py").write_text(source)
    _refused(["train", "MyEnv-v0", "--env-module", name], "--env-module", name, what)


def test_a_stop_hook_that_raises_is_named_and_the_checkpoint_stays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stopbad.py").write_text("def f(state):\n    raise ValueError('nope')\n")
    run_dir = tmp_path / "r"
    result = runner.invoke(app, ["train", "CartPole-v1", "--stop-when", "stopbad:f", "--run-dir", str(run_dir), *QUICK])
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len(errors) == 1 and "stopbad:f" in errors[0] and "ValueError: nope" in errors[0]
    assert (run_dir / "meta.json").is_file()
    sys.modules.pop("stopbad", None)


def test_a_config_of_nested_aliases_is_refused_at_once(tmp_path):
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"] + [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]"
                                                for i in range(1, 9)]
    bomb = tmp_path / "bomb.yml"
    bomb.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    _refused(["train", "CartPole-v1", "--config", str(bomb)], "bomb.yml", "aliases")
    assert time.perf_counter() - start < 10


def _digests(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def test_resuming_or_exporting_a_zoo_agent_leaves_it_as_shipped(tmp_path, monkeypatch):
    agent = zoo_dir() / "CartPole-v1"
    before = _digests(agent)
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "continued"
    steps = str(int(json.loads((agent / "meta.json").read_text())["steps"]) + 1024)
    result = runner.invoke(app, ["train", "--resume", str(agent), "--steps", steps, "--run-dir", str(copy)])
    assert result.exit_code == 0, result.output
    assert "shipped agent" in result.output and (copy / "model.safetensors").is_file()
    exported = runner.invoke(app, ["export", "CartPole-v1", "--format", "torchscript"])
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "export" / "CartPole-v1" / "policy.pt").is_file()
    assert _digests(agent) == before and not (agent / "export").exists()


@pytest.mark.parametrize("ctrl_c", ["default", "ignored"])  # ignored: a shell script's `rlcli train ... &`
def test_sigterm_saves_a_checkpoint_and_exits_143(tmp_path, ctrl_c):
    run_dir = tmp_path / "run"
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ctrl_c == "ignored" else None
    process = subprocess.Popen([sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--backend", "gymnasium",
                                "--steps", "10000000", "--eval-every", "0", "--run-dir", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=ignore)
    deadline = time.time() + 60
    while not (run_dir / "meta.json").is_file() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # past set-up, into the iterations
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 143, output
    assert "Interrupted at step" in output and "checkpoint saved" in output
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["steps"] > 0


def test_a_second_writer_is_refused_naming_the_holder_and_a_stale_lock_is_taken_over(run, tmp_path):
    from rlcli.runs.lock import LOCK, RunLock

    copy = _damaged_copy(run, tmp_path, "metrics.csv", (run / "metrics.csv").read_bytes())  # a run of its own
    steps = str(json.loads((copy / "meta.json").read_text())["steps"] + 128)
    held = RunLock.acquire(copy)  # this process trains it
    try:
        _refused(["train", "--resume", str(copy), "--steps", steps], "being trained by process",
                 str(os.getpid()))
    finally:
        held.release()
    (copy / LOCK).write_text("999999\n")  # a killed writer's file: its lock went with its process
    result = runner.invoke(app, ["train", "--resume", str(copy), "--steps", steps])
    assert result.exit_code == 0, result.output
    assert json.loads((copy / "meta.json").read_text())["steps"] >= int(steps)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is here")
def test_tune_on_a_gpu_that_is_not_there_is_refused_before_any_trial(tmp_path):
    _refused(["tune", "CartPole-v1", "--trials", "1", "--steps", "1000", "--device", "cuda",
              "--out", str(tmp_path / "study")], "--device cuda", "no CUDA device")
    assert not (tmp_path / "study").exists()


def test_a_run_killed_at_random_points_always_loads_and_resumes(run, tmp_path):
    """SIGKILL, 20 times, at random moments of a resumed run (set-up, iterations, evaluations, saves): the
    directory always opens with a whole checkpoint, and the next resume goes on from it."""
    from rlcli.runs.rundir import RunDir

    copy = _damaged_copy(run, tmp_path, "metrics.csv", (run / "metrics.csv").read_bytes())
    rng = __import__("random").Random(0)
    command = [sys.executable, "-m", "rlcli", "train", "--resume", str(copy), "--steps", "10000000",
               "--threads", "1"]
    for _ in range(20):
        before = RunDir.open(copy).steps
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 4.0))
        process.kill()
        process.wait()
        opened = RunDir.open(copy)  # a torn checkpoint would fail here
        assert opened.steps >= before and opened.model(resuming=True)  # the model of the step meta names
    result = runner.invoke(app, ["train", "--resume", str(copy), "--steps", str(RunDir.open(copy).steps + 128)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("typo,meant", [("mpe2.simple_sprad_v3", "mpe2.simple_spread_v3"),
                                        ("tictactoe_v2", "tictactoe_v3")])
def test_a_misspelt_multi_agent_id_gets_close_matches(typo, meant):
    line = _refused(["train", typo, "--steps", "10"], f"unknown environment '{typo}'", "did you mean", meant)
    assert "gymnasium.pprint_registry" not in line


def test_a_run_dir_holding_someone_elses_files_or_under_a_file_is_refused_untouched(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "metrics.csv").write_text("important,data\n")
    _refused(["train", "CartPole-v1", "--run-dir", str(theirs), *QUICK], "holds files that are not a run's",
             "metrics.csv")
    assert [p.name for p in theirs.iterdir()] == ["metrics.csv"]
    assert (theirs / "metrics.csv").read_text() == "important,data\n"
    (tmp_path / "file").touch()
    _refused(["train", "CartPole-v1", "--run-dir", str(tmp_path / "file" / "run"), *QUICK], "cannot create",
             "--run-dir")
    _refused(["tune", "CartPole-v1", "--out", str(theirs), "--trials", "1", "--steps", "512"],
             "holds files that are not a study's")
    results = Path(__file__).parents[2] / "zoo" / "benchmarks" / "0.1.0" / "ppo-hopper-1m"
    _refused(["benchmark", "compare", str(results), str(results), "--out", str(tmp_path / "file" / "c.md")],
             "cannot create")


def test_seeds_outside_the_range_every_library_takes_are_refused():
    for args in (["train", "CartPole-v1", "--seed", "-1"], ["train", "CartPole-v1", "--seed", str(2**32)],
                 ["eval", "CartPole-v1", "--seed", "-5"],
                 ["benchmark", "--envs", "CartPole-v1", "--seeds", str(2**32), "--dry-run"],
                 ["tune", "CartPole-v1", "--seed", str(2**32 - 1), "--seeds-per-trial", "2"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output, args


@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_a_seed_past_int32_trains_evaluates_and_resumes(tmp_path, backend):
    # numpy takes seeds below 2**32, envpool below 2**31: a run's seeds (its seed plus its steps and the
    # evaluation's offset) are folded into envpool's range, where they used to fail, and passed on elsewhere
    run = tmp_path / "run"
    common = ["--backend", backend, "--eval-episodes", "1", "-p", "n_envs=2", "-p", "n_steps=64", "-p",
              "minibatch_size=64", "-p", "n_epochs=1"]
    result = runner.invoke(app, ["train", "CartPole-v1", "--seed", str(2**32 - 100), "--steps", "256",
                                 "--run-dir", str(run), *common])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "512"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "meta.json").read_text())["steps"] == 512


def test_a_resume_that_would_drop_an_option_or_train_nothing_says_so(run, tmp_path):
    copy = _damaged_copy(run, tmp_path, "eval.json", (run / "eval.json").read_bytes())  # an undamaged copy
    for option, value in (("--seed", "7"), ("--eval-episodes", "3"), ("--eval-every", "512"),
                          ("--run-dir", str(tmp_path / "elsewhere"))):
        _refused(["train", "--resume", str(copy), "--steps", "2048", option, value], f"drop {option}")
    _refused(["train", "--resume", str(copy)], "has finished", "give --steps above")
    _refused(["train", "--resume", str(copy), "--steps", "512"], "--steps 512 is below")
    assert json.loads((copy / "eval.json").read_text()) == json.loads((run / "eval.json").read_text())
    assert not (tmp_path / "elsewhere").exists()


def test_a_run_stopped_past_its_budget_before_its_final_evaluation_resumes_to_make_it(tmp_path):
    # a budget short of whole iterations trains past it; a run killed between its last checkpoint and its final
    # evaluation is saved unfinished there, and a benchmark resumes it with the same --steps
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), *QUICK, "--steps", "1000"])
    assert result.exit_code == 0, result.output
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "finished": False}))  # as the kill leaves it
    assert meta["steps"] == 1024
    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "1000"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "meta.json").read_text())["finished"]


def test_a_refused_resume_of_a_shipped_agent_leaves_no_copy_behind(tmp_path):
    copy = tmp_path / "continued"
    _refused(["train", "--resume", str(zoo_dir() / "CartPole-v1"), "--run-dir", str(copy), "--algo", "dqn"],
             "drop --algo")
    assert not copy.exists()


def test_a_buffer_larger_than_memory_is_one_line(tmp_path):
    _refused(["train", "CartPole-v1", "--algo", "dqn", "-p", "buffer_size=100000000000", "--steps", "100",
              "--run-dir", str(tmp_path / "run")], "does not fit", "buffer_size")
    assert not (tmp_path / "run").exists()


def test_play_without_a_display_never_replaces_a_file_it_was_not_given(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    (tmp_path / "play.mp4").write_bytes(b"the user's")
    result = runner.invoke(app, ["play", str(run)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "play.mp4").read_bytes() == b"the user's"
    assert (tmp_path / "play-2.mp4").stat().st_size > 0 and "wrote play-2.mp4" in result.output
