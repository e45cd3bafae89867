"""Times one algorithm's update step eager and compiled on one device, on the batches a real run feeds it.

Run (from the repository root):

    python scripts/bench_update.py --case sac-hopper --device cuda
    python scripts/bench_update.py --case ppo-pong --device cpu --updates 5

Cases: ``sac-hopper`` (SAC's gradient step on Hopper-v5's shapes: 256 transitions, 256 x 256 networks),
``td3-hopper`` (TD3's, the same shapes, the actor every second step), ``dqn-cartpole`` (DQN's on
CartPole-v1's entry), ``dqn-pong`` (DQN's Nature CNN on 32 stacks of 4 84 x 84 frames, the atari group),
``ppo-hopper`` (one PPO update, 64 envs x 64 steps, 5 epochs of 2,048 rows, as the mujoco group) and
``ppo-pong`` (one PPO update of the Nature CNN, 8 envs x 128 steps of 4 stacked 84 x 84 frames, 4 epochs
of 256 frames, as the atari group). Each variant builds a fresh agent from the shipped entry
(``-p compile=off`` or ``on``), warms up (compiling, for the compiled one), then times ``--updates``
updates, synchronising the device around each; ``-p KEY=VALUE`` sets hyperparameters over the entry as
``rlcli train`` does (``-p quantiles=200 -p double_q=false`` for QR-DQN). Prints one line per variant and the
ratio; ``--json`` writes them.

``--variants off,sb3`` (``dqn-cartpole``, ``td3-hopper``; CPU) times Stable-Baselines3's own gradient step
(``model.train(gradient_steps=1)``, its replay sampling included) beside rlcli's, both with the values of
``scripts/bench_peers.py``'s same-hyperparameter rows, so that a row's ratio can be read against the share of
its time that is the update both libraries run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import bench_peers
import gymnasium as gym
import numpy as np
import torch

from rlcli.algos import resolve
from rlcli.algos.buffers import ReplayBatch, RolloutBuffer
from rlcli.config import parse_overrides
from rlcli.errors import UsageError
from rlcli.training.agents import build_agent

CASES = {
    "sac-hopper": ("sac", "Hopper-v5", gym.spaces.Box(-np.inf, np.inf, (11,)), gym.spaces.Box(-1, 1, (3,))),
    "td3-hopper": ("td3", "Hopper-v5", gym.spaces.Box(-np.inf, np.inf, (11,)), gym.spaces.Box(-1, 1, (3,))),
    "dqn-cartpole": ("dqn", "CartPole-v1", gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2)),
    "dqn-pong": ("dqn", "Pong-v5", gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6)),
    "ppo-hopper": ("ppo", "Hopper-v5", gym.spaces.Box(-np.inf, np.inf, (11,)), gym.spaces.Box(-1, 1, (3,))),
    "ppo-pong": ("ppo", "Pong-v5", gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6)),
}
# the cases bench_peers compares with SB3 at the same values, and those values
SB3_CASES = {"dqn-cartpole": bench_peers.CARTPOLE_DQN_SAME, "td3-hopper": bench_peers.HOPPER_TD3_SAME}


class _Spaces:
    """What ``build_agent`` reads of an env: its spaces and count."""

    def __init__(self, obs: gym.Space, action: gym.Space, n: int) -> None:
        self.single_observation_space, self.single_action_space, self.num_envs = obs, action, n
        self.obs_layout = None  # a Box env without a mask


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _ppo_batch(agent, n_envs: int, generator: torch.Generator):
    """A full rollout of random rows in the agent's own storage, with its advantages."""
    buf: RolloutBuffer = agent.new_rollout(n_envs)
    device = buf.obs.device
    if buf.obs.dtype == torch.uint8:
        buf.obs.copy_(torch.randint(0, 256, buf.obs.shape, generator=generator, dtype=torch.uint8))
    else:
        buf.obs.copy_(torch.randn(buf.obs.shape, generator=generator))
    with torch.no_grad():
        sample = agent.sample(buf.obs.flatten(0, 1).to(device))
    buf.actions.copy_(sample.actions.view(buf.actions.shape))
    buf.log_probs.copy_(sample.log_probs.view(buf.log_probs.shape))
    buf.values.copy_(torch.randn(buf.values.shape, generator=generator))
    buf.rewards.copy_(torch.randn(buf.rewards.shape, generator=generator))
    buf.valid.fill_(True)
    return buf.batch(0.99, 0.95)


def _replay_batch(obs_space: gym.Space, action_space: gym.Space, rows: int, generator: torch.Generator,
                  device: torch.device) -> ReplayBatch:
    """Random transitions of the spaces' shapes, actions as the replay buffer keeps them (one float column
    for a Discrete space), frames as bytes."""

    def observations() -> torch.Tensor:
        if obs_space.dtype == np.uint8:
            return torch.randint(0, 256, (rows, *obs_space.shape), generator=generator, dtype=torch.uint8)
        return torch.randn(rows, int(np.prod(obs_space.shape)), generator=generator)

    if isinstance(action_space, gym.spaces.Discrete):
        actions = torch.randint(0, int(action_space.n), (rows, 1), generator=generator).float()
    else:
        actions = torch.rand(rows, *action_space.shape, generator=generator) * 2 - 1
    return ReplayBatch(observations().to(device), actions.to(device), torch.randn(rows, generator=generator).to(device),
                       observations().to(device), torch.zeros(rows, device=device))


def _timed(step, device: torch.device, updates: int, warmup: int) -> dict:
    """``step`` run ``warmup`` times untimed, then ``updates`` times: milliseconds per update (median and mean)
    and the warm-up's seconds."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    _sync(device)
    warm = time.perf_counter() - start
    times = []
    for _ in range(updates):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return {"ms": 1e3 * statistics.median(times), "mean_ms": 1e3 * statistics.fmean(times), "warmup_s": warm,
            "updates": updates}


def time_sb3_updates(case: str, updates: int, warmup: int) -> dict:
    """SB3's gradient step at bench_peers' values for ``case``, on a replay filled by random steps of the env."""
    from stable_baselines3.common.env_util import make_vec_env

    algo, env_id = CASES[case][:2]
    run = resolve(algo, env_id, overrides=SB3_CASES[case], device="cpu", seed=0)
    cfg = run.algo
    torch.manual_seed(0)
    model = bench_peers.sb3_replay_model(run, make_vec_env(env_id, n_envs=1, seed=0), device="cpu")
    filled = 4 * cfg.batch_size
    model.learning_starts = filled + 1  # random actions, no gradient step, while the replay fills
    model.learn(total_timesteps=filled)
    step = lambda: model.train(gradient_steps=1, batch_size=cfg.batch_size)  # noqa: E731
    return {"case": case, "compile": "sb3", "device": "cpu", **_timed(step, torch.device("cpu"), updates, warmup)}


def time_updates(case: str, compile_mode: str, device: torch.device, updates: int, warmup: int,
                 values: dict | None = None) -> dict:
    """Milliseconds per update (median and mean) after ``warmup`` untimed updates, and the warm-up's seconds,
    of the entry with ``values`` over it."""
    algo, env_id, obs_space, action_space = CASES[case]
    cfg = resolve(algo, env_id, overrides={**(values or {}), "compile": compile_mode}, device=device.type)
    torch.manual_seed(0)
    n = cfg.algo.n_envs
    agent = build_agent(cfg, _Spaces(obs_space, action_space, n), device)
    agent.optimizers()  # as a learner does, before the first (maybe compiled) step: not in the warm-up's time
    generator = torch.Generator().manual_seed(0)
    if algo != "ppo":
        batch = _replay_batch(obs_space, action_space, cfg.algo.batch_size, generator, device)
        step = lambda: agent.update(batch)  # noqa: E731
    else:
        rollout = _ppo_batch(agent, n, generator)
        step = lambda: agent.update(rollout, progress=0.5)  # noqa: E731
    return {"case": case, "compile": compile_mode, "device": str(device), "params": values or {},
            **_timed(step, device, updates, warmup)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--updates", type=int, default=None, help="timed updates (default: 200 off-policy, 10 PPO)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--variants", default="off,on",
                        help="compile settings to time, comma-separated; sb3: SB3's update at the same values")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyperparameter over the entry, as rlcli train's -p (compile is set by --variants)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.updates is not None and args.updates < 1:
        print("--updates must be at least 1", file=sys.stderr)
        return 2
    updates = args.updates or (10 if args.case.startswith("ppo") else 200)
    device = torch.device(args.device)
    variants = args.variants.split(",")
    try:
        values = parse_overrides(args.param)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "sb3" in variants:
        if args.case not in SB3_CASES or device.type != "cpu" or values:
            print(f"--variants sb3 needs --case {' or '.join(SB3_CASES)} on the CPU without -p, not {args.case} on "
                  f"{device.type}{' with -p' if values else ''}", file=sys.stderr)
            return 2
        values = SB3_CASES[args.case]  # rlcli's variants at the values SB3 is given
    try:
        results = [time_sb3_updates(args.case, updates, args.warmup) if mode == "sb3" else
                   time_updates(args.case, mode, device, updates, args.warmup, values) for mode in variants]
    except UsageError as e:  # a -p the entry's config refuses
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{r['case']} {r['device']} {'SB3' if r['compile'] == 'sb3' else 'compile=' + r['compile']}: "
              f"{r['ms']:.3f} ms an update, mean {r['mean_ms']:.3f} (warm-up {r['warmup_s']:.1f} s)")
    if [r["compile"] for r in results] == ["off", "on"]:
        print(f"{args.case} {device}: compiled {results[0]['ms'] / results[1]['ms']:.2f}x eager")
    if [r["compile"] for r in results] == ["off", "sb3"]:
        print(f"{args.case}: SB3's update {results[1]['mean_ms'] / results[0]['mean_ms']:.2f}x rlcli's (means)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
