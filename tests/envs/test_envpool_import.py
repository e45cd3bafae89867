"""envpool is imported without JAX, which its XLA interface alone needs, and JAX stays importable."""

import subprocess
import sys

import pytest

pytest.importorskip("envpool")
pytest.importorskip("jax")

SCRIPT = """
import sys
from rlcli.envs.envpool_import import import_envpool
envpool = import_envpool()
assert "jax" not in sys.modules, "envpool's import loaded JAX"
env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=1)
obs, _ = env.reset()
assert obs.shape == (2, 4)
try:
    env.xla()
except RuntimeError as e:
    assert "XLA is unavailable" in str(e)
else:
    raise AssertionError("xla() ran without JAX")
import jax.numpy as jnp
assert float(jnp.ones(2).sum()) == 2.0
assert import_envpool() is envpool
print("ok")
"""


def test_envpool_comes_without_jax_and_jax_can_still_be_imported():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
