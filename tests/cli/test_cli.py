"""The commands end to end, in-process through typer's CliRunner."""

import json

import imageio.v3 as iio
import pytest
from typer.testing import CliRunner

from rlcli.cli import app

runner = CliRunner()
TINY = ["--steps", "1024", "--n-envs", "4", "-p", "n_steps=64", "-p", "minibatch_size=128",
        "-p", "n_epochs=2", "--eval-episodes", "2"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "cartpole"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(path), "--seed", "3", *TINY])
    assert result.exit_code == 0, result.output
    assert "Evaluated return" in result.output
    return path


def test_train_writes_a_portable_run_directory(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.yaml", "model.safetensors", "optimizer.safetensors", "meta.json", "eval.json",
            "metrics.csv", "tb", "best"} <= names
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["steps"] == 1024 and meta["seed"] == 3 and meta["finished"]
    assert {"rlcli", "torch", "gymnasium"} <= meta["versions"].keys()
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"step", "losses/approx_kl", "losses/clip_fraction", "losses/explained_variance",
            "charts/SPS", "charts/learning_rate"} <= set(header)
    assert not list(run_dir.rglob("*.pkl")) and not list(run_dir.rglob("*.pt"))


def test_a_budget_of_part_of_an_iteration_says_what_it_trains(tmp_path):
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(tmp_path / "run"), *TINY, "--steps", "1000"])
    assert result.exit_code == 0, result.output
    assert "for 1,000 steps (4 envs; 1,024 in whole iterations of 256)" in result.output
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["steps"] == 1024


def test_eval_json(run_dir):
    result = runner.invoke(app, ["eval", str(run_dir), "--episodes", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["episodes"] == 3 and len(data["returns"]) == 3 and data["env_id"] == "CartPole-v1"
    assert data["mean_return"] == pytest.approx(sum(data["returns"]) / 3)


def test_eval_human_readable(run_dir):
    result = runner.invoke(app, ["eval", str(run_dir), "-n", "2", "--stochastic"])
    assert result.exit_code == 0 and "± " in result.output and "over 2 episodes" in result.output


def test_play_writes_a_real_mp4(run_dir, tmp_path):
    video = tmp_path / "cartpole.mp4"
    result = runner.invoke(app, ["play", str(run_dir), "--video", str(video)])
    assert result.exit_code == 0, result.output
    frames = iio.imread(video, plugin="pyav") if _has_pyav() else _read_ffmpeg(video)
    assert len(frames) >= 8 and frames[0].ndim == 3 and frames[0].shape[-1] == 3
    assert frames[0].std() > 0  # a picture, not a blank frame


def test_resume_continues_the_step_count(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "resumed"
    shutil.copytree(run_dir, copy)
    result = runner.invoke(app, ["train", "--resume", str(copy), "--steps", "2048"])
    assert result.exit_code == 0, result.output
    assert "at step 1,024" in result.output
    meta = json.loads((copy / "meta.json").read_text())
    assert meta["steps"] == 2048 and meta["iterations"] == 8
    steps = [int(line.split(",")[0]) for line in (copy / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(steps) and steps[-1] == 2048 and steps.count(1024) == 1


@pytest.mark.parametrize("args, expected", [
    (["train", "CartPol-v1"], "unknown environment 'CartPol-v1'; did you mean CartPole-v1"),
    (["train", "CartPole-v1", "-p", "learning_rte=1"],
     "unknown hyperparameter 'learning_rte'; did you mean learning_rate"),
    (["train", "CartPole-v1", "-p", "gamma=2"], "invalid value for 'gamma'"),
    (["train", "CartPole-v1", "--algo", "c51"], "unknown algorithm 'c51'; choose one of: ppo, sac, dqn, pqn, td3"),
    (["train", "CartPole-v1", "--steps", "many"], "Invalid value for '--steps'"),
    (["eval"], "Missing argument"),
    (["train"], "missing ENV"),
    (["eval", "/no/such/run"], "no run directory or zoo agent named '/no/such/run'"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, expected):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.output
    assert "Traceback" not in result.output


def test_existing_run_dir_is_not_overwritten(run_dir):
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run_dir), *TINY])
    assert result.exit_code == 2 and "--resume" in result.output


def _has_pyav():
    from importlib.util import find_spec

    return find_spec("av") is not None


def _read_ffmpeg(path):
    import imageio.v2 as imageio

    with imageio.get_reader(str(path)) as reader:
        return [frame for frame in reader]


def test_track_logs_to_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "tracked"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(run), "--track",
                                 "--wandb-project", "rlcli-test", *TINY])
    assert result.exit_code == 0, result.output
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    assert json.loads((run / "meta.json").read_text())["wandb_id"]


SAC_TINY = ["--algo", "sac", "--steps", "600", "-p", "learning_starts=200", "-p", "log_every=200",
            "-p", "batch_size=64", "--eval-episodes", "1"]


def test_sac_train_eval_and_resume_with_replay_buffer(tmp_path):
    from safetensors import safe_open

    run = tmp_path / "sac"
    result = runner.invoke(app, ["train", "Pendulum-v1", "--run-dir", str(run), "--save-buffer", *SAC_TINY])
    assert result.exit_code == 0, result.output
    with safe_open(str(run / "replay.safetensors"), "pt") as f:
        assert f.get_tensor("obs").shape == (600 - 2, 3)  # 3 episodes of 200 steps: 2 reset rows
    with safe_open(str(run / "optimizer.safetensors"), "pt") as f:
        assert {k.split(".")[0] for k in f.keys()} == {"actor", "critic", "alpha"}
    # UTD 1: one gradient step per transition stored after the 200 warm-up transitions
    assert json.loads((run / "meta.json").read_text())["agent"]["updates"] == 598 - 200

    result = runner.invoke(app, ["train", "--resume", str(run), "--steps", "800"])  # buffer: from meta
    assert result.exit_code == 0, result.output
    # no second warm-up, and the third episode goes on: its last 2 steps, a reset row, 197 steps of a fourth
    meta = json.loads((run / "meta.json").read_text())
    assert meta["steps"] == 800 and meta["agent"]["updates"] == 398 + 199
    assert meta["resumes"] == [{"step": 600, "exact": True}]
    with safe_open(str(run / "replay.safetensors"), "pt") as f:
        assert f.get_tensor("obs").shape[0] == 598 + 199

    result = runner.invoke(app, ["eval", str(run), "-n", "2", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["algo"] == "sac"


def test_sac_on_discrete_actions_is_one_line_exit_2():
    result = runner.invoke(app, ["train", "CartPole-v1", "--algo", "sac"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: SAC needs continuous (Box) actions; this environment's are Discrete(2). Use --algo ppo"]


def test_resume_refuses_options_it_would_ignore(run_dir):
    result = runner.invoke(app, ["train", "CartPole-v1", "--resume", str(run_dir), "-p", "gamma=0.9"])
    assert result.exit_code == 2
    # the run's own ENV is accepted; what would be ignored is named
    assert "drop -p (" in result.output and "ENV" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_interrupted_save_is_detected_on_resume(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "torn"
    shutil.copytree(run_dir, copy)
    meta = json.loads((copy / "meta.json").read_text())
    meta["steps"] += 256  # as if meta.json were from a later save than model.safetensors
    (copy / "meta.json").write_text(json.dumps(meta))
    result = runner.invoke(app, ["train", "--resume", str(copy), "--steps", "4096"])
    assert result.exit_code == 2 and "the last save was interrupted" in result.output


@pytest.mark.parametrize("args, expected", [
    (["-p", "network=1", "-p", "network.hidden=[4]"], "nests under 'network'"),
    (["--config", "."], "cannot read . as a YAML text file"),
    (["-p", "network.trunk=cnn"], "normalize_obs must be false with the cnn trunk"),
])
def test_more_bad_input(args, expected, tmp_path):
    extra = ["-p", "normalize_obs=true"] if "cnn" in str(args) else []
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(tmp_path / "r"), *args, *extra])
    assert result.exit_code == 2 and expected in result.output, result.output


def test_hyperparams_shows_each_value_its_source_and_meaning():
    result = runner.invoke(app, ["hyperparams", "Hopper-v5", "--algo", "ppo", "--n-envs", "8", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    rows = {row["key"]: row for row in shown["hyperparameters"]}
    assert (shown["env"], shown["algo"]) == ("Hopper-v5", "ppo")
    assert rows["n_envs"] == {"key": "n_envs", "value": 8, "source": "-p", "description": "Envs stepped in parallel."}
    assert (rows["minibatch_size"]["value"], rows["minibatch_size"]["source"]) == (256, "fitted")
    table = runner.invoke(app, ["hyperparams", "Hopper-v5"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "group mujoco" in table.output and "Discount factor." in table.output
    bad = runner.invoke(app, ["hyperparams", "Hopper-v5", "-p", "gama=0.9"])
    assert bad.exit_code == 2 and "gamma" in bad.output
