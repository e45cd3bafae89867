"""Digests of trained tensors, for checking that a refactor keeps trained bits equal.

Trains a few short, fixed runs through the command line (one torch thread, fixed seeds) and hashes
every tensor of the saved model and optimiser state. Run it before a change with ``--save FILE`` and
after it with ``--compare FILE``: the second run exits 1 and names each tensor whose bits changed.

    python scripts/bit_digest.py --save /tmp/before.json
    python scripts/bit_digest.py --compare /tmp/before.json

Cases (``--only`` picks some): CartPole PPO on gymnasium, Hopper PPO on envpool, Pong PPO with the
Nature CNN on envpool, each for two rollouts; Hopper SAC, Hopper TD3 and CartPole DQN for about 500 gradient
steps each; CartPole PQN for two rollouts; masked PPO on
MaskedChoice-v0 (the mask from info) and the LSTM PPO on CartPoleNoVel-v1, four rollouts each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open

CASES: dict[str, list[str]] = {
    "cartpole-ppo": ["CartPole-v1", "--backend", "gymnasium", "--steps", "2048", "-p", "n_envs=8",
                     "-p", "n_steps=128"],
    "hopper-ppo": ["Hopper-v5", "--backend", "envpool", "--steps", "8192", "-p", "n_envs=64",
                   "-p", "n_steps=64"],
    "pong-ppo": ["Pong-v5", "--backend", "envpool", "--steps", "2048", "-p", "n_envs=8", "-p", "n_steps=128",
                 "-p", "n_epochs=2"],
    "hopper-sac": ["Hopper-v5", "--algo", "sac", "--backend", "envpool", "--steps", "1500",
                   "-p", "learning_starts=1000", "-p", "log_every=500"],
    "hopper-td3": ["Hopper-v5", "--algo", "td3", "--backend", "envpool", "--steps", "1500",
                   "-p", "learning_starts=1000", "-p", "log_every=500"],
    "cartpole-dqn": ["CartPole-v1", "--algo", "dqn", "--backend", "gymnasium", "--steps", "2000",
                     "-p", "learning_starts=1000"],
    "cartpole-pqn": ["CartPole-v1", "--algo", "pqn", "--backend", "gymnasium", "--steps", "4096"],
    "masked-ppo": ["MaskedChoice-v0", "--steps", "2048"],
    "recurrent-ppo": ["CartPoleNoVel-v1", "--steps", "1024"],
}
FILES = ("model.safetensors", "optimizer.safetensors")


def digest(run_dir: Path) -> dict[str, dict[str, str]]:
    """SHA-256 of each tensor's bytes, dtype and shape, per file."""
    out: dict[str, dict[str, str]] = {}
    for name in FILES:
        with safe_open(str(run_dir / name), framework="pt") as f:
            out[name] = {}
            for key in sorted(f.keys()):
                t = f.get_tensor(key).contiguous()
                h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
                out[name][key] = h.hexdigest()[:16]
    return out


def run_case(name: str, root: Path) -> dict[str, dict[str, str]]:
    run_dir = root / name
    cmd = [sys.executable, "-m", "rlcli", "train", *CASES[name], "--seed", "1", "--threads", "1",
           "--eval-every", "0", "--eval-episodes", "1", "--run-dir", str(run_dir)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return digest(run_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="write the digests to this JSON file")
    group.add_argument("--compare", type=Path, help="compare against digests saved earlier")
    parser.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {', '.join(CASES)}")
    opts = parser.parse_args()
    names = [n for n in opts.only.split(",") if n]
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: run_case(name, Path(tmp)) for name in names}
    if opts.save:
        opts.save.write_text(json.dumps(digests, indent=2) + "\n")
        print(f"saved digests of {', '.join(names)} to {opts.save}")
        return 0
    before = json.loads(opts.compare.read_text())
    changed = 0
    for name in names:
        for file, tensors in digests[name].items():
            old = before.get(name, {}).get(file, {})
            diff = sorted(k for k in set(tensors) | set(old) if tensors.get(k) != old.get(k))
            changed += len(diff)
            status = "equal" if not diff else f"{len(diff)} differ: {', '.join(diff[:6])}"
            print(f"{name:14s} {file:24s} {len(tensors):3d} tensors  {status}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
