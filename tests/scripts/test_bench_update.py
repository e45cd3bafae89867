"""scripts/bench_update.py's comparison with SB3's own gradient step: both sides timed at the values of
bench_peers' same-hyperparameter row, and a case SB3 is not compared on refused in one line."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")

REPO = Path(__file__).resolve().parents[2]


def script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/bench_update.py", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_rlcli_and_sb3_updates_are_timed_side_by_side(tmp_path):
    out = tmp_path / "updates.json"
    proc = script("--case", "dqn-cartpole", "--device", "cpu", "--variants", "off,sb3", "--updates", "5",
                  "--warmup", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    assert [r["compile"] for r in results] == ["off", "sb3"]
    for r in results:
        assert r["updates"] == 5 and r["ms"] > 0 and r["mean_ms"] > 0, r
    ratio = re.search(r"dqn-cartpole: SB3's update ([0-9.]+)x rlcli's \(means\)", proc.stdout)
    assert ratio and float(ratio.group(1)) == pytest.approx(results[1]["mean_ms"] / results[0]["mean_ms"], abs=0.01)


def test_a_case_without_an_sb3_row_is_refused_in_one_line():
    proc = script("--case", "ppo-hopper", "--variants", "sb3", "--updates", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("--variants sb3 needs --case dqn-cartpole or td3-hopper on the CPU without -p, "
                                   "not ppo-hopper on cpu")


def test_a_frame_case_times_its_cnn_on_byte_frames_with_the_values_given(tmp_path):
    out = tmp_path / "updates.json"
    proc = script("--case", "dqn-pong", "--device", "cpu", "--variants", "off", "--updates", "2", "--warmup", "1",
                  "-p", "quantiles=8", "-p", "double_q=false", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads(out.read_text())
    assert result["case"] == "dqn-pong" and result["updates"] == 2 and result["ms"] > 0, result
    assert result["params"] == {"quantiles": 8, "double_q": False}
    for bad in ("quantiles", "quantiles=0"):  # not key=value; a value the config refuses
        proc = script("--case", "dqn-pong", "-p", bad)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
