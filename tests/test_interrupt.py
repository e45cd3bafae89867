"""Ctrl-C during training saves a checkpoint, says how to resume, and the run resumes from it."""

import json
import os
import signal
import subprocess
import sys
import time

CMD = [sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--steps", "2000000", "--n-envs", "4",
       "-p", "n_steps=64", "-p", "minibatch_size=256", "--eval-every", "0"]


def test_ctrl_c_saves_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([*CMD, "--run-dir", str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 60
    while not (run / "metrics.csv").is_file() or len((run / "metrics.csv").read_text().splitlines()) < 4:
        assert time.time() < deadline and proc.poll() is None, proc.communicate()[0]
        time.sleep(0.2)
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
