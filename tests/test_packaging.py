"""The installed package finds its hyperparameters without a checkout."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_hyperparameter_files(tmp_path):
    pytest.importorskip("setuptools")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(ROOT), "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("rlcli-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.removeprefix("rlcli/data/hyperparams/") for n in names if n.startswith("rlcli/data/hyperparams/")}
    assert shipped == {str(p.relative_to(ROOT / "hyperparams")) for p in (ROOT / "hyperparams").rglob("*.yml")}
    assert "presets/atari-lstm.yml" in shipped  # --config atari-lstm on a fresh install
    data = {Path(n).name for n in names if Path(n).parent == Path("rlcli/data")}  # suites and reference scores
    assert data == {p.name for p in (ROOT / "rlcli" / "data").iterdir() if p.is_file()}
    assert "rlcli/benchmark/__init__.py" in names
    agents = {p.parent.name for p in (ROOT / "zoo").glob("*/model.safetensors")}
    assert agents >= {"CartPole-v1", "Acrobot-v1", "Pendulum-v1"}  # the zoo plays on a fresh install
    for agent in agents:
        for name in ("config.yaml", "meta.json", "eval.json", "model.safetensors"):
            assert f"rlcli/data/zoo/{agent}/{name}" in names
    assert not [n for n in names if n.startswith("rlcli/data/zoo/benchmarks/")]
