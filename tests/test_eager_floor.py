"""scripts/eager_floor.py end to end: the written-out PPO iteration it times against rlcli's is a PPO that
learns the masked task, and both sides' times are real measurements."""

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_written_out_loop_learns_the_masked_task_and_both_sides_are_timed(tmp_path):
    out = tmp_path / "floor.json"
    proc = subprocess.run([sys.executable, "scripts/eager_floor.py", "--iterations", "20", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for side in ("plain", "rlcli"):
        times = result[side]
        assert all(math.isfinite(times[k]) and times[k] > 0 for k in ("iteration", "rollout", "update")), side
        assert times["iteration"] > max(times["rollout"], times["update"]), side  # medians of each part
    # 10,240 steps (seed 0): a policy drawing allowed actions at random returns about 10 of the optimal 16
    assert result["plain_return"] >= 14.0
    assert "the written-out iteration runs" in proc.stdout
