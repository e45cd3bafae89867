"""rlcli publish / pull and hf:// names, through the real huggingface_hub client against tests/hub_server.py."""

import json
import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.runs.rundir import RunDir, cached_repo_id, load_config
from rlcli.share import hub

pytest.importorskip("huggingface_hub")
pytest.importorskip("onnxruntime")
from tests.hub_server import FakeHub

runner = CliRunner()
TINY = ["--steps", "1024", "--n-envs", "4", "-p", "n_steps=64", "-p", "minibatch_size=128",
        "-p", "n_epochs=2", "--eval-episodes", "2", "--threads", "1"]
REPO = "alice/ppo-CartPole-v1"
PUBLISHED = {"README.md", "config.yaml", "model.safetensors", "meta.json", "results.json", "eval.json",
             "metrics.csv", "hyperparams.yml", "policy.onnx", "policy.onnx.json", "learning_curve.png",
             "replay.mp4"}


def _hub_env(mp: pytest.MonkeyPatch, home: Path, url: str, token: str | None) -> None:
    """The endpoint, token and cache as a user would set them; huggingface_hub read HF_HOME and the
    cache at import, so its constants are pointed at ``home`` too."""
    from huggingface_hub import constants

    mp.setenv("HF_ENDPOINT", url)
    if token is None:
        mp.delenv("HF_TOKEN", raising=False)
    else:
        mp.setenv("HF_TOKEN", token)
    mp.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    mp.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    mp.setenv("HF_HOME", str(home))
    mp.setattr(constants, "HF_HUB_OFFLINE", False)
    mp.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    mp.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))  # no stored login of this machine's user


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "cartpole"
    result = runner.invoke(app, ["train", "CartPole-v1", "--run-dir", str(path), "--seed", "3", *TINY])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def published(run_dir, tmp_path_factory):
    """A hub with the tiny run published to it (private, 3 episodes, with its replay), left serving."""
    home = tmp_path_factory.mktemp("hf_home")
    with FakeHub() as server, pytest.MonkeyPatch.context() as mp:
        _hub_env(mp, home, server.url, server.token)
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", REPO, "--episodes", "3", "--private"])
        assert result.exit_code == 0, result.output
        yield server, result.output, mp


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    def set_up(url: str, token: str | None) -> None:
        _hub_env(monkeypatch, tmp_path / "hf_home", url, token)

    return set_up


def test_publish_makes_one_commit_with_every_file(published, run_dir):
    server, output, _ = published
    assert server.count("POST", "/commit/") == 1
    (commit,) = server.commits(REPO)
    tb = [p for p in commit.added if p.startswith("tb/events.out.tfevents.")]
    assert set(commit.added) == PUBLISHED | set(tb) and len(tb) == 1
    assert server.created == [{"name": "ppo-CartPole-v1", "organization": "alice", "visibility": "private",
                               "type": "model"}]
    assert commit.files["model.safetensors"] == (run_dir / "model.safetensors").read_bytes()
    assert f"published {server.url}/{REPO} (13 files in one commit)" in output
    results = json.loads(commit.files["results.json"])
    assert results["episodes"] == 3 and len(results["returns"]) == 3 and results["steps_trained"] == 1024
    assert f"{results['mean_return']:.2f} ± {results['std_return']:.2f} over 3 episodes" in output


def test_model_card_follows_the_hub_rl_convention(published):
    from huggingface_hub import ModelCard

    server, _, _ = published
    readme = server.commits(REPO)[0].files["README.md"].decode()
    results = json.loads(server.commits(REPO)[0].files["results.json"])
    meta = yaml.safe_load(readme.split("---\n")[1])
    assert meta["library_name"] == "rlcli"
    assert meta["tags"][:4] == ["CartPole-v1", "reinforcement-learning", "deep-reinforcement-learning", "ppo"]
    (entry,) = meta["model-index"]
    (result,) = entry["results"]
    assert result["task"]["type"] == "reinforcement-learning"
    assert result["dataset"] == {"name": "CartPole-v1", "type": "CartPole-v1"}
    expected = f"{results['mean_return']:.2f} +/- {results['std_return']:.2f}"
    assert result["metrics"] == [{"type": "mean_reward", "value": expected, "name": "mean_reward",
                                  "verified": False}]
    card = ModelCard(readme)  # the Hub's own parser reads the same score
    assert card.data.eval_results[0].metric_value == expected
    assert card.data.eval_results[0].dataset_type == "CartPole-v1"
    # the card shows the trained run's hyperparameters, the same as the published hyperparams.yml
    published_lr = yaml.safe_load(server.commits(REPO)[0].files["hyperparams.yml"])["learning_rate"]
    assert yaml.safe_dump({"learning_rate": published_lr}).strip() in readme
    for text in (f"rlcli pull {REPO}", f"rlcli play hf://{REPO}", f"rlcli eval hf://{REPO}",
                 "--config alice__ppo-CartPole-v1/hyperparams.yml", "![learning curve](learning_curve.png)",
                 "| torch |"):
        assert text in readme


def test_published_replay_is_a_real_video(published, tmp_path):
    import imageio.v2 as imageio

    server, _, _ = published
    video = tmp_path / "replay.mp4"
    video.write_bytes(server.commits(REPO)[0].files["replay.mp4"])
    with imageio.get_reader(str(video)) as reader:
        frames = [frame for frame in reader]
    assert len(frames) >= 8 and frames[0].ndim == 3 and frames[0].shape[-1] == 3
    assert frames[0].std() > 0  # a picture, not a blank frame


def test_the_replay_reports_each_frame_it_records(run_dir, tmp_path):
    counts: list[int] = []
    frames = hub.record_replay(run_dir, tmp_path / "replay.mp4", 12345, on_frame=counts.append)
    assert frames > 0 and counts == list(range(1, frames + 1))  # what publish's frame count shows


def _actions(run: Path, obs: np.ndarray) -> np.ndarray:
    from rlcli.training.agents import agent_from_run, make_env, resolve_device

    loaded = RunDir.open(run)
    env = make_env(loaded.cfg, 1, 0)
    try:
        agent = agent_from_run(loaded, env, resolve_device("cpu"))
        with torch.no_grad():
            return agent.predict(torch.as_tensor(obs), True).cpu().numpy()
    finally:
        env.close()


def test_pull_into_a_fresh_directory_acts_identically(published, run_dir, tmp_path):
    pulled = tmp_path / "pulled"
    result = runner.invoke(app, ["pull", REPO, "--run-dir", str(pulled)])
    assert result.exit_code == 0, result.output
    assert f"pulled {REPO} into {pulled}: CartPole-v1 (ppo, 1,024 steps)" in result.output
    assert PUBLISHED <= {p.name for p in pulled.iterdir()}
    obs = (np.random.default_rng(0).normal(size=(256, 4)) * [2.0, 1.0, 0.2, 1.0]).astype(np.float32)
    original, copy = _actions(run_dir, obs), _actions(pulled, obs)
    assert np.array_equal(original, copy) and len(set(original.tolist())) == 2  # both actions occur


def test_the_cards_retrain_command_trains_the_same_configuration(published, run_dir, tmp_path, monkeypatch):
    import shlex

    server, _, _ = published
    readme = server.commits(REPO)[0].files["README.md"].decode()
    (command,) = [line for line in readme.splitlines() if line.startswith("rlcli train ")]
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["pull", REPO, "--run-dir", "alice__ppo-CartPole-v1"]).exit_code == 0
    args = shlex.split(command)[1:] + ["--run-dir", "retrained", "--threads", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    original, again = load_config(run_dir), load_config(tmp_path / "retrained")
    assert again.algo == original.algo and again.eval == original.eval and again.seed == original.seed


def test_eval_and_play_take_hf_names(published, tmp_path):
    server, _, _ = published
    result = runner.invoke(app, ["eval", f"hf://{REPO}", "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["env_id"] == "CartPole-v1" and data["episodes"] == 2 and data["steps_trained"] == 1024
    assert "/hub/models--alice--ppo-CartPole-v1/snapshots/" in data["run"]  # huggingface_hub's cache
    gets = server.count("GET", "/resolve/")
    video = tmp_path / "agent.mp4"
    result = runner.invoke(app, ["play", f"hf://{REPO}", "--video", str(video)])
    assert result.exit_code == 0 and video.stat().st_size > 1000, result.output
    assert server.count("GET", "/resolve/") == gets  # the second use is served from the cache

    from huggingface_hub import constants

    requests = len(server.requests)
    with pytest.MonkeyPatch.context() as mp:  # HF_HUB_OFFLINE=1: the cached copy, without asking the Hub
        mp.setattr(constants, "HF_HUB_OFFLINE", True)
        result = runner.invoke(app, ["eval", f"hf://{REPO}", "-n", "1"])
    assert result.exit_code == 0 and "CartPole-v1 (ppo, 1,024 steps)" in result.output, result.output
    assert len(server.requests) == requests


def test_uploading_again_to_our_repo_adds_a_commit(published, run_dir):
    server, _, _ = published
    folder = run_dir / "hub"  # what the publish above built
    for _ in range(2):  # the second creation answers 409 for a model that is ours: carry on
        assert hub.upload(folder, "alice/copy") == f"{server.url}/alice/copy"
    assert len(server.commits("alice/copy")) == 2 and server.repos["alice/copy"].repo_type == "model"


def test_dry_run_builds_the_folder_and_uploads_nothing(run_dir, tmp_path, hub_env):
    with FakeHub() as server:
        hub_env(server.url, None)  # and needs no token
        out = tmp_path / "folder"
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", REPO, "--dry-run", "--no-video",
                                     "--episodes", "1", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert server.requests == []
    names = {p.name for p in out.iterdir()}
    assert PUBLISHED - {"replay.mp4"} <= names and "replay.mp4" not in names
    assert f"{out}/  (13 files," not in result.output and f"{out}/  (12 files," in result.output
    assert "dry run: nothing uploaded to alice/ppo-CartPole-v1" in result.output


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case, expected", [
    ("no token", "no Hugging Face token: log in with `hf auth login` or set HF_TOKEN"),
    ("server down", "cannot reach the Hub at http://127.0.0.1:"),
    ("bad token", "rejected the Hugging Face token (401)"),
])
def test_login_problems_are_one_line_exit_2_before_any_work(case, expected, run_dir, tmp_path, hub_env):
    with FakeHub() as server:
        url = f"http://127.0.0.1:{_closed_port()}" if case == "server down" else server.url
        hub_env(url, {"no token": None, "bad token": "hf_wrong"}.get(case, server.token))
        out = tmp_path / "folder"
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", REPO, "--out", str(out)])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.output
        assert not out.exists()  # it failed before evaluating
        assert server.count("POST", "/api/repos/create") == 0


def test_a_dataset_of_the_same_name_is_one_line_exit_2(run_dir, tmp_path, hub_env):
    with FakeHub() as server:
        hub_env(server.url, server.token)
        server.add_repo(REPO, "dataset", {"data.csv": b"a,b\n"})
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", REPO, "--no-video", "--episodes", "1",
                                     "--out", str(tmp_path / "folder")])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert lines == [f"error: {REPO} already exists on {server.url} as a dataset, not a model; "
                         "choose another --repo-id"]
        assert server.count("POST", "/commit/") == 0


def test_pull_errors_are_one_line_exit_2(tmp_path, hub_env, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with FakeHub() as server:
        hub_env(server.url, None)  # public downloads need no token
        server.add_repo("alice/notes", "model", {"README.md": b"# notes\n"})
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "config.yaml").write_text("env: {id: CartPole-v1}\n")
        for args, expected in [
            (["pull", "alice/missing"], f"no such model: alice/missing on {server.url}"),
            (["pull", "alice/notes"], "alice/notes is not an rlcli agent: it has no config.yaml"),
            (["pull", "just-a-name"], "'just-a-name' is not a Hub repo id; expected user/name"),
            (["pull", "alice/bad name"], "'alice/bad name' is not a valid Hub repo id: Repo id must use"),
            (["eval", "hf://alice/x--y"], "'hf://alice/x--y' is not a valid Hub repo id: Cannot have -- or .."),
            (["pull", "alice/notes", "--run-dir", "mine"], "mine already holds a run that was not pulled"),
            (["eval", "hf://alice/missing@v2"], "no such model: alice/missing"),
        ]:
            result = runner.invoke(app, args)
            assert result.exit_code == 2, (args, result.output)
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.output
        assert not (tmp_path / "runs" / "alice__missing").exists()
        assert not (tmp_path / "runs" / "alice__bad name").exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_invalid_repo_id_is_one_line_exit_2_before_any_work(dry_run, run_dir, tmp_path, hub_env):
    with FakeHub() as server:
        hub_env(server.url, server.token)
        out = tmp_path / "folder"
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", "a/b c", "--out", str(out),
                                     *(["--dry-run"] if dry_run else [])])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            "error: 'a/b c' is not a valid Hub repo id: Repo id must use alphanumeric chars, '-', '_' or '.'. "
            "The name cannot start or end with '-' or '.' and the maximum length is 96"]
        assert not out.exists() and server.requests == []


def test_the_library_refusing_a_name_is_a_hub_error():
    from huggingface_hub.utils import validate_repo_id

    with pytest.raises(hub.HubError, match=r"^huggingface_hub refused downloading a/b: Cannot have -- or \.\. "
                                           r"in repo_id: 'a/b--c'\.$"):
        with hub._hub_errors("a/b", "downloading a/b"):
            validate_repo_id("a/b--c")


@pytest.mark.parametrize("dry_run", [True, False])
def test_missing_onnx_packages_are_one_line_exit_2_before_any_work(dry_run, run_dir, tmp_path, hub_env,
                                                                    monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if it were not installed
    with FakeHub() as server:
        hub_env(server.url, server.token)
        out = tmp_path / "folder"
        result = runner.invoke(app, ["publish", str(run_dir), "--repo-id", REPO, "--out", str(out),
                                     *(["--dry-run"] if dry_run else [])])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            "error: ONNX export needs onnx, onnxscript and onnxruntime (onnxscript is missing): "
            'pip install "rlcli[export]"']
        assert not out.exists() and server.requests == []


def _dry_run(run: str, *args: str, repo: str = REPO):
    return runner.invoke(app, ["publish", run, "--repo-id", repo, "--dry-run", "--no-video", "--episodes", "1",
                               *args])


def test_a_failed_or_interrupted_build_leaves_the_folder_as_it_was(run_dir, tmp_path, hub_env, monkeypatch):
    from rlcli.errors import UsageError
    from rlcli.share import export

    hub_env("http://127.0.0.1:9", None)
    real_export = export.export_policy

    def failing(*args, **kwargs):
        raise UsageError("the export failed")

    work = tmp_path / "work"
    out = work / "folder"
    monkeypatch.setattr(export, "export_policy", failing)
    result = _dry_run(str(run_dir), "--out", str(out))
    assert result.exit_code == 2 and "error: the export failed" in result.output, result.output
    assert list(work.iterdir()) == []  # neither the folder nor its half-built copy

    monkeypatch.setattr(export, "export_policy", real_export)
    result = _dry_run(str(run_dir), "--out", str(out))  # not refused as "not a folder built by rlcli publish"
    assert result.exit_code == 0, result.output
    built = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert hub.RESULTS in built and hub.ONNX in built

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "export_policy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hub.build_folder(run_dir, REPO, out, episodes=1, video=False)
    assert [p.name for p in work.iterdir()] == ["folder"]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == built  # the earlier build, whole


def test_a_run_that_cannot_be_written_builds_in_the_working_directory(run_dir, tmp_path, hub_env, monkeypatch):
    import os

    hub_env("http://127.0.0.1:9", None)
    installed = tmp_path / "site-packages" / "zoo" / "CartPole-v1"
    shutil.copytree(run_dir, installed, ignore=shutil.ignore_patterns("hub", "export"))
    real_access = os.access
    # as for an agent installed by root; permission bits alone would not stop a test run as root
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != installed and real_access(
        path, mode, **kw))
    monkeypatch.chdir(tmp_path)
    result = _dry_run(str(installed))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hub" / "alice__ppo-CartPole-v1" / hub.RESULTS).is_file()
    assert sorted(p.name for p in installed.iterdir()) == sorted(p.name for p in run_dir.iterdir()
                                                                 if p.name not in ("hub", "export"))

    (tmp_path / "a-file").write_text("")
    result = _dry_run(str(installed), "--out", str(tmp_path / "a-file" / "folder"))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot build the repo folder in {tmp_path / 'a-file'} ("
                                                   ) and lines[0].endswith("choose another place with --out"), lines


def test_a_run_from_the_hub_cache_is_published_and_exported_outside_it(published, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snapshot = hub.download(f"hf://{REPO}", acting_only=True)
    assert cached_repo_id(snapshot) == REPO
    before = sorted(p.name for p in snapshot.iterdir())
    result = _dry_run(f"hf://{REPO}", repo="alice/again")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hub" / "alice__again" / hub.README).is_file()
    result = runner.invoke(app, ["export", f"hf://{REPO}"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "export" / "alice__ppo-CartPole-v1" / "policy.onnx.json").is_file()
    assert sorted(p.name for p in snapshot.iterdir()) == before  # the cached download stays as it was


def test_a_namespace_the_token_cannot_write_is_one_line_exit_2(published, run_dir):
    server, _, _ = published
    with pytest.raises(hub.HubError, match=r"refused creating bob/x \(403: You don't have the rights to create a "
                                           r"repo under 'bob'\); the token needs write access there"):
        hub.upload(run_dir / "hub", "bob/x")


def test_hf_names_can_pin_a_revision(published):
    server, _, _ = published
    commit = server.commits(REPO)[0]
    path = hub.download(f"hf://{REPO}@{commit.oid}", acting_only=True)
    assert path.name == commit.oid
    assert (path / "model.safetensors").read_bytes() == commit.files["model.safetensors"]
    assert {p.name for p in path.iterdir()} == set(hub.ACTING_FILES)
