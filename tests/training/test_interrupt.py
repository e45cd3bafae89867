"""Ctrl-C during training saves a checkpoint, says how to resume, and the run resumes from it; one that
lands in a library call that cannot survive it is held until the call ends."""

import json
import os
import signal
import subprocess
import sys

import pytest

from rlcli.algos import resolve
from rlcli.jobs import interrupts
from rlcli.training.train import TrainingInterrupted, TrainState, train
from tests.waiting import wait_for

CMD = [sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--steps", "2000000", "--n-envs", "4",
       "-p", "n_steps=64", "-p", "minibatch_size=256", "--eval-every", "0"]


def test_ctrl_c_saves_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([*CMD, "--run-dir", str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for(lambda: (run / "metrics.csv").is_file() and len((run / "metrics.csv").read_text().splitlines()) >= 4,
             proc, 60)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert f"Resume with: rlcli train --resume {run}" in output
    assert "Traceback" not in output
    saved = json.loads((run / "meta.json").read_text())["steps"]
    assert saved >= 3 * 256 and saved % 256 == 0

    resumed = subprocess.run([sys.executable, "-m", "rlcli", "train", "--resume", str(run),
                              "--steps", str(saved + 512)], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["steps"] == saved + 512 and meta["finished"]


def _small_run():
    """CartPole PPO with an iteration of 64 steps and no periodic evaluation, far from its end."""
    return resolve("ppo", "CartPole-v1", eval_every=0, eval_episodes=2,
                           overrides={"steps": 100_000, "n_envs": 2, "n_steps": 32, "minibatch_size": 64})


def test_an_interrupt_while_held_is_raised_when_the_block_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
            done.append("rest of the block")
    assert done == ["rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_held_tells_when_it_holds_a_first_interrupt():
    told = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held(lambda: told.append("held")):
            signal.raise_signal(signal.SIGINT)
            assert told == ["held"]  # at once, while the block runs on
    assert told == ["held"]


def test_held_nests_and_raises_once_at_the_outermost_end():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            with interrupts.held():
                signal.raise_signal(signal.SIGINT)
            done.append("outer block")
    assert done == ["outer block"]


def test_a_second_interrupt_while_held_goes_through_at_once():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
            done.append("after the first")
            signal.raise_signal(signal.SIGINT)
            done.append("after the second")
    assert done == ["after the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_held_leaves_an_ignored_interrupt_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.held():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # nothing installed to hold it
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_with_ctrl_c_ignored_only_a_sigterm_is_held_and_told(monkeypatch):
    monkeypatch.delenv("RLCLI_SUPERVISED", raising=False)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell script's `rlcli train ... &`
    told = []
    try:
        with interrupts.term_as_interrupt() as terminated:
            with interrupts.held(lambda: told.append("held")):
                signal.raise_signal(signal.SIGINT)  # a `kill -INT`: ignored, as Ctrl-C is, and not announced
            assert told == [] and not terminated()
            with pytest.raises(KeyboardInterrupt):
                with interrupts.held(lambda: told.append("held")):
                    signal.raise_signal(signal.SIGTERM)
                    told.append("the block finished")
            assert told == ["held", "the block finished"] and terminated()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupt_inside_a_callback_lets_it_finish_then_stops_and_saves(tmp_path):
    """Callbacks (a study's storage writes, the progress display) and the metric writers run with
    Ctrl-C held: the callback the interrupt lands in finishes, the run then saves and stops."""
    seen: list[int] = []

    def interrupt_at_third(state: TrainState) -> bool:
        if len(seen) == 2:
            signal.raise_signal(signal.SIGINT)
        seen.append(state.step)  # after the signal: runs only if the interrupt was held
        return False

    with pytest.raises(TrainingInterrupted) as stopped:
        train(_small_run(), tmp_path / "run", [interrupt_at_third])
    assert seen == [64, 128, 192] and stopped.value.state.step == 192
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["steps"] == 192


def test_an_interrupt_inside_a_metric_write_lets_the_writers_finish_and_close(tmp_path, monkeypatch):
    """The writers run with Ctrl-C held: one landing in a write (TensorBoard's queue, where it can
    leave the writer thread asleep through its shutdown) lets the write finish; the run then saves,
    stops and closes every writer."""
    events: list[str] = []

    class InterruptedSink:
        def __init__(self, log_dir):
            self.writes = 0

        def write(self, step, metrics):
            self.writes += 1
            if self.writes == 2:
                signal.raise_signal(signal.SIGINT)
            events.append(f"write {step}")  # after the signal: runs only if the interrupt was held

        def close(self):
            events.append("close")

    monkeypatch.setattr("rlcli.training.train.TensorBoardSink", InterruptedSink)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(_small_run(), tmp_path / "run", [])
    assert events == ["write 64", "write 128", "close"] and stopped.value.state.step == 128
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["steps"] == 128


def test_noted_notes_a_first_interrupt_even_one_held_inside_and_raises_a_second():
    """A process of several notes a Ctrl-C and goes on to where they agree to stop; a second one stops it."""
    told = []
    with interrupts.noted(lambda: told.append("noted")) as interrupted:
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
            assert not interrupted()  # held until the block ends
        assert interrupted() and told == ["noted"]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
