"""scripts/eager_floor.py end to end: the lean PPO iteration it times against rlcli's is a PPO that learns
the masked task, and both sides are timed."""

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_lean_loop_learns_the_masked_task_and_both_sides_are_timed(tmp_path):
    out = tmp_path / "floor.json"
    proc = subprocess.run([sys.executable, "scripts/eager_floor.py", "--iterations", "20", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for side in ("lean", "rlcli"):
        assert all(math.isfinite(result[side][k]) and result[side][k] > 0 for k in ("iteration", "rollout", "update"))
    assert math.isfinite(result["speedup"]) and result["threads"]["acting"] >= 1
    # 10,240 steps, seed 0, its own generator: 14.5 on one update thread or two (seeds 0-2: 14.3-14.6); a
    # policy drawing allowed actions at random returns about 10.4 of the optimal 16
    assert result["lean_return"] >= 14.0


def test_too_few_iterations_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "scripts/eager_floor.py", "--iterations", "5"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--iterations must be more than 5" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_lean_loop_names_any_setting_of_the_entry_it_does_not_implement(monkeypatch):
    import importlib.util

    from rlcli.algos import resolve

    spec = importlib.util.spec_from_file_location("eager_floor", REPO / "scripts/eager_floor.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "eager_floor", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    assert module.entry_mismatches(resolve("ppo", module.ENV_ID, overrides={}, seed=0)) == []
    changed = resolve("ppo", module.ENV_ID, overrides={"ent_coef": 0.01, "network": {"activation": "relu"}}, seed=0)
    assert module.entry_mismatches(changed) == ["ent_coef is 0.01 (the lean loop has 0.0)",
                                               "network.activation is 'relu' (the lean loop has 'tanh')"]
