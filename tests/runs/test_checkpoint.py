"""Save/load round trips, atomic writes, and clear errors for corrupt or foreign files."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

from rlcli.algos.ppo import PPOConfig
from rlcli.config import EnvConfig, RunConfig
from rlcli.errors import CheckpointError, StorageError
from rlcli.runs import checkpoint
from rlcli.runs.rundir import RunDir, load_config
from rlcli.training.agents import agent_from_run, build_agent, make_env

CFG = RunConfig(env=EnvConfig(id="Pendulum-v1", backend="gymnasium"),
                algo=PPOConfig(n_envs=2, n_steps=16, minibatch_size=16, normalize_obs=True))


def test_round_trip_gives_the_same_actions(tmp_path):
    env = make_env(CFG, 2, 0)
    agent = build_agent(CFG, env, torch.device("cpu"))
    obs = torch.randn(32, 3)
    agent.obs_norm(obs * 3 + 1, update=True)  # non-trivial statistics must travel with the weights
    RunDir(tmp_path, CFG).save(agent.state_dict(), checkpoint.optimizer_tensors(agent.optimizers()), {"steps": 123})
    loaded = RunDir.open(tmp_path)
    assert loaded.cfg == CFG and loaded.meta["steps"] == 123
    assert loaded.meta["versions"]["torch"] == torch.__version__
    clone = agent_from_run(loaded, env, torch.device("cpu"))
    assert torch.equal(agent.predict(obs), clone.predict(obs))
    assert torch.equal(clone.obs_norm.rms.mean, agent.obs_norm.rms.mean)
    assert not list(tmp_path.glob(".*")), "no temporary files are left behind"


def test_optimizer_state_round_trip(tmp_path):
    env = make_env(CFG, 2, 0)
    agent = build_agent(CFG, env, torch.device("cpu"))
    loss = agent.net.value(torch.randn(4, 3)).sum()
    loss.backward()
    agent.optimizer.step()
    checkpoint.save_tensors(tmp_path / "opt.safetensors", checkpoint.optimizer_tensors(agent.optimizers()))
    other = build_agent(CFG, env, torch.device("cpu"))
    checkpoint.load_optimizer_tensors(other.optimizers(),
                                      checkpoint.load_tensors(tmp_path / "opt.safetensors"))
    a, b = agent.optimizer.state_dict()["state"], other.optimizer.state_dict()["state"]
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)


def test_corrupt_and_foreign_files_are_named(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        checkpoint.load_tensors(tmp_path / "bad.safetensors")
    safetensors.torch.save_file({"w": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(CheckpointError, match="not an rlcli model"):
        checkpoint.load_tensors(tmp_path / "foreign.safetensors")
    with pytest.raises(CheckpointError, match="not an rlcli run directory"):
        RunDir.open(tmp_path)
    (tmp_path / "config.yaml").write_text("env: {id: X}\nalgo: {gama: 1}\n")
    with pytest.raises(CheckpointError, match="gama"):
        RunDir.open(tmp_path)
    with pytest.raises(CheckpointError, match="there is no run directory at"):
        RunDir.open(tmp_path / "nosuchdir")


def test_a_failed_write_keeps_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    env = make_env(CFG, 2, 0)
    agent = build_agent(CFG, env, torch.device("cpu"))
    run = RunDir(tmp_path, CFG)
    run.save(agent.state_dict(), checkpoint.optimizer_tensors(agent.optimizers()), {"steps": 100})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_fsync, calls = os.fsync, []

    def full_disk(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 3:  # model and optimizer staged, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    with torch.no_grad():
        next(agent.parameters()).add_(1.0)
    with pytest.raises(StorageError, match=r"cannot write .*config.yaml: No space left on device"):
        run.save(agent.state_dict(), checkpoint.optimizer_tensors(agent.optimizers()), {"steps": 200})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "no file replaced, none left over"
    again = RunDir.open(tmp_path)
    assert again.steps == 100 and again.model(resuming=True).keys() == agent.state_dict().keys()


def test_runs_saved_with_env_kwargs_in_the_algorithm_section_still_load(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "env: {id: Pong-v5}\nalgo: {algo: ppo, n_envs: 4, env_kwargs: {max_episode_steps: 100}}\n")
    cfg = load_config(tmp_path)
    assert cfg.env.kwargs == {"max_episode_steps": 100} and cfg.algo.n_envs == 4


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "meta.json"
    checkpoint.write_json(path, {"a": 1})

    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(OSError):
        checkpoint.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_optimizer_state_that_does_not_fit_is_a_checkpoint_error():
    import gymnasium as gym

    from rlcli.algos.ppo import PPO, PPOConfig
    from rlcli.runs.checkpoint import CheckpointError, load_optimizer_tensors, optimizer_tensors

    small = PPO(PPOConfig(), gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 1, torch.device("cpu"))
    wide = PPO(PPOConfig(), gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(2), 1, torch.device("cpu"))
    wide.net.evaluate(torch.zeros(2, 5), torch.zeros(2, 1))[0].sum().backward()
    wide.optimizer.step()
    with pytest.raises(CheckpointError, match="does not fit"):
        load_optimizer_tensors(small.optimizers(), optimizer_tensors(wide.optimizers()))


def test_a_save_killed_between_its_renames_is_completed_when_the_run_is_opened(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    old = {folder / name: b"old " + name.encode() for name in ("model.safetensors", "meta.json")}
    checkpoint.write_files(old)
    assert not (folder / checkpoint.JOURNAL).exists()  # a whole write leaves no journal
    new = {path: b"new " + path.name.encode() for path in old}
    staged = [(checkpoint._stage(path, data), path) for path, data in new.items()]
    journal = [[Path(tmp).name, path.name] for tmp, path in staged]
    checkpoint.atomic_write(folder / checkpoint.JOURNAL, json.dumps(journal).encode())
    os.replace(*staged[0])  # killed here: the model renamed, meta.json still the old one
    assert (folder / "meta.json").read_bytes() == b"old meta.json"
    checkpoint.finish_renames(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {
        "model.safetensors": b"new model.safetensors", "meta.json": b"new meta.json"}


def test_opening_a_run_that_is_saving_leaves_its_renames_to_the_process_saving(tmp_path):
    from rlcli.runs.lock import RunLock

    folder = tmp_path / "run"
    lock = RunLock.acquire(folder)  # a training process, in the middle of a save
    staged = checkpoint._stage(folder / "meta.json", b"new")
    checkpoint.atomic_write(folder / checkpoint.JOURNAL, json.dumps([[Path(staged).name, "meta.json"]]).encode())
    with pytest.raises(CheckpointError):  # eval, play, export: no config yet, but nothing moved
        RunDir.open(folder)
    assert Path(staged).is_file() and not (folder / "meta.json").exists()
    lock.release()  # the trainer was killed: the next to open the run completes its save
    with pytest.raises(CheckpointError):
        RunDir.open(folder)
    assert (folder / "meta.json").read_bytes() == b"new" and not Path(staged).exists()


def test_the_same_tensors_saved_in_separate_processes_are_the_same_bytes(tmp_path):
    # safetensors orders its metadata by a hash seeded per process: with three entries, four processes agree
    # by chance once in 216 tries
    script = ("import sys, hashlib, torch; from rlcli.runs.checkpoint import tensor_bytes; "
              "data = tensor_bytes({'b': torch.arange(3.0), 'a': torch.ones(2, 2)}, 7, {'x': [1, 'é']}); "
              "sys.stdout.write(hashlib.sha256(data).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
               for _ in range(4)}
    assert len(digests) == 1
    path = tmp_path / "t.safetensors"
    path.write_bytes(checkpoint.tensor_bytes({"b": torch.arange(3.0), "a": torch.ones(2, 2)}, 7, {"x": [1, "é"]}))
    tensors, values = checkpoint.load_tensors_and_values(path, 7)
    assert torch.equal(tensors["b"], torch.arange(3.0)) and torch.equal(tensors["a"], torch.ones(2, 2))
    assert values == {"x": [1, "é"]}
