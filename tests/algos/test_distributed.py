"""One run trained by several processes (torch.distributed, gloo on CPU): one update by two processes equals one
process's over their rows; their normalisation statistics pool to one process's; they learn, stop together on
Ctrl-C with one checkpoint that resumes exactly, and a process that dies ends the run with one line."""

import csv
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from rlcli.algos.ppo import clipped_surrogate_loss, pooled_standardize, row_mean
from rlcli.algos.world import SINGLE, World, envs_per_process, gpu_of
from rlcli.cli import app
from rlcli.errors import UsageError
from rlcli.training.launch import PEER_LOST_EXIT, failed, without_option
from tests.distributed_workers import one_update_by_two, threads_of_a_closed_world
from tests.waiting import wait_for

TRAIN = [sys.executable, "-m", "rlcli", "train"]
# a small CartPole iteration: two processes of two envs x 32 steps, 128 env steps in all
SMALL = ["CartPole-v1", "--backend", "gymnasium", "--seed", "5", "--eval-every", "0", "--eval-episodes", "2",
         "-p", "n_envs=2", "-p", "n_steps=32", "-p", "minibatch_size=64", "-p", "n_epochs=2",
         "-p", "normalize_obs=true", "-p", "normalize_reward=true"]


def test_a_process_share_of_a_mean_and_pooled_advantages_in_one_process_are_the_plain_ones():
    g = torch.Generator().manual_seed(1)
    values, advantages, ratio = torch.randn(50, generator=g), torch.randn(50, generator=g) * 3 + 1, torch.rand(50) + 0.5
    assert row_mean(values[:20], torch.tensor(50.0)) + row_mean(values[20:], torch.tensor(50.0)) == pytest.approx(
        float(values.mean()), abs=1e-6)
    assert float(clipped_surrogate_loss(advantages, ratio, 0.2, torch.tensor(100.0))) == pytest.approx(
        float(clipped_surrogate_loss(advantages, ratio, 0.2)) / 2, rel=1e-5)
    count, standardized = pooled_standardize(advantages, SINGLE, normalize=True)
    assert float(count) == 50
    torch.testing.assert_close(standardized, (advantages - advantages.mean()) / (advantages.std() + 1e-8))
    assert torch.equal(pooled_standardize(advantages, SINGLE, normalize=False)[1], advantages)


def test_a_world_of_one_is_its_own_lead_and_its_collectives_hand_back_what_they_get():
    opened = []
    assert SINGLE.on_lead(lambda path: opened.append(path) or path, "run") == "run" and opened == ["run"]
    assert SINGLE.from_lead({"steps": 3}) == {"steps": 3} and SINGLE.to_lead(7) == [7]
    assert SINGLE.lead_to_others(lambda: opened.append("again")) is None and opened == ["run"]
    assert SINGLE.flags(True, False) == (True, False)
    other = World(rank=1, size=2)
    assert other.on_lead(lambda: opened.append("not here")) is None and opened == ["run"]


def two_processes(target, out: Path) -> list[int | None]:
    """Runs ``target(rank, port, str(out))`` in two spawned processes of one world; their exit codes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=target, args=(rank, port, str(out))) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
        if p.exitcode is None:
            p.kill()
    return [p.exitcode for p in processes]


def test_one_update_by_two_processes_equals_one_process_over_their_rows(tmp_path):
    """Two processes of 4 envs x 16 steps each make one update (3 epochs of 4 minibatches of 32 rows, 16 from
    each, the adaptive-KL schedule, observation, reward and value normalisation); one process over both processes' rows,
    drawn into the same minibatches, makes the same. The weights agree to 1e-6: the same sums taken in another
    order (two half sums and an all-reduce; the advantages' moments in float64) differ in float32's last bits,
    about 6e-8 at these weights' size (0.5-1), and twelve Adam steps, which divide each gradient by its own running
    scale, keep such differences at that size (measured: 6e-8, one unit in the last place, against a change of
    the weights of 1.5e-2 in this update)."""
    out = tmp_path / "found.json"
    assert two_processes(one_update_by_two, out) == [0, 0]
    found = json.loads(out.read_text())
    assert found["minibatches_per_epoch"] == [4, 4, 4]
    assert found["processes_equal"] and found["stats_equal_between_processes"]
    assert found["largest_weight_difference"] < 1e-6 < 1e-3 < found["largest_weight_change"]
    assert found["largest_stats_relative_difference"] < 1e-12
    # the adaptive-KL decisions: the same on both processes and as one process's, and not all "keep"
    assert found["rates"][0] == found["rates"][1] == found["reference_rates"]
    assert len(set(found["rates"][0])) > 1
    for name, value in found["reference_metrics"].items():
        assert found["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names as Linux shows them")
def test_a_closed_world_leaves_no_gloo_thread_running(tmp_path):
    """Closing the world ends every thread its process groups started. A group still referenced keeps gloo's
    threads until the interpreter ends, and destroying them then aborts the process now and then ("terminate
    called without an active exception", SIGABRT) after a run that went well."""
    out = tmp_path / "threads"
    assert two_processes(threads_of_a_closed_world, out) == [0, 0]
    for rank in range(2):
        found = json.loads(Path(f"{out}.{rank}").read_text())
        assert any("gloo" in name for name in found["open"]), found
        assert not any("gloo" in name for name in found["closed"]), found


def test_resuming_with_another_number_of_processes_keeps_the_global_batch():
    assert envs_per_process(8, 2, 4) == 4 and envs_per_process(8, 2, 1) == 16 and envs_per_process(8, 1, 8) == 1
    with pytest.raises(UsageError, match="16 envs in all .* 3 processes"):
        envs_per_process(8, 2, 3)


def test_each_process_on_a_machine_gets_a_gpu_of_its_own_or_one_line_saying_there_are_too_few():
    assert [gpu_of(rank, 4, 4) for rank in range(4)] == [0, 1, 2, 3] and gpu_of(1, 2, 8) == 1
    with pytest.raises(UsageError, match="2 processes on this machine training on CUDA need a GPU each, and "
                                         "torch sees 1: train with --nproc 1"):
        gpu_of(0, 2, 1)  # NCCL refuses two processes of a run on one GPU
    assert [gpu_of(rank, 2, 1, mapped=True) for rank in range(2)] == [0, 0]  # each sees only its own GPU


def test_nproc_beyond_the_gpus_is_refused_before_any_process_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    result = CliRunner().invoke(app, ["train", *SMALL, "--nproc", "2", "--run-dir", str(tmp_path / "run")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and lines == ["error: 2 processes on this machine training on CUDA need a GPU "
                                               "each, and torch sees 1: train with --nproc 1 (or fewer), or on the "
                                               "CPU with --device cpu"], lines
    assert not (tmp_path / "run").exists()


def test_the_launcher_names_the_process_that_ended_first_of_its_own_accord():
    failure = namedtuple("ProcessFailure", "exitcode timestamp")
    killed = {0: failure(-signal.SIGTERM, 10), 1: failure(PEER_LOST_EXIT, 10), 2: failure(-signal.SIGKILL, 10)}
    assert failed(killed) == (1, 2, "was killed by SIGKILL")
    assert failed({0: failure(PEER_LOST_EXIT, 9), 1: failure(3, 10)}) == (1, 1, "exited with code 3")
    assert failed({0: failure(1, 10), 1: failure(PEER_LOST_EXIT, 10)}) == (1, None, None)  # the lead said why
    assert without_option(["train", "X", "--nproc", "2", "--nproc=3", "-p", "a=1"], "--nproc") == [
        "train", "X", "-p", "a=1"]


@pytest.mark.parametrize(("args", "why"), [
    (["Pendulum-v1", "--algo", "sac"], "sac trains in one process; drop --nproc"),
    (["tictactoe_v3"], "tictactoe_v3 is a turn-based game, whose self-play opponents live in one process"),
])
def test_what_trains_in_one_process_refuses_nproc_in_one_line(tmp_path, args, why):
    result = CliRunner().invoke(app, ["train", *args, "--nproc", "2", "--run-dir", str(tmp_path / "run")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0], lines
    assert not (tmp_path / "run").exists()


def _ours(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (this test's run directory)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State"))
                if "zombie" not in state:
                    pids.append(int(entry.name))
        except (OSError, StopIteration):
            pass
    return pids


def _rank(pid: int) -> int | None:
    """The RANK torchrun gave process ``pid``; None for the launcher."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((int(v.split(b"=", 1)[1]) for v in environ if v.startswith(b"RANK=")), None)


def test_two_processes_learn_cartpole_within_the_single_process_budget(tmp_path):
    """tests/test_learning.py's budget (50k steps, seed 1) with the same global batch: two processes of 8 envs."""
    run = tmp_path / "run"
    done = subprocess.run([*TRAIN, "CartPole-v1", "--nproc", "2", "--steps", "50000", "--seed", "1", "--eval-every",
                           "10000", "--stop-at", "475", "-p", "n_envs=8", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(2 processes x 8 envs)" in done.stdout and done.stderr == "", done.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["world"] == {"nodes": 1, "n_envs_per_process": 8}
    assert meta["best_eval"] >= 475 and meta["steps"] <= 50_000 + 2 * 8 * 32, meta
    assert not _ours(str(run))


def _metrics(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k != "charts/SPS"} for row in csv.DictReader(f)]


def test_ctrl_c_to_the_launcher_stops_every_process_with_one_checkpoint_that_resumes_exactly(tmp_path):
    """SIGINT to the launcher alone (a terminal's Ctrl-C reaches only it: the processes are in sessions of their
    own); it passes it on, the processes agree to stop after the same iteration and the lead saves once. Resumed
    with as many processes, the run equals one that was never stopped, to the bit; nothing is left running."""
    cut, whole = tmp_path / "cut", tmp_path / "whole"
    budget = ["--steps", str(40 * 128)]
    proc = subprocess.Popen([*TRAIN, *SMALL, *budget, "--nproc", "2", "--run-dir", str(cut)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for(lambda: (cut / "metrics.csv").is_file() and len((cut / "metrics.csv").read_text().splitlines()) > 3,
             proc, 120)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=90)[0]
    assert proc.returncode == 130, output
    assert "it continues exactly when resumed with 2 processes" in output and "Traceback" not in output, output
    assert not _ours(str(cut))
    meta = json.loads((cut / "meta.json").read_text())
    assert meta["resume"] == {"exact": True} and meta["world_size"] == 2 and 0 < meta["steps"] < 40 * 128
    assert len(_metrics(cut)) == meta["steps"] // 128  # one row per iteration, written by the lead alone

    resumed = subprocess.run([*TRAIN, "--resume", str(cut)], capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0 and "It continues exactly" in resumed.stdout, resumed.stdout + resumed.stderr
    assert json.loads((cut / "meta.json").read_text())["resumes"] == [{"step": meta["steps"], "exact": True}]
    subprocess.run([*TRAIN, *SMALL, *budget, "--nproc", "2", "--run-dir", str(whole)], check=True,
                   capture_output=True, timeout=180)
    for name in ("model.safetensors", "optimizer.safetensors"):
        a, b = load_file(cut / name), load_file(whole / name)
        assert all(torch.equal(a[k], b[k]) for k in b), name
    assert _metrics(cut) == _metrics(whole)
    assert not _ours(str(tmp_path))


HEARTBEATS = """
import sys, threading, time
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from rlcli.training.launch import launch
beats = []
DynamicRendezvousHandler._keep_alive = lambda self: beats.append(threading.current_thread().name)
start = time.monotonic()
outcome = launch(2, sys.argv[1:])
print(outcome.code, round(time.monotonic() - start, 1), beats)
"""


def test_the_launcher_on_one_machine_beats_no_rendezvous_heartbeat(tmp_path):
    """A heartbeat's thread holds the rendezvous while it beats; dropping the last reference to it there, as the
    launcher ends, ran its finalizer on that thread (a "cannot join current thread" traceback after a Ctrl-C).
    On one machine nobody reads the heartbeat: none beats in a run longer than torch's 5 s default interval."""
    result = subprocess.run([sys.executable, "-c", HEARTBEATS, "train", *SMALL, "--steps", str(100 * 128),
                             "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    code, seconds, beats = result.stdout.splitlines()[-1].split(" ", 2)
    assert code == "0" and float(seconds) > 5 and beats == "[]", result.stdout + result.stderr


def test_a_process_that_dies_ends_the_run_with_one_line_naming_it_and_the_checkpoint_stays(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([*TRAIN, *SMALL, "--steps", "10000000", "--eval-every", "1280", "--nproc", "2",
                             "--run-dir", str(run)], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (run / "eval.json").is_file(), proc, 120)
    (rank_1,) = [pid for pid in _ours(str(run)) if _rank(pid) == 1]
    os.kill(rank_1, signal.SIGKILL)
    out, err = proc.communicate(timeout=90)
    meta = json.loads((run / "meta.json").read_text())
    assert proc.returncode == 1, out + err
    assert err.splitlines() == [f"error: process 1 of 2 was killed by SIGKILL; the run stopped, and its last "
                                f"checkpoint (step {meta['steps']:,}) stays in {run}; rlcli train --resume {run} "
                                "continues from it"], err
    assert meta["steps"] > 0 and meta["resume"]["exact"] and load_file(run / "model.safetensors")
    assert not _ours(str(run))


def test_a_shipped_agent_resumes_with_two_processes_in_its_copy_and_stays_as_shipped(tmp_path):
    from rlcli.runs.rundir import zoo_dir

    agent = zoo_dir() / "CartPole-v1"
    before = {p.name: p.read_bytes() for p in agent.iterdir()}
    steps = int(json.loads((agent / "meta.json").read_text())["steps"]) + 512
    copy = tmp_path / "copy"
    done = subprocess.run([*TRAIN, "--resume", str(agent), "--nproc", "2", "--steps", str(steps), "--run-dir",
                           str(copy), "--threads", "1"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    meta = json.loads((copy / "meta.json").read_text())
    assert meta["steps"] >= steps and meta["world_size"] == 2 and meta["finished"]
    assert {p.name: p.read_bytes() for p in agent.iterdir()} == before
