"""scripts/search_time_to_score.py end to end on tiny budgets: a search into a journal file, reading its
best trials back, and timing one setting on chosen seeds."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")

REPO = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("search_time_to_score", REPO / "scripts/search_time_to_score.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script(*args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "scripts/search_time_to_score.py", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_a_search_is_stored_and_its_best_trials_read_back(tmp_path):
    study = str(tmp_path / "study.journal")
    # a return of 80 is within 1,024 steps for some settings and not for others
    script("--study", study, "--trials", "2", "--seeds", "0-0", "--score", "80", "--cap", "1024", "--every", "512",
           "--sampler-seed", "0")
    best = script("--study", study, "--score", "80", "--show", "5")
    assert len(best) == 2
    for trial in best:
        (seconds,), (steps,), (reached,) = trial["seconds"], trial["steps"], trial["reached"]
        assert reached or steps >= 1024  # a seed runs to the cap or the score
        # the trial's value is its cost: the seconds taken, 1.5x for a seed that never reached the score
        assert trial["value"] == pytest.approx(seconds * (1.0 if reached else 1.5), abs=1e-3)
        assert trial["params"]["n_envs"] == trial["overrides"]["n_envs"]


def test_validation_times_each_seed_to_the_score():
    # CartPole's return of 20 is reached within 2,048 steps by the tuned entry on both seeds
    *rows, summary = script("--validate", "{}", "--score", "20", "--seeds", "0-1", "--cap", "2048", "--every", "512")
    assert [row["seed"] for row in rows] == [0, 1]
    assert all(row["reached"] and row["steps"] <= 2048 and row["seconds"] > 0 for row in rows)
    assert summary["reached"] == summary["of"] == 2


def test_the_cost_is_the_mean_seconds_with_unreached_seeds_counted_one_and_a_half_times():
    search = load_script()
    rows = [{"seconds": 2.0, "reached": False}, {"seconds": 1.0, "reached": True}]
    assert search.cost(rows) == (2.0 * 1.5 + 1.0) / 2
    assert search.parse_seeds("3-5") == [3, 4, 5] and search.parse_seeds("7") == [7]
