"""rlcli against its peers on the same machine, in one invocation: a markdown table of ratios. The peer is
Stable-Baselines3 (and sb3-contrib) unless a section names another: the optional ``hopper-rlgames`` section
measures rl_games 1.6.5.

Run (from the repository root):

    pip install -e ".[peers]" && python scripts/bench_peers.py --repeats 3
    pip install rl-games==1.6.5 && python scripts/bench_peers.py --only hopper-rlgames --repeats 3

Options: ``--only cartpole,hopper-ppo,hopper-ppo-same,hopper-sac,cartpole-dqn,dqn-prioritized,pong-dqn,hopper-td3,pong,
pqn-pong,masked,recurrent,multiagent,go1`` picks sections
(all of these by default; ``hopper-rlgames`` only when named), ``--quick`` cuts every budget to about one rollout
(a smoke run; its figures mean nothing), ``--json PATH`` writes every raw result, ``--markdown PATH`` writes the
tables that are printed. The sections, what each row measures and why, are described in scripts/README.md.

Every measurement runs in a fresh Python process (this script re-invoked as ``--worker NAME --seed S ...``,
printing one JSON line on stdout), so that neither library's imports, thread pools or allocator state leak
into the other's figures. Each figure is the median over ``--repeats`` seeds (CartPole's time to 475,
which varies 3-fold from seed to seed, over ``--cartpole-repeats``); the two sides alternate
seed by seed, so a change in machine load over the run falls on both sides alike. Ratios are always
rlcli / peer. Throughput against a peer is in transitions/s: rlcli's env steps less the reset row an env steps
after each episode's end, on which it neither learns nor stores; every step of the peers' vector envs, which
reset inside the ending step.

Torch threads are left at each library's own default (rlcli picks its own; SB3 leaves torch's default)
and reported next to every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
SIDES = ("rlcli", "SB3")
CARTPOLE_TARGET = 475.0  # CartPole-v1's reward threshold

# ---------------------------------------------------------------------------------------------------
# Hyperparameters

# rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1 ("# Tuned"): n_envs 8, n_timesteps 1e5, n_steps 32,
# batch_size 256, gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001,
# clip_range lin_0.2; SB3 defaults for everything else.
ZOO_CARTPOLE_N_ENVS = 8
ZOO_CARTPOLE = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0)
ZOO_CARTPOLE_LR, ZOO_CARTPOLE_CLIP = 1e-3, 0.2  # both linear to 0 (lin_0.001, lin_0.2)
# the same entry as rlcli overrides, for a row of its own: hyperparams/ppo.yml's CartPole entry is tuned
# for the time to 475 (scripts/search_time_to_score.py), and this row keeps the engine's share of the
# gain apart from the hyperparameters'
RLCLI_ZOO_CARTPOLE = (f"n_envs={ZOO_CARTPOLE_N_ENVS}", "n_steps=32", "minibatch_size=256", "n_epochs=20",
                      "gamma=0.98", "gae_lambda=0.8", "learning_rate=0.001", "lr_schedule=linear",
                      "clip_range=0.2", "clip_range_schedule=linear", "ent_coef=0.0")

# rl-baselines3-zoo hyperparams/ppo.yml, Hopper-v3 (tuned; the zoo's MuJoCo entries predate v5, whose
# dynamics are the same): normalize true (VecNormalize obs + reward, gamma as the algorithm's), n_envs 1,
# n_steps 512, batch_size 32, gamma 0.999, learning_rate 9.80828e-05, ent_coef 0.00229519, clip_range 0.2,
# n_epochs 5, gae_lambda 0.99, max_grad_norm 0.7, vf_coef 0.835671, policy_kwargs log_std_init=-2,
# ortho_init=False, activation_fn=nn.ReLU, net_arch pi/vf [256, 256].
ZOO_HOPPER_N_ENVS = 1
ZOO_HOPPER = dict(n_steps=512, batch_size=32, gamma=0.999, learning_rate=9.80828e-05, ent_coef=0.00229519,
                  clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671)

# "Same hyperparameters" Hopper PPO: rlcli's own mujoco group (hyperparams/ppo.yml), read at run time so
# that the comparison follows the file; SB3 gets the same values translated (sb3_ppo_kwargs). SB3 has no
# adaptive-KL learning rate, so both sides use a constant one here.
HOPPER_PPO_SAME: dict[str, Any] = {"lr_schedule": "constant"}
# a quick run's rlcli Hopper PPO (both sides where they share the values): rollouts of 64 envs x 8 steps
# instead of 64, in two minibatches, so that the one rollout it times is 512 steps, not 4,096
QUICK_HOPPER_PPO: dict[str, Any] = {"n_steps": 8, "minibatch_size": 256}

# rl_games 1.6.5's rl_games/configs/mujoco/hopper_envpool.yaml, as the package ships it, with env_name
# Hopper-v5 and device cpu: 64 actors x horizon 64, minibatch 2,048, 5 mini-epochs, lr 5e-4 adaptive (KL
# 0.008), e_clip 0.2, no value clipping, critic_coef 2, grad_norm 1, gamma 0.99, tau 0.95, one shared
# [256, 128, 64] ELU trunk, a state-independent sigma starting at exp(0), input and value normalisation,
# rewards scaled by 0.1. rlcli's run with those settings starts from its mujoco group (the same rollout,
# minibatches, epochs, schedule and network widths) and changes what differs; rlcli normalises rewards by
# their running return's scale where rl_games scales them by 0.1 and normalises values.
RLGAMES_HOPPER_CONFIG = "configs/mujoco/hopper_envpool.yaml"
RLCLI_RLGAMES_HOPPER = ("learning_rate=0.0005", "network.shared=true", "network.log_std_init=0.0", "clip_value=null")

# SAC with identical hyperparameters on both sides (SB3's SAC defaults, which rlcli can express):
# 256x256 ReLU actor and critics, batch 256, lr 3e-4 for actor, critics and alpha, buffer 1e6,
# gamma 0.99, tau 0.005, one gradient step per env step, autotuned alpha from 0.2 with target -dim(A),
# actor updated every step, Polyak update every step, no observation normalisation.
# DQN on CartPole-v1: rlcli's entry (hyperparams/dqn.yml, the zoo's) on both sides, SB3 given the same values
# (SB3's DQN has no double Q-learning: rlcli's is turned off for this row); the timed window starts after
# learning_starts
CARTPOLE_DQN_SAME: dict[str, Any] = dict(double_q=False, compile="off")
# QR-DQN on CartPole-v1 against sb3-contrib's QRDQN: rl-baselines3-zoo's qrdqn.yml entry is its dqn.yml one with
# 10 quantiles
CARTPOLE_QRDQN_SAME: dict[str, Any] = dict(CARTPOLE_DQN_SAME, quantiles=10)
# DQN on Pong with the Nature CNN: rlcli's atari entry (the zoo's values) on both sides, the same way
PONG_DQN_SAME: dict[str, Any] = dict(double_q=False, compile="off")

# TD3 on Hopper-v5: CleanRL's (the paper's) values, rlcli's td3.yml default, on both sides
HOPPER_TD3_SAME: dict[str, Any] = dict(
    n_envs=1, buffer_size=1_000_000, batch_size=256, gamma=0.99, target_update_rate=0.005, actor_lr=3e-4,
    critic_lr=3e-4, utd_ratio=1.0, policy_delay=2, exploration_noise=0.1, target_noise=0.2, target_noise_clip=0.5,
    actor_hidden=[256, 256], critic_hidden=[256, 256], activation="relu", normalize_obs=False, compile="off",
)

HOPPER_SAC_SAME: dict[str, Any] = dict(
    n_envs=1, buffer_size=1_000_000, batch_size=256, gamma=0.99, target_update_rate=0.005, actor_lr=3e-4,
    critic_lr=3e-4, alpha_lr=3e-4, alpha=0.2, autotune_alpha=True, target_entropy=None, utd_ratio=1.0,
    policy_delay=1, target_update_every=1, actor_hidden=[256, 256], critic_hidden=[256, 256],
    activation="relu", normalize_obs=False, compile=False,
)

# CleanRL ppo_atari.py defaults, spelled out so that a change to rlcli's atari group cannot silently make
# the two sides differ: 8 envs x 128 steps, 4 epochs of 4 minibatches (256), lr 2.5e-4 annealed
# linearly, clip 0.1 (constant) with value clipping 0.1, ent 0.01, vf 0.5, max_grad_norm 0.5, gamma 0.99,
# GAE lambda 0.95, Adam eps 1e-5, Nature CNN with one trunk (its 512-unit dense layer) for actor and
# critic. Frames: 84x84 grey, 4 stacked, frame skip 4, no-op starts, episodic life, fire reset, reward
# clipping: rlcli's Atari preprocessing and SB3's AtariWrapper + VecFrameStack(4) both do exactly that.
PONG_CLEANRL: dict[str, Any] = dict(
    n_envs=8, n_steps=128, n_epochs=4, minibatch_size=256, learning_rate=2.5e-4, lr_schedule="linear",
    clip_range=0.1, clip_range_schedule="constant", clip_value=0.1, ent_coef=0.01, vf_coef=0.5,
    max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95, adam_eps=1e-5, normalize_advantage=True,
    normalize_obs=False, normalize_reward=False, env_kwargs={},
    network=dict(trunk="cnn", hidden=[512], activation="relu", shared=True, ortho_init=True),
)
# Masked PPO: rlcli's MaskedChoice-v0 entry (hyperparams/ppo.yml) on both sides, against sb3-contrib's
# MaskablePPO, which reads the mask through ActionMasker (the env's current ``allowed`` flags) where rlcli
# reads it from info
MASKED_ID = "MaskedChoice-v0"
RECURRENT_ID = "CartPoleNoVel-v1"  # rlcli.envs.partial registers it with gymnasium for both sides
# its tuned entry, with the zoo's 20 epochs: RecurrentPPO's CartPole setting (8 envs x 32 steps, minibatch 256)
RECURRENT_OVERRIDES = {"n_epochs": 20}
# Shared-parameter PPO on mpe2's simple_spread (3 agents) against PettingZoo's own SB3 recipe: SuperSuit's
# pettingzoo_env_to_vec_env_v1 + concat_vec_envs_v1 (8 copies: 24 agent rows), SB3 PPO. Identical values
# on both sides: SB3's PPO defaults with n_steps 128 and batch 256 (a rollout of 8 x 128 x 3 = 3,072 agent
# steps, 10 epochs of minibatches of 256), [64, 64] tanh actor and critic; each agent's critic reads its
# own observation (rlcli's IPPO: SB3 has no centralised critic), no agent id.
MPE_ID = "mpe2.simple_spread_v3"
MPE_AGENTS = 3
MPE_SAME: dict[str, Any] = dict(
    n_envs=8, n_steps=128, minibatch_size=256, n_epochs=10, learning_rate=3e-4, lr_schedule="constant",
    gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_schedule="constant", clip_value=None, ent_coef=0.0,
    vf_coef=0.5, max_grad_norm=0.5, adam_eps=1e-5, normalize_advantage=True, normalize_obs=False,
    normalize_reward=False, multiagent=dict(state=False, agent_id=False),
    network=dict(trunk="mlp", hidden=[64, 64], activation="tanh", shared=False, ortho_init=True),
)

RLCLI_PONG_ID = "Pong-v5"  # envpool's id; the PPO row runs PONG_CLEANRL's values, the DQN row rlcli's entry
SB3_PONG_ID = "PongNoFrameskip-v4"  # what SB3's docs and the zoo train; AtariWrapper adds the rest
# PQN against rlcli's own PPO on Pong, as their runs to 18 were made: envpool's Pong-v5 in bf16, PQN with the
# pqn-atari-128 preset (its authors' values), PPO with its Pong-v5 entry (CleanRL's fast Pong values).
PQN_PONG_PRESET = "pqn-atari-128"
# Env steps to the first deterministic evaluation of 18 or more (10 episodes every 125k steps) in those runs,
# docs/results.md: PQN's seeds 1-4 with the preset ("With its authors' values"), PPO's seeds 1-3 with its entry ("To
# 20 within 10M frames: CleanRL's fast Pong values" and "Frames as bytes, and PPO's seeds 2 and 3"). A run that never
# reached 18 counts at the step it ended, so a side's mean with one is a lower bound.
PONG_STEPS_TO_18: dict[str, tuple[int, ...]] = {"pqn": (1_253_376, 1_003_520, 2_502_656, 753_664),
                                                "ppo": (1_501_184, 2_500_608, 2_500_608)}
PONG_NOT_REACHED = {"pqn": 1, "ppo": 2}  # each side's runs above that ended short of 18

# MuJoCo Playground's Go1 velocity tracking as envpool's C++ task, against envpool itself: rlcli PPO with the task's
# entry (64 envs, the playground group's 512-256-128 actor and critic) and envpool alone with random actions, each
# on one torch thread and one envpool thread, the same 64 envs
GO1_ID = "Go1JoystickFlatTerrain-v1"
GO1_THREADS = 1

# ---------------------------------------------------------------------------------------------------
# Budgets


@dataclass(frozen=True)
class Budgets:
    """Env steps (or seconds) per measurement. ``quick()`` shrinks them for a smoke run."""

    cartpole_steps: int = 100_000  # the zoo's CartPole budget; a side that has not reached 475 stops here
    cartpole_eval_every: int = 2_000  # env steps between evaluations, both sides
    hopper_ppo_steps: int = 100_000
    sac_learning_starts: int = 1_000  # random-action steps before SAC learns; the timed window starts here
    sac_window: int = 5_000  # env steps timed after learning starts
    dqn_learning_starts: int = 1_000  # CartPole-v1 DQN: the entry's random steps, then the timed window
    dqn_window: int = 10_000  # 5,000 gradient steps at the entry's UTD of 0.5
    td3_learning_starts: int = 1_000
    td3_window: int = 3_000  # 3,000 critic and 1,500 actor steps
    pong_dqn_learning_starts: int = 2_000  # Pong DQN: random steps, then the timed window
    pong_dqn_window: int = 4_000  # 1,000 gradient steps of the Nature CNN at the entry's UTD of 0.25
    pong_steps: int = 20_000
    pqn_pong_steps: int = 32_768  # 8 of PQN's rollouts (128 envs x 32 steps), 16 of PPO's (16 x 128)
    masked_steps: int = 50_000  # MaskedChoice-v0's tuned budget
    recurrent_steps: int = 20_480  # 80 updates of CartPoleNoVel-v1's tuned entry (8 envs x 32 steps, 20 epochs)
    mpe_steps: int = 61_440  # agent steps: 20 rollouts of 8 envs x 128 steps x 3 agents
    env_seconds: float = 5.0  # random-action env throughput
    rlgames_steps: int = 1_000_000  # Hopper-v5 PPO against rl_games: the published MuJoCo budget
    go1_steps: int = 153_600  # 100 of Go1's rollouts (64 envs x 24 steps) and their updates

    def quick(self) -> Budgets:
        """A smoke run of every code path, about a minute a section even on a busy 2-core machine: 1/20
        of the budgets was not enough there, so each training measurement is cut to about one rollout
        (PPO runs at least one whole rollout: 4,096 steps for rlcli's MuJoCo PPO, 512 for the zoo's),
        CartPole evaluates every 500 steps so that the evaluation path still runs twice. SAC learns from
        step 300 (still above its batch of 256): rlcli counts learning_starts in stored transitions, not
        in env steps, and with Hopper's short random episodes its first update comes a few dozen steps
        after the mark, which would leave a 50-step window from 1,000 almost without updates."""
        return replace(self, cartpole_steps=1_000, cartpole_eval_every=500, hopper_ppo_steps=500,
                       sac_learning_starts=300, sac_window=50, dqn_learning_starts=300, dqn_window=100,
                       td3_learning_starts=300, td3_window=50, pong_dqn_learning_starts=300,
                       pong_dqn_window=100, pong_steps=256, pqn_pong_steps=512, masked_steps=1_000,
                       recurrent_steps=256, mpe_steps=3_072,
                       env_seconds=0.25, rlgames_steps=4_096, go1_steps=1_536)


# ---------------------------------------------------------------------------------------------------
# Workers: each runs in its own process and returns what the parent prints as one JSON line


@dataclass(frozen=True)
class WorkerArgs:
    seed: int
    steps: int  # env-step budget
    learning_starts: int
    backend: str  # rlcli env backend: auto | envpool | gymnasium
    env: str
    n_envs: int
    seconds: float
    eval_every: int  # env steps between evaluations (CartPole)
    quick: bool  # a smoke run
    precision: str = "fp32"  # rlcli's training arithmetic (fp32 | bf16); SB3 is always float32


class MarksPassed(Exception):
    """Raised by RlcliClock once the last mark is timed: ends train() at once, skipping the closing
    evaluation and checkpoint, which are not measured (10 full Pong games would take minutes)."""


class RlcliClock:
    """An rlcli training callback: the perf_counter time of the first callback at or past each mark
    (env steps), the training loop's own clock then, the gradient steps made and the transitions stepped by
    then (env steps less the reset rows after episode ends), and the torch thread count seen in the first
    callback."""

    def __init__(self, marks: Sequence[int]) -> None:
        self.marks = list(marks)
        self.times: dict[int, tuple[int, float]] = {}  # mark -> (step, perf_counter seconds)
        # mark -> seconds since the training loop began (TrainState.wall_time): envs and agent built, as
        # SB3's clock starts once its model is constructed
        self.loop_seconds: dict[int, float] = {}
        self.updates: dict[int, int] = {}  # mark -> gradient steps so far
        self.total_updates = 0
        self.transitions: dict[int, int] = {}  # mark -> transitions so far
        self.total_transitions = 0
        self.threads: int | None = None
        self.start = time.perf_counter()
        self.first: tuple[int, float] | None = None  # (step, time) of the first callback: the first update's end
        self.first_transitions = 0  # transitions by then

    def __call__(self, state: Any) -> bool:  # state: rlcli.training.train.TrainState
        now = time.perf_counter()
        if self.threads is None:
            import torch

            self.threads = torch.get_num_threads()
        self.total_updates += int(state.metrics.get("charts/gradient_steps", 0))
        self.total_transitions += int(state.metrics["charts/transitions"])
        if self.first is None:
            self.first, self.first_transitions = (state.step, now), self.total_transitions
        for mark in self.marks:
            if mark not in self.times and state.step >= mark:
                self.times[mark] = (state.step, now)
                self.loop_seconds[mark] = state.wall_time
                self.updates[mark] = self.total_updates
                self.transitions[mark] = self.total_transitions
        if self.marks[-1] in self.times:
            raise MarksPassed
        return False


def rlcli_config(algo: str, args: WorkerArgs, overrides: dict[str, Any], **run: Any) -> Any:
    """The RunConfig that ``rlcli train`` builds for these options (tuned hyperparameters <- overrides, run-level
    settings such as ``env_threads``), without evaluations during training. torch_threads is left unset unless
    ``run`` sets it, so rlcli picks its own."""
    from rlcli.algos import resolve

    if args.precision != "fp32":
        overrides = {**overrides, "precision": args.precision}
    return resolve(algo, args.env, backend=args.backend, overrides=overrides, seed=args.seed, device="auto",
                   eval_every=0, **run)


def peer_side(args: WorkerArgs) -> WorkerArgs:
    """``args`` for reading rlcli's hyperparameters in a peer's worker: the peer steps gymnasium's env, so the id
    resolves for gymnasium (the values are those of every backend) and the worker does not import envpool."""
    return replace(args, backend="gymnasium")


def rlcli_threads(cfg: Any, observed: int | None) -> dict[str, Any]:
    """Torch threads: the configured value (None = rlcli chooses), the count seen in a callback (acting),
    and the update's count where this rlcli resolves acting and updating threads separately."""
    from rlcli.training.agents import thread_plan

    update = thread_plan(cfg).updating
    # rlcli's own default; SB3 runs as it ships, keeping subnormal floats
    return {"torch_threads_config": cfg.torch_threads, "torch_threads": observed, "torch_threads_update": update,
            "flush_denormal": getattr(cfg.algo, "flush_denormal", False)}


def rlcli_budget(cfg: Any, marks: Sequence[int]) -> int:
    """The budget ``rlcli_timed_train`` runs ``cfg`` with: two training iterations past the last mark."""
    algo = cfg.algo
    if algo.algo in ("ppo", "pqn"):  # a rollout of n_envs x n_steps, then its update
        iteration = algo.n_envs * algo.n_steps
    else:
        iteration = math.ceil(algo.log_every / algo.n_envs) * algo.n_envs
    return (max(marks) // iteration + 2) * iteration


def rlcli_timed_train(cfg: Any, marks: Sequence[int]) -> tuple[RlcliClock, str]:
    """Trains until the first callback at or past the last mark; returns the clock and the env backend.

    The run's own budget is set two iterations beyond the last mark, because rlcli evaluates and saves
    inside the loop at its final step, before callbacks run: the clock must end training first. Two
    iterations, not more, so that schedules over the budget (a linear learning rate) anneal about as
    SB3's do over its budget."""
    # a one-off import is not throughput (SB3's clock, too, starts after its imports)
    import torch.utils.tensorboard  # noqa: F401

    from rlcli.envs.registry import resolve_backend
    from rlcli.training.train import train

    steps = rlcli_budget(cfg, marks)
    cfg = cfg.model_copy(update={"algo": cfg.algo.model_copy(update={"steps": steps})})
    clock = RlcliClock(marks)
    with tempfile.TemporaryDirectory(prefix="bench-rlcli-") as tmp:
        try:
            train(cfg, Path(tmp) / "run", callbacks=[clock])
        except MarksPassed:
            pass
    if len(clock.times) != len(marks):
        raise RuntimeError(f"training ended at step {steps} before the marks {marks}")
    return clock, resolve_backend(cfg.env.id, cfg.env.backend)


def steady_rate(steps: int, seconds: float) -> float:
    """Steps/s after the first update; NaN where the budget ended with it (a --quick run's one rollout)."""
    return steps / seconds if steps > 0 and seconds > 0 else math.nan


def rlcli_throughput(args: WorkerArgs, overrides: dict[str, Any], algo: str = "ppo", **run: Any) -> dict[str, Any]:
    """Env steps/s and transitions/s (env steps less reset rows) from the start of the training loop (envs and
    agent built, like SB3's model before its clock starts) to the first callback at or past ``args.steps``;
    ``setup_tps`` counts from the call to train() instead, charging rlcli the construction that SB3's figure
    leaves out, and ``steady_tps`` from the end of the first update. ``algo``: an on-policy learner of rollouts
    (ppo, or pqn); ``run``: run-level settings (threads)."""
    cfg = rlcli_config(algo, args, overrides, **run)
    clock, backend = rlcli_timed_train(cfg, [args.steps])
    step, end = clock.times[args.steps]
    seconds = clock.loop_seconds[args.steps]
    first_step, first_time = clock.first  # type: ignore[misc]
    transitions = clock.transitions[args.steps]
    return {"steps": step, "seconds": seconds, "sps": step / seconds, "transitions": transitions,
            "tps": transitions / seconds, "setup_seconds": end - clock.start - seconds,
            "setup_tps": transitions / (end - clock.start),
            "steady_sps": steady_rate(step - first_step, end - first_time),
            "steady_tps": steady_rate(transitions - clock.first_transitions, end - first_time),
            "n_envs": cfg.algo.n_envs, "backend": backend, "precision": cfg.algo.precision,
            "env_threads": cfg.env_threads, **rlcli_threads(cfg, clock.threads)}


def sb3_clock(marks: Sequence[int] = (), stop_at_last_mark: bool = False) -> Any:
    """An SB3 callback recording perf_counter at training start and end, and at the first step at or
    past each mark (env steps); with ``stop_at_last_mark`` it ends training there."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = self.end = 0.0
            self.times: dict[int, tuple[int, float]] = {}
            self.updates: dict[int, int] = {}  # mark -> gradient steps so far
            self.threads = 0
            self.rollouts = 0
            self.first: tuple[int, float] | None = None  # (steps, time) when the first update has ended

        def _on_training_start(self) -> None:
            import torch

            self.threads = torch.get_num_threads()
            self.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            self.rollouts += 1
            if self.rollouts == 2:
                self.first = (self.num_timesteps, time.perf_counter())

        def _on_step(self) -> bool:
            now = time.perf_counter()
            for mark in marks:
                if mark not in self.times and self.num_timesteps >= mark:
                    self.times[mark] = (self.num_timesteps, now)
                    self.updates[mark] = int(self.model._n_updates)
            return not (stop_at_last_mark and marks and marks[-1] in self.times)

        def _on_training_end(self) -> None:
            self.end = time.perf_counter()

    return Clock()


def sb3_ppo_throughput(model: Any, steps: int) -> dict[str, Any]:
    """Env steps/s of ``model.learn(steps)``, from training start to the end of the last update (SB3
    finishes its last rollout's update after passing the budget, as rlcli's callback follows its)."""
    clock = sb3_clock()
    model.learn(total_timesteps=steps, callback=clock)
    seconds = clock.end - clock.start
    first_steps, first_time = clock.first or (model.num_timesteps, clock.end)
    # every step a transition: SB3's vector envs reset inside the ending step
    steady = steady_rate(model.num_timesteps - first_steps, clock.end - first_time)
    return {"steps": model.num_timesteps, "seconds": seconds, "sps": model.num_timesteps / seconds,
            "transitions": model.num_timesteps, "tps": model.num_timesteps / seconds,
            "steady_sps": steady, "steady_tps": steady,
            "n_envs": model.n_envs, "backend": type(model.get_env().unwrapped).__name__,
            "torch_threads": clock.threads}


def linear(start: float) -> Callable[[float], float]:
    """SB3 schedule from ``start`` down to 0 (SB3 passes the remaining progress, 1 -> 0)."""
    return lambda progress_remaining: progress_remaining * start


def sb3_activation(name: str) -> Any:
    """The torch module class SB3 takes for an rlcli activation name (sb3_runs' table)."""
    from sb3_runs import ACTIVATIONS

    return ACTIVATIONS[name]


def sb3_ppo_kwargs(cfg: Any) -> tuple[str, dict[str, Any]]:
    """(policy, PPO keyword arguments) for SB3 equal to an rlcli PPOConfig; raises ValueError for settings
    SB3 cannot express, so that a "same hyperparameters" row never compares different algorithms."""
    net = cfg.network
    if cfg.lr_schedule.value == "adaptive_kl":
        raise ValueError("SB3 has no adaptive-KL learning rate; override lr_schedule")
    learning_rate = linear(cfg.learning_rate) if cfg.lr_schedule.value == "linear" else cfg.learning_rate
    clip_range = linear(cfg.clip_range) if cfg.clip_range_schedule == "linear" else cfg.clip_range
    policy_kwargs: dict[str, Any] = dict(activation_fn=sb3_activation(net.activation), ortho_init=net.ortho_init,
                                         optimizer_kwargs=dict(eps=cfg.adam_eps))
    if net.trunk == "cnn":
        if not net.shared or len(net.hidden) != 1:
            raise ValueError("SB3's CnnPolicy shares one Nature CNN (one dense layer) between actor and critic")
        policy = "CnnPolicy"  # heads straight on the CNN's dense layer, as rlcli's hidden: [512]
        policy_kwargs.update(net_arch=[], features_extractor_kwargs=dict(features_dim=net.hidden[0]))
    else:
        if net.shared:
            raise ValueError("SB3 2.x MLP policies have separate actor and critic networks")
        policy = "MlpPolicy"
        policy_kwargs.update(net_arch=dict(pi=list(net.hidden), vf=list(net.hidden)), log_std_init=net.log_std_init)
    kwargs = dict(learning_rate=learning_rate, n_steps=cfg.n_steps, batch_size=cfg.minibatch_size,
                  n_epochs=cfg.n_epochs, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, clip_range=clip_range,
                  clip_range_vf=cfg.clip_value, normalize_advantage=cfg.normalize_advantage,
                  ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm,
                  policy_kwargs=policy_kwargs)
    return policy, kwargs


def sb3_normalized(venv: Any, cfg: Any) -> Any:
    """VecNormalize as rlcli's normalize_obs / normalize_reward (SB3's DummyVecEnv underneath)."""
    if not (cfg.normalize_obs or cfg.normalize_reward):
        return venv
    from stable_baselines3.common.vec_env import VecNormalize

    return VecNormalize(venv, norm_obs=cfg.normalize_obs, norm_reward=cfg.normalize_reward,
                        clip_obs=cfg.clip_obs, gamma=cfg.gamma)


def worker_sb3_cartpole(args: WorkerArgs) -> dict[str, Any]:
    """The zoo's tuned PPO until a deterministic 10-episode evaluation every ``eval_every`` env steps
    (eval_freq counts vector steps, hence the division) reaches 475 or the budget ends; the parent
    times the whole process."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=ZOO_CARTPOLE_N_ENVS, seed=args.seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 1_000_003)  # EvalCallback's usual one env
    stop = StopTrainingOnRewardThreshold(reward_threshold=CARTPOLE_TARGET, verbose=0)
    evaluation = EvalCallback(eval_env, callback_on_new_best=stop, n_eval_episodes=10, deterministic=True,
                              eval_freq=max(args.eval_every // ZOO_CARTPOLE_N_ENVS, 1), verbose=0)
    model = PPO("MlpPolicy", env, learning_rate=linear(ZOO_CARTPOLE_LR), clip_range=linear(ZOO_CARTPOLE_CLIP),
                seed=args.seed, **ZOO_CARTPOLE)
    model.learn(total_timesteps=args.steps, callback=evaluation)
    best = float(evaluation.best_mean_reward)
    reached = best >= CARTPOLE_TARGET  # then training stopped right after that evaluation
    return {"steps": model.num_timesteps, "reached": reached, "reached_at": model.num_timesteps if reached else None,
            "best_eval": best, "n_envs": ZOO_CARTPOLE_N_ENVS, "backend": "DummyVecEnv",
            "torch_threads": torch.get_num_threads()}


def hopper_ppo_overrides(args: WorkerArgs, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides``, and a quick run's shorter rollouts (QUICK_HOPPER_PPO) on top."""
    return {**overrides, **QUICK_HOPPER_PPO} if args.quick else overrides


def worker_rlcli_hopper_ppo(args: WorkerArgs) -> dict[str, Any]:
    """rlcli's tuned Hopper PPO (hyperparams/ppo.yml, mujoco group), steps/s."""
    return rlcli_throughput(args, hopper_ppo_overrides(args, {}))


def worker_sb3_hopper_ppo(args: WorkerArgs) -> dict[str, Any]:
    """The zoo's tuned Hopper PPO, steps/s."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(args.env, n_envs=ZOO_HOPPER_N_ENVS, seed=args.seed), gamma=ZOO_HOPPER["gamma"])
    policy_kwargs = dict(log_std_init=-2, ortho_init=False, activation_fn=sb3_activation("relu"),
                         net_arch=dict(pi=[256, 256], vf=[256, 256]))
    model = PPO("MlpPolicy", env, policy_kwargs=policy_kwargs, seed=args.seed, **ZOO_HOPPER)
    return sb3_ppo_throughput(model, args.steps)


def worker_rlcli_hopper_ppo_same(args: WorkerArgs) -> dict[str, Any]:
    """rlcli's mujoco-group Hopper PPO with a constant learning rate, steps/s (``--backend`` honoured)."""
    return rlcli_throughput(args, hopper_ppo_overrides(args, HOPPER_PPO_SAME))


def worker_sb3_hopper_ppo_same(args: WorkerArgs) -> dict[str, Any]:
    """SB3 PPO with rlcli's mujoco-group values, on DummyVecEnv (SB3's default) + VecNormalize, steps/s."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    cfg = rlcli_config("ppo", peer_side(args), hopper_ppo_overrides(args, HOPPER_PPO_SAME)).algo
    policy, kwargs = sb3_ppo_kwargs(cfg)
    env = sb3_normalized(make_vec_env(args.env, n_envs=cfg.n_envs, seed=args.seed), cfg)
    return sb3_ppo_throughput(PPO(policy, env, seed=args.seed, **kwargs), args.steps)


def window_config(algo: str, args: WorkerArgs, overrides: dict[str, Any]) -> Any:
    """The RunConfig of ``rlcli_window``: learning from ``args.learning_starts``, one training iteration a
    common divisor of it and the window, so that a callback falls exactly on both marks."""
    return rlcli_config(algo, args, {**overrides, "learning_starts": args.learning_starts,
                                     "log_every": math.gcd(args.learning_starts, args.steps)})


def window_budget(cfg: Any, args: WorkerArgs) -> int:
    """The budget rlcli's side of a window runs with, which SB3's is given too: schedules over the budget
    (DQN's epsilon) then anneal alike, and SB3 acts greedily as often as rlcli does."""
    return rlcli_budget(cfg, [args.learning_starts, args.learning_starts + args.steps])


def rlcli_window(algo: str, args: WorkerArgs, overrides: dict[str, Any]) -> dict[str, Any]:
    """An rlcli off-policy run's env steps/s between the first callbacks at or past ``learning_starts`` and
    ``learning_starts + steps``, and its gradient steps in between."""
    start, end = args.learning_starts, args.learning_starts + args.steps
    cfg = window_config(algo, args, overrides)
    clock, backend = rlcli_timed_train(cfg, [start, end])
    (step0, t0), (step1, t1) = clock.times[start], clock.times[end]
    transitions = clock.transitions[end] - clock.transitions[start]
    return {"steps": step1 - step0, "seconds": t1 - t0, "sps": (step1 - step0) / (t1 - t0), "window": [step0, step1],
            "transitions": transitions, "tps": transitions / (t1 - t0),
            "updates": clock.updates[end] - clock.updates[start], "n_envs": cfg.algo.n_envs, "backend": backend,
            "precision": cfg.algo.precision, **rlcli_threads(cfg, clock.threads)}


def sb3_window(model: Any, args: WorkerArgs, total: int, n_envs: int) -> dict[str, Any]:
    """An SB3 off-policy model's env steps/s between the steps ``learning_starts`` and ``learning_starts +
    steps`` of a run of ``total`` steps (stopped there), and its gradient steps in between."""
    start, end = args.learning_starts, args.learning_starts + args.steps
    clock = sb3_clock([start, end], stop_at_last_mark=True)
    model.learn(total_timesteps=max(total, end), callback=clock)
    (step0, t0), (step1, t1) = clock.times[start], clock.times[end]
    sps = (step1 - step0) / (t1 - t0)  # every step a transition: SB3's vector envs reset inside the ending step
    return {"steps": step1 - step0, "seconds": t1 - t0, "sps": sps, "window": [step0, step1],
            "transitions": step1 - step0, "tps": sps,
            "updates": clock.updates[end] - clock.updates[start], "n_envs": n_envs, "backend": "DummyVecEnv",
            "torch_threads": clock.threads}


def worker_rlcli_hopper_sac(args: WorkerArgs) -> dict[str, Any]:
    """rlcli SAC: env steps/s over the window after ``learning_starts``."""
    return rlcli_window("sac", args, HOPPER_SAC_SAME)


def worker_rlcli_cartpole_dqn(args: WorkerArgs) -> dict[str, Any]:
    """rlcli DQN with its CartPole-v1 entry: env steps/s over the window after ``learning_starts``."""
    return rlcli_window("dqn", args, CARTPOLE_DQN_SAME)


def worker_rlcli_cartpole_qrdqn(args: WorkerArgs) -> dict[str, Any]:
    """rlcli DQN with 10 quantiles over its CartPole-v1 entry, the same window."""
    return rlcli_window("dqn", args, CARTPOLE_QRDQN_SAME)


def worker_rlcli_cartpole_dqn_per(args: WorkerArgs) -> dict[str, Any]:
    """The same with prioritised replay."""
    return rlcli_window("dqn", args, {**CARTPOLE_DQN_SAME, "prioritized": True})


def sb3_replay_model(run: Any, env: Any, device: str = "auto") -> Any:
    """SB3's SAC, TD3 or DQN (sb3-contrib's QRDQN where the config has quantiles) with the values of rlcli's
    RunConfig ``run``, mapped by scripts/sb3_runs.py, which refuses what SB3 cannot express."""
    from sb3_runs import make_model, sb3_kwargs

    return make_model(run, sb3_kwargs(run.algo), env, device=device)


def worker_sb3_cartpole_dqn(args: WorkerArgs, values: dict[str, Any] = CARTPOLE_DQN_SAME) -> dict[str, Any]:
    """SB3 DQN with rlcli's CartPole-v1 entry (``sb3_replay_model``) over the same budget (``window_budget``)."""
    from stable_baselines3.common.env_util import make_vec_env

    run = window_config("dqn", args, values)
    model = sb3_replay_model(run, make_vec_env(args.env, n_envs=1, seed=args.seed))
    return sb3_window(model, args, window_budget(run, args), 1)


def worker_sb3_cartpole_qrdqn(args: WorkerArgs) -> dict[str, Any]:
    """sb3-contrib QRDQN with the same values as rlcli's QR-DQN side."""
    return worker_sb3_cartpole_dqn(args, CARTPOLE_QRDQN_SAME)


def worker_rlcli_pong_dqn(args: WorkerArgs) -> dict[str, Any]:
    """rlcli DQN with its atari entry on envpool's Pong-v5: env steps/s over the window after ``learning_starts``."""
    return rlcli_window("dqn", replace(args, env=RLCLI_PONG_ID), PONG_DQN_SAME)


def worker_sb3_pong_dqn(args: WorkerArgs) -> dict[str, Any]:
    """SB3 DQN (CnnPolicy) on make_atari_env + VecFrameStack(4) with rlcli's atari entry: one gradient step
    every 1 / utd_ratio env steps, the target copied every target_update_every gradient steps, the same
    exploration over the same budget."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    run = window_config("dqn", peer_side(replace(args, env=RLCLI_PONG_ID)), PONG_DQN_SAME)
    env = VecFrameStack(make_atari_env(SB3_PONG_ID, n_envs=1, seed=args.seed), n_stack=4)
    model = sb3_replay_model(run, env)
    return {**sb3_window(model, args, window_budget(run, args), 1), "obs_shape": list(model.observation_space.shape)}


def worker_rlcli_hopper_td3(args: WorkerArgs) -> dict[str, Any]:
    """rlcli TD3 with CleanRL's values: env steps/s over the window after ``learning_starts``."""
    return rlcli_window("td3", args, HOPPER_TD3_SAME)


def worker_sb3_hopper_td3(args: WorkerArgs) -> dict[str, Any]:
    """SB3 TD3 with the same values (``sb3_replay_model``)."""
    from stable_baselines3.common.env_util import make_vec_env

    run = rlcli_config("td3", peer_side(args), {**HOPPER_TD3_SAME, "learning_starts": args.learning_starts})
    return sb3_window(sb3_replay_model(run, make_vec_env(args.env, n_envs=1, seed=args.seed)), args, run.algo.steps, 1)


def worker_sb3_hopper_sac(args: WorkerArgs) -> dict[str, Any]:
    """SB3 SAC with the same hyperparameters: env steps/s between the steps ``learning_starts`` and
    ``learning_starts + steps`` (one gradient step per env step in between)."""
    from stable_baselines3.common.env_util import make_vec_env

    start, end = args.learning_starts, args.learning_starts + args.steps
    run = rlcli_config("sac", peer_side(args), {**HOPPER_SAC_SAME, "learning_starts": start})
    model = sb3_replay_model(run, make_vec_env(args.env, n_envs=run.algo.n_envs, seed=args.seed))
    return sb3_window(model, args, end, run.algo.n_envs)


def pong_hyperparameters(args: WorkerArgs) -> dict[str, Any]:
    """CleanRL's values; a quick run, on both sides, collects 32 steps instead of 128 and updates for one
    epoch instead of four (still four minibatches), since one rollout's four CNN epochs alone take most of
    a minute on a busy 2-core CPU."""
    return {**PONG_CLEANRL, "n_steps": 32, "minibatch_size": 64, "n_epochs": 1} if args.quick else PONG_CLEANRL


def worker_rlcli_pong(args: WorkerArgs) -> dict[str, Any]:
    """rlcli PPO on Pong-v5 with CleanRL's ppo_atari hyperparameters, steps/s."""
    from rlcli.envs import make_vec_env

    probe = make_vec_env(args.env, 1, args.seed, args.backend)  # the observation the CNN sees, as a check
    obs_shape = list(probe.single_observation_space.shape)
    probe.close()
    return {**rlcli_throughput(args, pong_hyperparameters(args)), "obs_shape": obs_shape}


def worker_sb3_pong(args: WorkerArgs) -> dict[str, Any]:
    """SB3 PPO (CnnPolicy) on make_atari_env + VecFrameStack(4) with the same hyperparameters, steps/s."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)  # gymnasium 1.x no longer registers the ALE ids on its own
    cfg = rlcli_config("ppo", peer_side(replace(args, env=RLCLI_PONG_ID)), pong_hyperparameters(args)).algo
    policy, kwargs = sb3_ppo_kwargs(cfg)
    env = VecFrameStack(make_atari_env(SB3_PONG_ID, n_envs=cfg.n_envs, seed=args.seed), n_stack=4)
    model = PPO(policy, env, seed=args.seed, **kwargs)
    return {**sb3_ppo_throughput(model, args.steps), "obs_shape": list(model.observation_space.shape)}


def pong_to_18_overrides(algo: str, args: WorkerArgs) -> dict[str, Any]:
    """The values of the runs in PONG_STEPS_TO_18; a quick run, on both sides, collects 32 steps of 16 envs and
    updates for one epoch."""
    from rlcli.config import config_source, load_yaml

    values = load_yaml(config_source(Path(PQN_PONG_PRESET))) if algo == "pqn" else {}
    if args.quick:
        values = {**values, "n_envs": 16, "n_steps": 32, "minibatch_size": 128, "n_epochs": 1}
    return values


def worker_rlcli_pong_to_18(algo: str) -> Callable[[WorkerArgs], dict[str, Any]]:
    """rlcli ``algo`` on Pong-v5 in bf16 with the values of its run to 18: env steps/s."""
    def worker(args: WorkerArgs) -> dict[str, Any]:
        args = replace(args, env=RLCLI_PONG_ID, precision="bf16")
        return rlcli_throughput(args, pong_to_18_overrides(algo, args), algo)
    return worker


def random_action_batches(space: Any, n_envs: int, seed: int, count: int = 64) -> list[Any]:
    """Pre-drawn batches of uniform random actions, so that drawing them is not timed with the env."""
    import numpy as np
    from gymnasium import spaces

    rng = np.random.default_rng(seed)
    if isinstance(space, spaces.Discrete):
        return [space.start + rng.integers(0, space.n, size=n_envs) for _ in range(count)]
    if isinstance(space, spaces.Box):
        return [rng.uniform(space.low, space.high, size=(n_envs, *space.shape)).astype(space.dtype)
                for _ in range(count)]
    raise ValueError(f"no random actions for {space}")


def time_env(step: Callable[[Any], Any], batches: list[Any], n_envs: int, seconds: float) -> dict[str, Any]:
    """Steps with the batches in turn for at least ``seconds``; returns env steps, seconds, steps/s."""
    steps, start = 0, time.perf_counter()
    while True:
        for actions in batches:
            step(actions)
            steps += n_envs
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return {"steps": steps, "seconds": elapsed, "sps": steps / elapsed, "n_envs": n_envs}


def worker_env_rlcli(args: WorkerArgs, threads: int | None = None) -> dict[str, Any]:
    """Random-action steps/s of rlcli's vector env (envpool where it has the task, on ``threads`` worker threads;
    None: envpool's default), no agent."""
    from rlcli.envs import make_vec_env

    env = make_vec_env(args.env, args.n_envs, args.seed, args.backend, threads=threads)
    env.reset()
    batches = random_action_batches(env.single_action_space, args.n_envs, args.seed)
    result = time_env(env.step, batches, args.n_envs, args.seconds)
    env.close()
    return {**result, "backend": env.backend, "env_threads": threads}


def worker_env_sb3(args: WorkerArgs) -> dict[str, Any]:
    """Random-action steps/s of SB3's make_vec_env (DummyVecEnv of Monitor-wrapped envs), no agent."""
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(args.env, n_envs=args.n_envs, seed=args.seed)
    venv.reset()
    batches = random_action_batches(venv.action_space, args.n_envs, args.seed)
    result = time_env(venv.step, batches, args.n_envs, args.seconds)
    venv.close()
    return {**result, "backend": type(venv).__name__}


def worker_rlcli_masked(args: WorkerArgs) -> dict[str, Any]:
    """rlcli's masked PPO on MaskedChoice-v0 (its tuned entry, the mask from info), steps/s."""
    return rlcli_throughput(args, {})


def sb3_vector_env(env_id: str, n_envs: int) -> Any:
    """``env_id``'s gymnasium vector env (its vector entry point, the env rlcli's gymnasium backend steps)
    as an SB3 VecEnv, under SB3's VecMonitor for episode statistics. SB3 starts a new episode within the
    step that ends one, the final observation in that env's info; the vector env resets on the next step,
    so the adapter resets the rows that ended at once (``reset_mask``). ``action_masks()`` is
    sb3-contrib's hook: the mask published in info with the latest observations (None where the env
    publishes none)."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor

    class SB3VectorEnv(VecEnv):
        render_mode = None

        def __init__(self) -> None:
            self.venv = gym.make_vec(env_id, n_envs, vectorization_mode="vector_entry_point")
            self.masks: Any = None
            super().__init__(n_envs, self.venv.single_observation_space, self.venv.single_action_space)

        def reset(self) -> Any:
            obs, info = self.venv.reset(seed=self._seeds[0])
            self._reset_seeds()
            self._read_masks(info)
            return obs

        def step_async(self, actions: Any) -> None:
            self.actions = actions

        def step_wait(self) -> Any:
            obs, rewards, terminated, truncated, info = self.venv.step(self.actions)
            dones = terminated | truncated
            infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]
            if dones.any():
                for i in dones.nonzero()[0]:
                    infos[i] = {"terminal_observation": obs[i],
                                "TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
                obs, info = self.venv.reset(options={"reset_mask": dones})
            self._read_masks(info)
            return obs, rewards, dones, infos

        def _read_masks(self, info: dict[str, Any]) -> None:
            self.masks = info["action_mask"].astype(bool) if "action_mask" in info else None

        def action_masks(self) -> Any:
            return self.masks

        def close(self) -> None:
            self.venv.close()

        def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
            return [getattr(self, attr_name)] * len(list(self._get_indices(indices)))

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            setattr(self, attr_name, value)

        def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
            """Each env's row of what the method returns for all of them (``action_masks``)."""
            rows = getattr(self, method_name)(*args, **kwargs)
            return [rows[i] for i in self._get_indices(indices)]

        def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
            return [False] * len(list(self._get_indices(indices)))

    return VecMonitor(SB3VectorEnv())


def worker_sb3_masked(args: WorkerArgs) -> dict[str, Any]:
    """sb3-contrib's MaskablePPO with rlcli's MaskedChoice-v0 values, on the task's vector env (the one
    rlcli steps), steps/s."""
    from sb3_contrib import MaskablePPO

    import rlcli.envs.masked  # noqa: F401  (registers the task)

    cfg = rlcli_config("ppo", args, {}).algo
    policy, kwargs = sb3_ppo_kwargs(cfg)
    kwargs["policy_kwargs"].pop("log_std_init")  # Discrete actions: MaskablePPO's policy takes no such key
    env = sb3_vector_env(args.env, cfg.n_envs)
    return sb3_ppo_throughput(MaskablePPO(policy, env, seed=args.seed, **kwargs), args.steps)


def recurrent_hyperparameters(args: WorkerArgs) -> dict[str, Any]:
    """The zoo's 20 epochs over rlcli's entry; a quick run updates for one epoch on both sides (RecurrentPPO's
    20 take most of a minute for one rollout on a busy 2-core CPU)."""
    return {**RECURRENT_OVERRIDES, "n_epochs": 1} if args.quick else RECURRENT_OVERRIDES


def worker_rlcli_recurrent(args: WorkerArgs) -> dict[str, Any]:
    """rlcli's recurrent PPO on CartPoleNoVel-v1 (its tuned entry: an LSTM of 64 for the actor and one for
    the critic; 20 epochs), steps/s."""
    return rlcli_throughput(args, recurrent_hyperparameters(args))


def worker_sb3_recurrent(args: WorkerArgs) -> dict[str, Any]:
    """sb3-contrib's RecurrentPPO with rlcli's CartPoleNoVel-v1 values (LSTM 64, a critic LSTM of its own,
    the trunk's layers as its net_arch, which RecurrentPPO places after the LSTM), on the task's vector env
    (the one rlcli steps), steps/s."""
    from sb3_contrib import RecurrentPPO

    import rlcli.envs.partial  # noqa: F401  (registers the task)

    cfg = rlcli_config("ppo", args, recurrent_hyperparameters(args)).algo
    _, kwargs = sb3_ppo_kwargs(cfg)
    kwargs["policy_kwargs"].update(lstm_hidden_size=cfg.network.recurrent_size,
                                   enable_critic_lstm=not cfg.network.shared, shared_lstm=cfg.network.shared)
    kwargs["policy_kwargs"].pop("log_std_init")  # Discrete actions
    env = sb3_vector_env(args.env, cfg.n_envs)
    return sb3_ppo_throughput(RecurrentPPO("MlpLstmPolicy", env, seed=args.seed, **kwargs), args.steps)


def worker_rlcli_mpe(args: WorkerArgs) -> dict[str, Any]:
    """rlcli's shared-parameter PPO on simple_spread: agent steps/s (``args.steps`` counts agent steps,
    as SB3 does; rlcli's own steps are env steps, each one of every agent)."""
    env_steps = replace(args, steps=args.steps // MPE_AGENTS)
    result = rlcli_throughput(env_steps, MPE_SAME)
    per_agent = ("steps", "sps", "transitions", "tps", "setup_tps", "steady_sps", "steady_tps")
    return {**result, **{key: result[key] * MPE_AGENTS for key in per_agent}, "env_sps": result["sps"]}


def worker_sb3_mpe(args: WorkerArgs) -> dict[str, Any]:
    """SB3 PPO on SuperSuit's parameter-sharing vector env of simple_spread (PettingZoo's tutorial recipe),
    the same values: agent steps/s. SuperSuit's ConcatVecEnv cannot be seeded (it has no seed()), so SB3's
    PPO is built without a seed and only torch's draws are seeded."""
    import importlib

    import supersuit as ss
    import torch
    from stable_baselines3 import PPO

    cfg = rlcli_config("ppo", args, MPE_SAME).algo
    policy, kwargs = sb3_ppo_kwargs(cfg)
    kwargs["policy_kwargs"].pop("log_std_init")  # Discrete actions
    module = importlib.import_module(args.env)
    env = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(module.parallel_env()), cfg.n_envs, num_cpus=1,
                                base_class="stable_baselines3")
    torch.manual_seed(args.seed)
    result = sb3_ppo_throughput(PPO(policy, env, **kwargs), args.steps)
    return {**result, "env_sps": result["sps"] / MPE_AGENTS}



def worker_rlgames_hopper(args: WorkerArgs) -> dict[str, Any]:
    """rl_games 1.6.5 training Hopper-v5 on envpool with its own hopper_envpool.yaml (device cpu), through
    its Runner as its runner.py calls it, in a temporary directory (it writes runs/ where it starts)."""
    import importlib.resources

    import torch
    import yaml
    from rl_games.torch_runner import Runner

    config = yaml.safe_load(importlib.resources.files("rl_games").joinpath(RLGAMES_HOPPER_CONFIG).read_text())
    params = config["params"]
    params["seed"] = args.seed
    settings = params["config"]
    settings["env_config"].update(env_name=args.env, seed=args.seed)
    settings.update(device="cpu", device_name="cpu", max_epochs=-1, max_frames=args.steps)
    with tempfile.TemporaryDirectory(prefix="bench-rlgames-") as tmp:
        os.chdir(tmp)
        start = time.perf_counter()
        runner = Runner()
        runner.load(config)
        runner.reset()
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
        seconds = time.perf_counter() - start
        os.chdir(REPO)
    return {"steps": args.steps, "seconds": seconds, "sps": args.steps / seconds, "backend": "envpool",
            "n_envs": settings["num_actors"], "torch_threads": torch.get_num_threads()}


def worker_rlcli_go1(args: WorkerArgs) -> dict[str, Any]:
    """rlcli PPO on envpool's Go1 with its entry, one torch thread and one envpool thread: steps/s."""
    return rlcli_throughput(args, {}, torch_threads=GO1_THREADS, env_threads=GO1_THREADS)


def worker_env_go1(args: WorkerArgs) -> dict[str, Any]:
    """envpool's Go1 alone with random actions, its entry's envs on one envpool thread: steps/s."""
    n_envs = rlcli_config("ppo", args, {}).algo.n_envs
    return worker_env_rlcli(replace(args, n_envs=n_envs), threads=GO1_THREADS)


WORKERS: dict[str, Callable[[WorkerArgs], dict[str, Any]]] = {
    "rlgames-hopper": worker_rlgames_hopper,
    "sb3-cartpole": worker_sb3_cartpole,
    "rlcli-hopper-ppo": worker_rlcli_hopper_ppo,
    "sb3-hopper-ppo": worker_sb3_hopper_ppo,
    "rlcli-hopper-ppo-same": worker_rlcli_hopper_ppo_same,
    "sb3-hopper-ppo-same": worker_sb3_hopper_ppo_same,
    "rlcli-hopper-sac": worker_rlcli_hopper_sac,
    "rlcli-cartpole-dqn": worker_rlcli_cartpole_dqn,
    "rlcli-cartpole-dqn-per": worker_rlcli_cartpole_dqn_per,
    "sb3-cartpole-dqn": worker_sb3_cartpole_dqn,
    "rlcli-cartpole-qrdqn": worker_rlcli_cartpole_qrdqn,
    "sb3-cartpole-qrdqn": worker_sb3_cartpole_qrdqn,
    "rlcli-pong-dqn": worker_rlcli_pong_dqn,
    "sb3-pong-dqn": worker_sb3_pong_dqn,
    "rlcli-hopper-td3": worker_rlcli_hopper_td3,
    "sb3-hopper-td3": worker_sb3_hopper_td3,
    "sb3-hopper-sac": worker_sb3_hopper_sac,
    "rlcli-pong": worker_rlcli_pong,
    "rlcli-pong-pqn": worker_rlcli_pong_to_18("pqn"),
    "rlcli-pong-ppo": worker_rlcli_pong_to_18("ppo"),
    "sb3-pong": worker_sb3_pong,
    "rlcli-masked": worker_rlcli_masked,
    "sb3-masked": worker_sb3_masked,
    "rlcli-recurrent": worker_rlcli_recurrent,
    "sb3-recurrent": worker_sb3_recurrent,
    "rlcli-mpe": worker_rlcli_mpe,
    "sb3-mpe": worker_sb3_mpe,
    "env-rlcli": worker_env_rlcli,
    "env-sb3": worker_env_sb3,
    "rlcli-go1": worker_rlcli_go1,
    "env-go1": worker_env_go1,
}


def worker_main(opts: argparse.Namespace) -> int:
    """Runs one worker; its JSON is the only line on stdout (library output is sent to stderr)."""
    args = WorkerArgs(seed=opts.seed, steps=opts.steps, learning_starts=opts.learning_starts, backend=opts.backend,
                      env=opts.env, n_envs=opts.n_envs, seconds=opts.seconds, eval_every=opts.eval_every,
                      quick=opts.quick, precision=opts.precision)
    if opts.worker.startswith("sb3-") and opts.env:  # SB3 makes its envs through gym.make, not rlcli's backend
        from rlcli.envs.base import mujoco_warnings_to_python

        mujoco_warnings_to_python(opts.env)
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        result = WORKERS[opts.worker](args)
    stdout.write(json.dumps(result) + "\n")
    stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------------
# Parent: sections, each a set of measurements run in fresh processes


class WorkerError(RuntimeError):
    """A measurement's process failed; the message ends with the tail of its stderr."""


def run_process(argv: list[str]) -> tuple[float, str]:
    """(wall seconds around the whole process, its stdout); raises WorkerError on a non-zero exit."""
    # SB3's logger makes a folder even with no outputs ($SB3_LOGDIR, else one in /tmp): this one, removed after
    with tempfile.TemporaryDirectory(prefix="bench-peers-sb3-") as logs:
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env={**os.environ, "SB3_LOGDIR": logs})
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise WorkerError(f"{' '.join(argv[1:])} exited with {proc.returncode}:\n{tail}")
    return seconds, proc.stdout


def run_worker(name: str, seed: int, **options: Any) -> dict[str, Any]:
    """Runs worker ``name`` in a fresh process; its JSON result plus ``process_seconds``."""
    argv = [sys.executable, str(SCRIPT), "--worker", name, "--seed", str(seed)]
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    seconds, stdout = run_process(argv)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise WorkerError(f"worker {name} printed no JSON result")
    return {**json.loads(lines[-1]), "process_seconds": seconds}


def run_rlcli_cartpole(seed: int, steps: int, eval_every: int, params: Sequence[str] = ()) -> dict[str, Any]:
    """``rlcli train CartPole-v1`` as a user runs it, timed around the process, plus what its run
    directory says: the step it stopped at, the first evaluation that reached 475, its config.
    ``params`` are ``-p key=value`` overrides of the tuned entry."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="bench-rlcli-cartpole-") as tmp:
        run_dir = Path(tmp) / "run"
        seconds, _ = run_process([
            sys.executable, "-m", "rlcli", "train", "CartPole-v1", "--eval-every", str(eval_every),
            "--stop-at", str(CARTPOLE_TARGET), "--seed", str(seed), "--steps", str(steps), "--run-dir", str(run_dir),
            *(arg for param in params for arg in ("-p", param))])
        meta = json.loads((run_dir / "meta.json").read_text())
        history = json.loads((run_dir / "eval.json").read_text()).get("history", [])
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    reached = [e["step"] for e in history if e["mean_return"] >= CARTPOLE_TARGET]
    return {"steps": int(meta["steps"]), "reached": bool(reached), "reached_at": reached[0] if reached else None,
            "best_eval": max((e["mean_return"] for e in history), default=None),
            "n_envs": config["algo"]["n_envs"], "backend": meta.get("backend"),
            "torch_threads_config": config.get("torch_threads"), "process_seconds": seconds}


def run_rlcli_train(env_id: str, seed: int, steps: int, params: Sequence[str] = ()) -> dict[str, Any]:
    """``rlcli train ENV`` as a user runs it, without periodic evaluations (one episode evaluated at the
    end), timed around the process; ``params`` are ``-p key=value`` overrides of its entry."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="bench-rlcli-") as tmp:
        run_dir = Path(tmp) / "run"
        seconds, _ = run_process([
            sys.executable, "-m", "rlcli", "train", env_id, "--eval-every", "0", "--eval-episodes", "1",
            "--seed", str(seed), "--steps", str(steps), "--run-dir", str(run_dir),
            *(arg for param in params for arg in ("-p", param))])
        meta = json.loads((run_dir / "meta.json").read_text())
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return {"steps": int(meta["steps"]), "n_envs": config["algo"]["n_envs"], "backend": meta.get("backend"),
            "torch_threads_config": config.get("torch_threads"), "process_seconds": seconds}


Unit = Literal["s", "steps/s", "transitions/s", "steps", "%"]


@dataclass(frozen=True)
class Goal:
    """rlcli / SB3 must be ``op`` ``target``."""

    op: Literal["<=", ">="]
    target: float

    def met(self, ratio: float) -> bool:
        return ratio <= self.target if self.op == "<=" else ratio >= self.target

    def __str__(self) -> str:
        return f"{'≤' if self.op == '<=' else '≥'} {self.target:.3g}x"


@dataclass
class Row:
    """One line of the summary table: the median of each side's per-repeat figures."""

    measurement: str
    unit: Unit
    rlcli: list[float]
    sb3: list[float]
    goal: Goal | None = None
    rlcli_note: str = ""
    sb3_note: str = ""

    def ratio(self) -> float | None:
        """rlcli / SB3 of the medians; None for shares (already relative) or an empty side."""
        if self.unit == "%" or not self.rlcli or not self.sb3 or statistics.median(self.sb3) == 0:
            return None
        return statistics.median(self.rlcli) / statistics.median(self.sb3)


@dataclass
class Run:
    """One measurement in one process, for the raw table and the JSON."""

    measurement: str
    side: str
    seed: int
    value: float
    unit: Unit
    threads: str
    details: str
    result: dict[str, Any]


@dataclass
class Section:
    name: str
    rows: list[Row] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    error: str | None = None


@dataclass
class Context:
    budgets: Budgets
    quick: bool
    seeds: list[int]
    log: Callable[[str], None]
    cartpole_seeds: list[int] = field(default_factory=list)  # the CartPole time-to-475 rows' seeds


def threads_text(result: dict[str, Any]) -> str:
    """Torch threads: "N", "N, update M" where rlcli updates with more, "(auto)" where rlcli chose them;
    "-" for measurements without torch (env alone)."""
    if "torch_threads" not in result and "torch_threads_config" not in result:
        return "-"
    observed, configured = result.get("torch_threads"), result.get("torch_threads_config", "-")
    if observed is None:  # the CLI run: only its config.yaml is seen, None meaning rlcli chooses
        return "auto" if configured is None else str(configured)
    text = str(observed)
    update = result.get("torch_threads_update")
    if update is not None and update != observed:
        text += f", update {update}"
    return text + (" (auto)" if configured is None else "")


def details_text(result: dict[str, Any]) -> str:
    """One cell of the raw table: what a worker's figure came from."""
    parts = []
    if "seconds" in result:
        parts.append(f"{result['steps']:,} steps in {result['seconds']:.2f} s")
        if "transitions" in result:
            parts.append(f"{result['transitions']:,} transitions")
    elif "steps" in result:
        parts.append(f"stopped at {result['steps']:,} steps")
    if "reached" in result:
        best = result.get("best_eval")
        parts.append((f"reached 475 at {result['reached_at']:,} steps" if result["reached"] else "475 not reached")
                     + (f", best eval {best:.1f}" if best is not None else ""))
    if "window" in result:
        parts.append(f"steps {result['window'][0]:,}-{result['window'][1]:,}, {result['updates']:,} gradient steps")
    parts.append(f"{result.get('backend')} x{result.get('n_envs')}")
    if result.get("precision", "fp32") != "fp32":
        parts.append(result["precision"])
    if "obs_shape" in result:
        parts.append(f"obs {tuple(result['obs_shape'])}")
    parts.append(f"process {result['process_seconds']:.1f} s")
    return "; ".join(parts)


def measure(ctx: Context, section: Section, measurement: str, side: str, seed: int, value_key: str,
            unit: Unit, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Runs one measurement, records it in the section and logs it; returns the result."""
    ctx.log(f"[{section.name}] {measurement}, {side}, seed {seed} ...")
    result = run()
    run_record = Run(measurement, side, seed, float(result[value_key]), unit, threads_text(result),
                     details_text(result), result)
    section.runs.append(run_record)
    ctx.log(f"[{section.name}]   {format_value(run_record.value, unit)}  ({run_record.details})")
    return result


def values(section: Section, measurement: str, side: str) -> list[float]:
    return [r.value for r in section.runs if r.measurement == measurement and r.side == side]


def add_steady(section: Section, side: str, seed: int, result: dict[str, Any]) -> None:
    """Records a PPO run's steady throughput: from the end of its first update to the end of its last."""
    section.runs.append(Run("steady", side, seed, result["steady_tps"], "transitions/s", threads_text(result),
                            "transitions after the first update / seconds after it", result))


def add_setup(section: Section, seed: int, result: dict[str, Any]) -> None:
    """Records an rlcli PPO run's throughput counted from the call to train()."""
    section.runs.append(Run("with setup", "rlcli", seed, result["setup_tps"], "transitions/s", threads_text(result),
                            f"transitions / seconds from the call to train(), {result['setup_seconds']:.2f} s of "
                            "them building envs and agent", result))


def steady_row(section: Section) -> Row:
    """The goal row's runs timed from the end of each side's first update, which leaves the first
    iteration out as well (a cold start of the allocator and the thread pools)."""
    return Row("the same runs, both sides timed from the end of their first update", "transitions/s",
               values(section, "steady", "rlcli"), values(section, "steady", "SB3"))


def setup_row(section: Section) -> Row:
    """The goal row's runs with rlcli's clock started at the call to train(), before it builds its envs
    and agent (envpool's import among them), while SB3's still starts once its model is built: what the
    goal row measured until both sides' construction was left out alike."""
    return Row("the same runs, rlcli also charged for building its envs and agent (SB3 not)", "transitions/s",
               values(section, "with setup", "rlcli"), values(section, "train", "SB3"))


def bf16_row(section: Section, sb3: list[float]) -> Row:
    """The section's rlcli run again with ``precision: bf16`` (SB3 unchanged, float32): an opt-in
    setting, so a row of its own beside the goal's float32 one."""
    return Row("the same, rlcli with precision bf16 (SB3 unchanged, float32)", "transitions/s",
               values(section, "train bf16", "rlcli"), sb3)


def env_rows(section: Section, env_id: str, train_key: str) -> list[Row]:
    """The env-alone throughput row and how much of it training reaches, per side."""
    envs = {side: [r for r in section.runs if r.measurement == "env" and r.side == side] for side in SIDES}
    backends = "; ".join(f"{side}: {runs[0].result['backend']} x{runs[0].result['n_envs']}"
                         for side, runs in envs.items() if runs)
    share = {side: 100 * statistics.median(values(section, train_key, side))
             / statistics.median(values(section, "env", side)) for side in SIDES}
    return [Row(f"{env_id} env alone, random actions: steps/s ({backends})", "steps/s",
                values(section, "env", "rlcli"), values(section, "env", "SB3")),
            Row(f"{env_id} training's rate as a share of its env alone's steps/s", "%", [share["rlcli"]],
                [share["SB3"]])]


def measure_env_alone(ctx: Context, section: Section, env_id: str, seed: int, rlcli_envs: int, sb3_envs: int) -> None:
    """Random-action throughput of each side's env backend, with the n_envs that side trains with."""
    for side, worker, n in (("rlcli", "env-rlcli", rlcli_envs), ("SB3", "env-sb3", sb3_envs)):
        measure(ctx, section, "env", side, seed, "sps", "steps/s",
                lambda worker=worker, n=n: run_worker(worker, seed, env=env_id, n_envs=n,
                                                      seconds=ctx.budgets.env_seconds))


def bench_cartpole(ctx: Context) -> Section:
    """CartPole-v1 PPO, each side tuned: whole-process seconds until a deterministic 10-episode
    evaluation every 2,000 env steps reaches 475; plus the env's own random-action throughput."""
    section = Section("cartpole")
    budget, every = ctx.budgets.cartpole_steps, ctx.budgets.cartpole_eval_every
    for seed in ctx.cartpole_seeds or ctx.seeds:
        ours = measure(ctx, section, "time", "rlcli", seed, "process_seconds", "s",
                       lambda seed=seed: run_rlcli_cartpole(seed, budget, every))
        theirs = measure(ctx, section, "time", "SB3", seed, "process_seconds", "s",
                         lambda seed=seed: run_worker("sb3-cartpole", seed, steps=budget, eval_every=every))
        for side, result in (("rlcli", ours), ("SB3", theirs)):
            # steps over whole-process time: the run's average throughput, for the share of the env's limit
            section.runs.append(Run("train sps", side, seed, result["steps"] / result["process_seconds"],
                                    "steps/s", threads_text(result), "steps at stop / process seconds", result))
        measure(ctx, section, "time zoo", "rlcli", seed, "process_seconds", "s",
                lambda seed=seed: run_rlcli_cartpole(seed, budget, every, RLCLI_ZOO_CARTPOLE))
        if seed in ctx.seeds:  # the env alone varies little by seed
            measure_env_alone(ctx, section, "CartPole-v1", seed, ours["n_envs"], theirs["n_envs"])

    def reached(measurement: str, side: str) -> str:
        flags = [r.result["reached"] for r in section.runs if r.measurement == measurement and r.side == side]
        return f"{sum(flags)}/{len(flags)} reached 475"

    notes = {side: reached("time", side) for side in SIDES}
    steps = {side: [float(r.result["steps"]) for r in section.runs if r.measurement == "time" and r.side == side]
             for side in SIDES}
    section.rows += [
        Row(f"CartPole-v1 PPO, each tuned: whole-process seconds until eval ≥ 475 (eval every {every:,}, "
            f"budget {budget:,} steps)", "s",
            values(section, "time", "rlcli"), values(section, "time", "SB3"), Goal("<=", 0.2),
            notes["rlcli"], notes["SB3"]),
        Row("the same, rlcli with the zoo's CartPole entry, SB3's hyperparameters (SB3 unchanged)", "s",
            values(section, "time zoo", "rlcli"), values(section, "time", "SB3"), None,
            reached("time zoo", "rlcli"), notes["SB3"]),
        Row("CartPole-v1 PPO: env steps when training stopped", "steps", steps["rlcli"], steps["SB3"]),
        Row("CartPole-v1 PPO: training steps/s (steps at stop / whole-process seconds)", "steps/s",
            values(section, "train sps", "rlcli"), values(section, "train sps", "SB3")),
        *env_rows(section, "CartPole-v1", "train sps"),
    ]
    return section


def bench_hopper_ppo(ctx: Context) -> Section:
    """Hopper-v5 PPO, each side tuned (rlcli's mujoco group, the zoo's Hopper entry): transitions/s."""
    section, budget = Section("hopper-ppo"), ctx.budgets.hopper_ppo_steps
    for seed in ctx.seeds:
        ours = measure(ctx, section, "train", "rlcli", seed, "tps", "transitions/s",
                       lambda seed=seed: run_worker("rlcli-hopper-ppo", seed, env="Hopper-v5", steps=budget,
                                                    quick=ctx.quick))
        add_setup(section, seed, ours)
        theirs = measure(ctx, section, "train", "SB3", seed, "tps", "transitions/s",
                         lambda seed=seed: run_worker("sb3-hopper-ppo", seed, env="Hopper-v5", steps=budget,
                                                      quick=ctx.quick))
        measure_env_alone(ctx, section, "Hopper-v5", seed, ours["n_envs"], theirs["n_envs"])
    section.rows += [
        Row(f"Hopper-v5 PPO, each tuned: transitions/s over {budget:,} steps", "transitions/s",
            values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 5)),
        setup_row(section),
        *env_rows(section, "Hopper-v5", "train"),
    ]
    return section


def bench_hopper_ppo_same(ctx: Context) -> Section:
    """Hopper-v5 PPO with identical hyperparameters (rlcli's mujoco group): transitions/s; rlcli also on
    its gymnasium backend, which separates the env backend's share of the gain from the engine's."""
    section, budget = Section("hopper-ppo-same"), ctx.budgets.hopper_ppo_steps
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-hopper-ppo-same"), ("SB3", "sb3-hopper-ppo-same")):
            result = measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                             lambda seed=seed, worker=worker: run_worker(worker, seed, env="Hopper-v5", steps=budget,
                                                                         quick=ctx.quick))
            add_steady(section, side, seed, result)
            if side == "rlcli":
                add_setup(section, seed, result)
        measure(ctx, section, "train gymnasium", "rlcli", seed, "tps", "transitions/s",
                lambda seed=seed: run_worker("rlcli-hopper-ppo-same", seed, env="Hopper-v5", steps=budget,
                                             backend="gymnasium", quick=ctx.quick))
        measure(ctx, section, "train bf16", "rlcli", seed, "tps", "transitions/s",
                lambda seed=seed: run_worker("rlcli-hopper-ppo-same", seed, env="Hopper-v5", steps=budget,
                                             precision="bf16", quick=ctx.quick))
    sb3 = values(section, "train", "SB3")
    section.rows += [
        Row(f"Hopper-v5 PPO, same hyperparameters: transitions/s over {budget:,} steps", "transitions/s",
            values(section, "train", "rlcli"), sb3, Goal(">=", 2)),
        steady_row(section),
        setup_row(section),
        Row("the same, rlcli with --backend gymnasium (SB3 unchanged)", "transitions/s",
            values(section, "train gymnasium", "rlcli"), sb3),
        bf16_row(section, sb3),
    ]
    return section


def bench_hopper_sac(ctx: Context) -> Section:
    """Hopper-v5 SAC with identical hyperparameters: transitions/s over the window after learning starts."""
    section, budgets = Section("hopper-sac"), ctx.budgets
    start, window = budgets.sac_learning_starts, budgets.sac_window
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-hopper-sac"), ("SB3", "sb3-hopper-sac")):
            result = measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                             lambda seed=seed, worker=worker: run_worker(worker, seed, env="Hopper-v5",
                                                                         steps=window, learning_starts=start))
            # rlcli counts learning_starts in stored transitions (an auto-reset row is none), SB3 in env
            # steps, so rlcli's first update comes a little after the mark: gradient steps/s shows the
            # update speed independently of that offset
            section.runs.append(Run("updates/s", side, seed, result["updates"] / result["seconds"], "steps/s",
                                    threads_text(result), "gradient steps in the window / its seconds", result))
        measure(ctx, section, "train bf16", "rlcli", seed, "tps", "transitions/s",
                lambda seed=seed: run_worker("rlcli-hopper-sac", seed, env="Hopper-v5", steps=window,
                                             learning_starts=start, precision="bf16"))
    section.rows += [
        Row(f"Hopper-v5 SAC, same hyperparameters: transitions/s, steps {start:,}-{start + window:,} (UTD 1)",
            "transitions/s", values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 2)),
        Row("Hopper-v5 SAC: gradient steps/s in the same window", "steps/s",
            values(section, "updates/s", "rlcli"), values(section, "updates/s", "SB3")),
        bf16_row(section, values(section, "train", "SB3")),
    ]
    return section


def bench_cartpole_dqn(ctx: Context) -> Section:
    """CartPole-v1 DQN with the same hyperparameters (rlcli's entry): transitions/s over the window after
    learning starts; and the same with 10 quantiles against sb3-contrib's QR-DQN."""
    section, budgets = Section("cartpole-dqn"), ctx.budgets
    start, window = budgets.dqn_learning_starts, budgets.dqn_window
    dqn_window(ctx, section, (("rlcli", "rlcli-cartpole-dqn"), ("SB3", "sb3-cartpole-dqn"),
                              ("rlcli QR-DQN", "rlcli-cartpole-qrdqn"), ("sb3-contrib QR-DQN", "sb3-cartpole-qrdqn")))
    section.rows += [
        Row(f"CartPole-v1 DQN, same hyperparameters: transitions/s, steps {start:,}-{start + window:,} (UTD 0.5)",
            "transitions/s", values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 3)),
        Row("CartPole-v1 QR-DQN (10 quantiles), the same window", "transitions/s",
            values(section, "train", "rlcli QR-DQN"), values(section, "train", "sb3-contrib QR-DQN"),
            sb3_note="sb3-contrib QR-DQN"),
    ]
    return section


def bench_dqn_prioritized(ctx: Context) -> Section:
    """What prioritised replay costs rlcli's DQN: the same window with it and with uniform replay."""
    section = Section("dqn-prioritized")
    dqn_window(ctx, section, (("rlcli", "rlcli-cartpole-dqn-per"), ("uniform", "rlcli-cartpole-dqn")))
    section.rows.append(
        Row("CartPole-v1 DQN, rlcli with prioritised replay against uniform replay: transitions/s in the same window "
            "(its cost at most 1.3x)", "transitions/s", values(section, "train", "rlcli"),
            values(section, "train", "uniform"), Goal(">=", 1 / 1.3), sb3_note="rlcli, uniform replay"))
    return section


def dqn_window(ctx: Context, section: Section, sides: tuple[tuple[str, str], ...]) -> None:
    """Each seed's ``train`` measurement of each (side, worker) over CartPole-v1 DQN's timed window."""
    start, window = ctx.budgets.dqn_learning_starts, ctx.budgets.dqn_window
    for seed in ctx.seeds:
        for side, worker in sides:
            measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                    lambda seed=seed, worker=worker: run_worker(worker, seed, env="CartPole-v1", steps=window,
                                                                learning_starts=start))


def bench_pong_dqn(ctx: Context) -> Section:
    """Pong DQN with the Nature CNN and the same hyperparameters (rlcli's atari entry): transitions/s over the
    window after learning starts, each side on its own Atari env (envpool; SB3's AtariWrapper on ALE)."""
    section, budgets = Section("pong-dqn"), ctx.budgets
    start, window = budgets.pong_dqn_learning_starts, budgets.pong_dqn_window
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-pong-dqn"), ("SB3", "sb3-pong-dqn")):
            measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                    lambda seed=seed, worker=worker: run_worker(worker, seed, env=RLCLI_PONG_ID, steps=window,
                                                                learning_starts=start))
    section.rows.append(
        Row(f"Pong DQN, Nature CNN, same hyperparameters: transitions/s, steps {start:,}-{start + window:,} "
            "(UTD 0.25)", "transitions/s", values(section, "train", "rlcli"), values(section, "train", "SB3"),
            Goal(">=", 3)))
    return section


def bench_hopper_td3(ctx: Context) -> Section:
    """Hopper-v5 TD3 with the same hyperparameters (CleanRL's): transitions/s over the window after learning
    starts."""
    section, budgets = Section("hopper-td3"), ctx.budgets
    start, window = budgets.td3_learning_starts, budgets.td3_window
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-hopper-td3"), ("SB3", "sb3-hopper-td3")):
            measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                    lambda seed=seed, worker=worker: run_worker(worker, seed, env="Hopper-v5", steps=window,
                                                                learning_starts=start))
    section.rows.append(
        Row(f"Hopper-v5 TD3, same hyperparameters: transitions/s, steps {start:,}-{start + window:,} (UTD 1)",
            "transitions/s", values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 1.5)))
    return section


def bench_pong(ctx: Context) -> Section:
    """Pong PPO with the Nature CNN and CleanRL's hyperparameters on both sides: transitions/s."""
    section, budget = Section("pong"), ctx.budgets.pong_steps
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-pong"), ("SB3", "sb3-pong")):
            result = measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                             lambda seed=seed, worker=worker: run_worker(worker, seed, env=RLCLI_PONG_ID,
                                                                         steps=budget, quick=ctx.quick))
            add_steady(section, side, seed, result)
            if side == "rlcli":
                add_setup(section, seed, result)
        measure(ctx, section, "train bf16", "rlcli", seed, "tps", "transitions/s",
                lambda seed=seed: run_worker("rlcli-pong", seed, env=RLCLI_PONG_ID, steps=budget, quick=ctx.quick,
                                             precision="bf16"))
    section.rows += [
        Row(f"Pong PPO, Nature CNN, same hyperparameters (CleanRL{'; --quick: 32 steps, 1 epoch' if ctx.quick else ''})"
            f": transitions/s over {budget:,} steps", "transitions/s",
            values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 2)),
        steady_row(section),
        setup_row(section),
        bf16_row(section, values(section, "train", "SB3")),
    ]
    return section


def bench_pqn_pong(ctx: Context) -> Section:
    """PQN's time to Pong 18 against rlcli PPO's: each one's steps to 18 in its recorded runs (PONG_STEPS_TO_18)
    at the env steps/s measured here, the two alternated seed by seed on the same machine."""
    section, budget = Section("pqn-pong"), ctx.budgets.pqn_pong_steps
    for seed in ctx.seeds:
        for side, worker in (("rlcli", "rlcli-pong-pqn"), ("PPO", "rlcli-pong-ppo")):
            measure(ctx, section, "train", side, seed, "sps", "steps/s",
                    lambda seed=seed, worker=worker: run_worker(worker, seed, steps=budget, quick=ctx.quick))
    to_18 = {algo: statistics.mean(steps) for algo, steps in PONG_STEPS_TO_18.items()}

    def runs(algo: str) -> str:
        missed = PONG_NOT_REACHED[algo]
        return (f"{len(PONG_STEPS_TO_18[algo])} seeds' mean of {to_18[algo]:,.0f} steps"
                f"{f', {missed} ended short of 18' if missed else ''}")

    section.rows += [
        Row(f"Pong-v5 time to 18: PQN ({PQN_PONG_PRESET}, {runs('pqn')}) against rlcli PPO (its Pong-v5 entry, "
            f"{runs('ppo')}), both bf16"
            f"{'; --quick: 16 envs, 1 epoch' if ctx.quick else ''}: the steps at env steps/s over {budget:,} steps",
            "s", [to_18["pqn"] / v for v in values(section, "train", "rlcli")],
            [to_18["ppo"] / v for v in values(section, "train", "PPO")], Goal("<=", 0.5), sb3_note="rlcli PPO"),
        Row("the same runs' env steps/s", "steps/s", values(section, "train", "rlcli"), values(section, "train", "PPO"),
            rlcli_note="PQN", sb3_note="rlcli PPO"),
    ]
    return section


def train_both_sides(ctx: Context, section: Section, name: str, env: str, steps: int, **options: Any) -> None:
    """Each seed's ``train`` measurement of the workers ``rlcli-NAME`` and ``sb3-NAME``, with its steady rate."""
    for seed in ctx.seeds:
        for side, worker in (("rlcli", f"rlcli-{name}"), ("SB3", f"sb3-{name}")):
            result = measure(ctx, section, "train", side, seed, "tps", "transitions/s",
                             lambda seed=seed, worker=worker: run_worker(worker, seed, env=env, steps=steps, **options))
            add_steady(section, side, seed, result)


def bench_masked(ctx: Context) -> Section:
    """MaskedChoice-v0 PPO with an action mask, identical hyperparameters, against sb3-contrib's
    MaskablePPO: transitions/s, and the final training return of each side's run."""
    section, budget = Section("masked"), ctx.budgets.masked_steps
    train_both_sides(ctx, section, "masked", MASKED_ID, budget)
    section.rows += [
        Row(f"{MASKED_ID} masked PPO (sb3-contrib MaskablePPO), same hyperparameters: transitions/s over "
            f"{budget:,} steps", "transitions/s", values(section, "train", "rlcli"), values(section, "train", "SB3"),
            Goal(">=", 3)),
        steady_row(section),
    ]
    return section


def bench_recurrent(ctx: Context) -> Section:
    """CartPoleNoVel-v1 PPO with an LSTM, identical hyperparameters, against sb3-contrib's RecurrentPPO:
    transitions/s (each side's own thread defaults)."""
    section, budget = Section("recurrent"), ctx.budgets.recurrent_steps
    train_both_sides(ctx, section, "recurrent", RECURRENT_ID, budget, quick=ctx.quick)
    section.rows += [
        Row(f"{RECURRENT_ID} recurrent PPO, LSTM 64 (sb3-contrib RecurrentPPO), same hyperparameters"
            f"{' (--quick: 1 epoch)' if ctx.quick else ''}: transitions/s over {budget:,} steps", "transitions/s",
            values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 5)),
        steady_row(section),
    ]
    return section


def bench_multiagent(ctx: Context) -> Section:
    """simple_spread shared-parameter PPO, identical hyperparameters, against SB3 PPO on SuperSuit's
    parameter-sharing vector env: agent transitions/s (env transitions/s x 3)."""
    section, budget = Section("multiagent"), ctx.budgets.mpe_steps
    train_both_sides(ctx, section, "mpe", MPE_ID, budget)
    section.rows += [
        Row(f"{MPE_ID} shared-parameter PPO, 3 agents (SB3 PPO on SuperSuit's parameter-sharing vector env), "
            f"same hyperparameters: agent transitions/s over {budget:,} agent steps", "transitions/s",
            values(section, "train", "rlcli"), values(section, "train", "SB3"), Goal(">=", 3)),
        steady_row(section),
    ]
    return section


def bench_hopper_rlgames(ctx: Context) -> Section:
    """Hopper-v5 PPO on envpool against rl_games 1.6.5 (an optional section: ``pip install rl-games==1.6.5``):
    whole-process seconds for the same env-step budget, rlcli with rl_games' settings and with its own
    entry, rl_games with its shipped hopper_envpool.yaml."""
    section, budget = Section("hopper-rlgames"), ctx.budgets.rlgames_steps
    for seed in ctx.seeds:
        measure(ctx, section, "time same", "rlcli", seed, "process_seconds", "s",
                lambda seed=seed: run_rlcli_train("Hopper-v5", seed, budget, RLCLI_RLGAMES_HOPPER))
        measure(ctx, section, "time", "rl_games", seed, "process_seconds", "s",
                lambda seed=seed: run_worker("rlgames-hopper", seed, env="Hopper-v5", steps=budget))
        measure(ctx, section, "time tuned", "rlcli", seed, "process_seconds", "s",
                lambda seed=seed: run_rlcli_train("Hopper-v5", seed, budget))
    theirs = values(section, "time", "rl_games")
    section.rows += [
        Row(f"Hopper-v5 PPO on envpool, rl_games' hopper_envpool.yaml settings: whole-process seconds for "
            f"{budget:,} steps", "s", values(section, "time same", "rlcli"), theirs, Goal("<=", 1 / 1.5),
            sb3_note="rl_games 1.6.5"),
        Row("the same, rlcli with its own mujoco-group entry", "s", values(section, "time tuned", "rlcli"), theirs,
            sb3_note="rl_games 1.6.5"),
    ]
    return section


def bench_go1(ctx: Context) -> Section:
    """PPO on envpool's Go1 (MuJoCo Playground's robot as a C++ task) as a share of envpool's own random-action
    rate for the same 64 envs, both on one torch thread and one envpool thread, alternated seed by seed."""
    section, budget = Section("go1"), ctx.budgets.go1_steps
    for seed in ctx.seeds:
        measure(ctx, section, "train", "rlcli", seed, "sps", "steps/s",
                lambda seed=seed: run_worker("rlcli-go1", seed, env=GO1_ID, steps=budget))
        measure(ctx, section, "env", "envpool", seed, "sps", "steps/s",
                lambda seed=seed: run_worker("env-go1", seed, env=GO1_ID, seconds=ctx.budgets.env_seconds))
    section.rows += [
        Row(f"{GO1_ID} PPO (its entry) against envpool stepping the same envs alone with random actions, one torch "
            f"and one envpool thread: env steps/s over {budget:,} steps", "steps/s", values(section, "train", "rlcli"),
            values(section, "env", "envpool"), Goal(">=", 0.6), sb3_note="envpool alone"),
    ]
    return section


SECTIONS: dict[str, Callable[[Context], Section]] = {
    "cartpole": bench_cartpole,
    "hopper-ppo": bench_hopper_ppo,
    "hopper-ppo-same": bench_hopper_ppo_same,
    "hopper-sac": bench_hopper_sac,
    "cartpole-dqn": bench_cartpole_dqn,
    "dqn-prioritized": bench_dqn_prioritized,
    "pong-dqn": bench_pong_dqn,
    "hopper-td3": bench_hopper_td3,
    "pong": bench_pong,
    "pqn-pong": bench_pqn_pong,
    "masked": bench_masked,
    "recurrent": bench_recurrent,
    "multiagent": bench_multiagent,
    "go1": bench_go1,
    "hopper-rlgames": bench_hopper_rlgames,
}
OPTIONAL_SECTIONS = ("hopper-rlgames",)  # its peer is no dependency of the [peers] extra: run with --only


# ---------------------------------------------------------------------------------------------------
# Report


def format_value(value: float, unit: Unit) -> str:
    if unit == "s":
        return f"{value:,.1f} s"
    if unit == "%":
        return f"{value:.1f}%"
    return f"{value:,.0f}"


def machine() -> dict[str, Any]:
    """What the figures depend on: CPU, cores, load when the run started, library versions."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("rlcli", "torch", "stable-baselines3", "rl-games", "envpool", "gymnasium", "mujoco",
                    "ale-py"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "load_average_1min": load, "versions": versions}


def render(sections: list[Section], info: dict[str, Any], repeats: int, quick: bool,
           cartpole_repeats: int | None = None) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    load = info["load_average_1min"]
    lines = [
        f"## rlcli vs its peers{' (--quick: smoke run, figures meaningless)' if quick else ''}",
        "",
        f"{info['cpu']}, {info['cores']} cores; Python {info['python']}; {versions}.",
        f"Median of {repeats} repeat(s)"
        + (f" (CartPole's time to 475: {cartpole_repeats} seeds)" if cartpole_repeats not in (None, repeats) else "")
        + ", each in a fresh process; ratio = rlcli / peer (SB3 unless the cell names another)."
        + (f" Load average when the run started: {load:.2f}." if load is not None else ""),
        "",
        "| measurement | rlcli | peer | ratio | goal | met? |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for section in sections:
        if section.error is not None:
            first = section.error.splitlines()[0]
            lines.append(f"| {section.name}: failed ({first}) | | | | | |")
            continue
        for row in section.rows:
            cells = []
            for figures, note in ((row.rlcli, row.rlcli_note), (row.sb3, row.sb3_note)):
                text = format_value(statistics.median(figures), row.unit) if figures else "-"
                cells.append(f"{text} ({note})" if note else text)
            ratio = row.ratio()
            goal = str(row.goal) if row.goal else "—"
            met = "—" if row.goal is None or ratio is None else ("yes" if row.goal.met(ratio) else "no")
            ratio_text = "—" if ratio is None else f"{ratio:.2f}x"
            lines.append(f"| {row.measurement} | {cells[0]} | {cells[1]} | {ratio_text} | {goal} | {met} |")
    lines += ["", "### Raw figures", "",
              "| section | measurement | side | seed | value | torch threads | details |",
              "| --- | --- | --- | ---: | ---: | --- | --- |"]
    for section in sections:
        for run in section.runs:
            lines.append(f"| {section.name} | {run.measurement} | {run.side} | {run.seed} | "
                         f"{format_value(run.value, run.unit)} | {run.threads} | {run.details} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="seeds per measurement; figures are medians")
    parser.add_argument("--cartpole-repeats", type=int, default=10,
                        help="seeds for CartPole's time to 475, which varies 3-fold from seed to seed "
                             "(its env-alone rows keep --repeats); --quick uses --repeats")
    parser.add_argument("--only", default=",".join(name for name in SECTIONS if name not in OPTIONAL_SECTIONS),
                        help=f"comma-separated sections: {', '.join(SECTIONS)} (by default all but "
                             f"{', '.join(OPTIONAL_SECTIONS)})")
    parser.add_argument("--quick", action="store_true", help="tiny budgets: a smoke run whose figures mean nothing")
    parser.add_argument("--json", type=Path, help="write every raw result here")
    parser.add_argument("--markdown", type=Path, help="write the tables here too")
    worker = parser.add_argument_group("worker mode (used by the script itself)")
    worker.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    worker.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    worker.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    worker.add_argument("--learning-starts", type=int, default=0, help=argparse.SUPPRESS)
    worker.add_argument("--backend", default="auto", help=argparse.SUPPRESS)
    worker.add_argument("--env", default="", help=argparse.SUPPRESS)
    worker.add_argument("--n-envs", type=int, default=0, help=argparse.SUPPRESS)
    worker.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    worker.add_argument("--eval-every", type=int, default=0, help=argparse.SUPPRESS)
    worker.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    opts.sections = [name.strip() for name in opts.only.split(",") if name.strip()]
    unknown = [name for name in opts.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if opts.repeats < 1 or opts.cartpole_repeats < 1:
        parser.error("--repeats and --cartpole-repeats must be at least 1")
    return opts


def run_section(ctx: Context, name: str) -> Section:
    try:
        return SECTIONS[name](ctx)
    except (WorkerError, KeyError, ValueError, OSError) as e:
        # one failing section (a missing extra, a changed API) should not cost the others' figures
        ctx.log(f"[{name}] failed: {e}")
        return Section(name, error=str(e))


def run_sections(ctx: Context, names: Sequence[str], lanes: int) -> list[Section]:
    """The sections, in the order named. With ``lanes`` above 1 (a smoke run's figures mean nothing)
    that many sections run at once, each lane on a core of its own: a process inherits the CPU affinity
    of the thread that starts it, so every worker of a lane sees one core and takes one torch thread
    (two OpenMP threads per process on two shared cores would spin against each other)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    lanes = min(lanes, len(cores), len(names))
    if lanes < 2:
        return [run_section(ctx, name) for name in names]
    lane_numbers = itertools.count()

    def pin_lane() -> None:  # in each lane's thread, once
        os.sched_setaffinity(0, {cores[next(lane_numbers) % len(cores)]})

    with ThreadPoolExecutor(lanes, initializer=pin_lane) as pool:
        return list(pool.map(lambda name: run_section(ctx, name), names))


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.worker:
        return worker_main(opts)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    budgets = Budgets().quick() if opts.quick else Budgets()
    cartpole_repeats = opts.repeats if opts.quick else opts.cartpole_repeats
    ctx = Context(budgets, opts.quick, list(range(opts.repeats)), log, list(range(cartpole_repeats)))
    info = machine()
    sections = run_sections(ctx, opts.sections, lanes=2 if opts.quick else 1)
    report = render(sections, info, opts.repeats, opts.quick,
                    cartpole_repeats if "cartpole" in opts.sections else None)
    print(report)
    if opts.markdown:
        opts.markdown.write_text(report)
    if opts.json:
        opts.json.write_text(json.dumps({
            "machine": info, "repeats": opts.repeats, "cartpole_repeats": cartpole_repeats, "quick": opts.quick,
            "budgets": asdict(budgets),
            "sections": [asdict(s) for s in sections]}, indent=2) + "\n")
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
