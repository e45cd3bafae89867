"""Stable-Baselines3's SAC, TD3 or DQN (sb3-contrib's QR-DQN where rlcli's DQN has ``quantiles``) trained with
rlcli's settings for an env, written as an rlcli benchmark directory, so that ``rlcli benchmark report`` and
``rlcli benchmark compare`` read it like rlcli's own.

    python scripts/sb3_runs.py Hopper-v5 --seeds 0 1 2 --steps 300000 --eval-every 25000 \\
        --out benchmarks/sb3-sac-hopper-300k
    rlcli benchmark compare benchmarks/sac-hopper-300k benchmarks/sb3-sac-hopper-300k
    python scripts/sb3_runs.py --side-by-side benchmarks/sac-hopper-300k benchmarks/sb3-sac-hopper-300k
    python scripts/sb3_runs.py Hopper-v5 --algo td3 --seeds 1 --steps 300000 --out benchmarks/sb3-td3-hopper-300k
    python scripts/sb3_runs.py CartPole-v1 --algo dqn -p quantiles=10 -p double_q=false --seeds 1 2 3 \
        --eval-every 10000 --out benchmarks/sb3-qrdqn-cartpole

Settings: ``rlcli.algos.resolve(ALGO, ENV, ...)`` (hyperparams/ALGO.yml, then ``-p`` overrides), translated
by ``sb3_kwargs``, which refuses anything SB3 cannot express; so the two sides cannot drift apart.
What neither side's settings name differs by construction (SAC: rlcli's log-std range and exact squash
correction, SB3's clamp and 1e-6; see tests/algos/test_sac_vs_sb3.py).

Training: SB3's own loop on its ``make_vec_env`` (gymnasium, DummyVecEnv, env i seeded ``seed + i``), one
torch thread (``--threads``). Evaluation: rlcli's own code and env, the one ``rlcli train`` evaluates on
(``rlcli.training.evaluation.evaluate`` on ``min(PERIODIC_EVAL_ENVS, episodes)`` envs of the run's backend,
envpool for MuJoCo, seeded ``seed + 1_000_003``), the deterministic policy (tanh of the mean; DQN's greedy one), every
``--eval-every`` env steps after that step's gradient step, and at the end.

Files: ``OUT/sb3_runs/ENV__ALGO__sSEED.json`` per finished seed (its row, every evaluation's returns, both
sides' settings), then ``OUT/results.json`` and ``results.csv`` from all of them. A finished seed with the
same settings is skipped when the command is run again; one with other settings is refused.

Resuming: after each evaluation a seed saves SB3's own files (``model.zip``, ``replay_buffer.pkl``) and its
evaluations so far under ``OUT/sb3_runs/partial/ENV__ALGO__sSEED/``; running the command again after a stop
continues from there, with the replay buffer, the optimisers and the temperature, on new episodes (SB3 saves
no env state or generator: both are seeded from the step), so a resumed seed is not the bits of an
uninterrupted one. The record says where it resumed. rlcli's side resumes the same way with
``rlcli benchmark ... --save-buffer``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import platform
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcli.algos import resolve
from rlcli.algos.dqn import DQNConfig
from rlcli.algos.offpolicy import ActorCriticReplayConfig, ReplayConfig
from rlcli.algos.sac import SACConfig
from rlcli.algos.td3 import TD3Config
from rlcli.benchmark.report import _finished, _table, compare, mean_curve, plot_curves
from rlcli.benchmark.results import RunResult, load_results, write_results
from rlcli.config import RunConfig, parse_overrides
from rlcli.envs.base import mujoco_warnings_to_python
from rlcli.envs.registry import gymnasium_name, resolve_backend
from rlcli.errors import UsageError
from rlcli.runs import checkpoint
from rlcli.training.evaluation import EvalResult, evaluate

RUNS = "sb3_runs"
PARTIAL = "partial"
EVAL_SEED_OFFSET = 1_000_003  # rlcli.training.train.set_up seeds its periodic evaluation env with cfg.seed + this
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


ALGOS = ("sac", "td3", "dqn")


def run_config(algo: str, env_id: str, seed: int, steps: int | None, eval_every: int, eval_episodes: int,
               backend: str, params: list[str], threads: int) -> RunConfig:
    """The RunConfig ``rlcli train ENV --algo ALGO`` would run with these options."""
    overrides = parse_overrides(params)
    if steps is not None:
        overrides["steps"] = steps
    return resolve(algo, env_id, backend=backend, overrides=overrides, eval_every=eval_every,
                   eval_episodes=eval_episodes, seed=seed, device="cpu", torch_threads=threads, env_threads=1)


def gradient_schedule(cfg: ReplayConfig) -> tuple[int, int]:
    """SB3's (train_freq in vector steps, gradient_steps) for rlcli's ``utd_ratio`` gradient steps per
    transition."""
    per_vector_step = cfg.utd_ratio * cfg.n_envs
    if per_vector_step >= 1 and per_vector_step == int(per_vector_step):
        return 1, int(per_vector_step)
    if cfg.n_envs == 1 and (1 / cfg.utd_ratio) == int(1 / cfg.utd_ratio):
        return int(1 / cfg.utd_ratio), 1
    raise UsageError(f"utd_ratio={cfg.utd_ratio} with n_envs={cfg.n_envs} is no whole number of SB3 gradient "
                     "steps per vector step (nor one every whole number of steps); choose e.g. utd_ratio=1")


def refuse(cfg: ReplayConfig, refused: dict[str, tuple[bool, str]]) -> None:
    """A UsageError naming the first setting of ``refused`` that is set (name: (set, what SB3 needs))."""
    refused = {
        "normalize_obs": (cfg.normalize_obs, "SB3 would need VecNormalize, whose statistics differ: use false"),
        "precision": (cfg.precision != "fp32", "SB3 trains in float32: use fp32"),
        "n_step": (cfg.n_step != 1, "this script runs SB3's one-step replay: use 1"),
        "prioritized": (cfg.prioritized, "SB3 has no prioritised replay: use false"),
        **refused,
    }
    for name, (bad, why) in refused.items():
        if bad:
            raise UsageError(f"{name}={getattr(cfg, name)} cannot be run on SB3 ({why})")


def one_learning_rate(cfg: ActorCriticReplayConfig, *extra: str) -> float:
    """SB3's one learning rate for the actor and critics (and ``extra`` rates), refusing rates that differ."""
    names = ("actor_lr", "critic_lr", *extra)
    rates = {getattr(cfg, name) for name in names}
    if len(rates) != 1:
        given = ", ".join(f"{name}={getattr(cfg, name)}" for name in names)
        raise UsageError(f"SB3's {cfg.algo.upper()} has one learning rate; this entry has {given}: override them to "
                         "one value with -p")
    return rates.pop()


def replay_kwargs(cfg: ActorCriticReplayConfig) -> dict[str, Any]:
    """What SB3's off-policy algorithms share: the replay, its schedule, the targets and the networks."""
    train_freq, gradient_steps = gradient_schedule(cfg)
    return dict(buffer_size=cfg.buffer_size, learning_starts=cfg.learning_starts, batch_size=cfg.batch_size,
                tau=cfg.target_update_rate, gamma=cfg.gamma, train_freq=train_freq, gradient_steps=gradient_steps,
                policy_kwargs=dict(net_arch=dict(pi=list(cfg.actor_hidden), qf=list(cfg.critic_hidden)),
                                   activation_fn=ACTIVATIONS[cfg.activation]))


def sb3_sac_kwargs(cfg: SACConfig) -> dict[str, Any]:
    """Keyword arguments of ``stable_baselines3.SAC`` equal to rlcli's ``cfg``; a UsageError naming the
    setting for what SB3 cannot express. ``log_every`` and ``compile`` change no arithmetic and are left."""
    learning_rate = one_learning_rate(cfg, "alpha_lr")
    refuse(cfg, {
        "policy_delay": (cfg.policy_delay != 1, "SB3's SAC updates the actor at every gradient step: use 1"),
        # SB3 tests ``gradient_step % target_update_interval`` with the index inside one train() call,
        # which is always 0 when it makes one gradient step per env step
        "target_update_every": (cfg.target_update_every != 1, "SB3 counts it within each train() call: use 1"),
    })
    return dict(learning_rate=learning_rate, **replay_kwargs(cfg), target_update_interval=cfg.target_update_every,
                ent_coef=f"auto_{cfg.alpha}" if cfg.autotune_alpha else cfg.alpha,
                target_entropy="auto" if cfg.target_entropy is None else cfg.target_entropy)


def sb3_td3_kwargs(cfg: TD3Config) -> dict[str, Any]:
    """Keyword arguments of ``stable_baselines3.TD3`` equal to rlcli's ``cfg`` (``action_noise_std`` stands
    for SB3's NormalActionNoise of that std, which ``make_model`` builds); a UsageError naming the setting
    for what SB3 cannot express. Both sides add the exploration and target noise to actions scaled to
    [-1, 1], and both count the policy delay over every gradient step of the run."""
    learning_rate = one_learning_rate(cfg)
    refuse(cfg, {})
    kwargs = dict(learning_rate=learning_rate, **replay_kwargs(cfg), policy_delay=cfg.policy_delay,
                  target_policy_noise=cfg.target_noise, target_noise_clip=cfg.target_noise_clip,
                  action_noise_std=cfg.exploration_noise)
    kwargs["policy_kwargs"]["n_critics"] = 2 if cfg.twin_critics else 1
    return kwargs


def sb3_dqn_kwargs(cfg: DQNConfig) -> dict[str, Any]:
    """Keyword arguments of ``stable_baselines3.DQN``, or with ``quantiles`` of ``sb3_contrib.QRDQN`` (its
    ``n_quantiles``), equal to rlcli's ``cfg``; a UsageError naming the setting for what they cannot express.
    rlcli counts ``target_update_every`` in gradient steps, SB3 its ``target_update_interval`` in env steps."""
    refuse(cfg, {
        "double_q": (cfg.double_q, "SB3's DQN and QR-DQN bootstrap from the target network's own choice: use false"),
        "dueling": (cfg.dueling, "SB3 has no dueling heads: use false"),
        "atoms": (cfg.atoms != 1, "SB3 has no C51: use 1"),
        "noisy": (cfg.noisy, "SB3 has no noisy layers: use false"),
        "loss": (cfg.loss != "huber" and cfg.quantiles == 1, "SB3's DQN takes the Huber loss: use huber"),
        "hidden": (cfg.trunk == "cnn" and len(cfg.hidden) != 1, "SB3's Nature CNN has one dense layer: use [512]"),
    })
    train_freq, gradient_steps = gradient_schedule(cfg)
    interval = cfg.target_update_every / cfg.utd_ratio
    if interval != int(interval):
        raise UsageError(f"target_update_every={cfg.target_update_every} gradient steps at utd_ratio={cfg.utd_ratio} "
                         "is no whole number of SB3's env steps: choose a multiple of 1 / utd_ratio")
    # QRDQN replaces optimizer_kwargs with the paper's eps of 0.01 / batch_size unless optimizer_class is given
    policy_kwargs: dict[str, Any] = dict(optimizer_class=torch.optim.Adam, optimizer_kwargs=dict(eps=cfg.adam_eps))
    if cfg.trunk == "cnn":  # the CnnPolicy's NatureCNN, whose dense layer is the whole trunk, ReLU throughout
        policy_kwargs.update(net_arch=[], features_extractor_kwargs=dict(features_dim=cfg.hidden[0]))
    else:
        policy_kwargs.update(net_arch=list(cfg.hidden), activation_fn=ACTIVATIONS[cfg.activation])
    if cfg.quantiles > 1:
        policy_kwargs["n_quantiles"] = cfg.quantiles
    return dict(learning_rate=cfg.learning_rate, buffer_size=cfg.buffer_size, learning_starts=cfg.learning_starts,
                batch_size=cfg.batch_size, tau=cfg.target_update_rate, gamma=cfg.gamma, train_freq=train_freq,
                gradient_steps=gradient_steps, target_update_interval=int(interval),
                exploration_fraction=cfg.exploration_fraction, exploration_initial_eps=cfg.epsilon_start,
                exploration_final_eps=cfg.epsilon_end,
                max_grad_norm=math.inf if cfg.max_grad_norm is None else cfg.max_grad_norm, policy_kwargs=policy_kwargs)


def cnn_trunk(cfg: RunConfig) -> bool:
    """Whether the run's Q network reads frames through the Nature CNN (DQN's ``trunk``)."""
    return getattr(cfg.algo, "trunk", "mlp") == "cnn"


def check_vector_observations(cfg: RunConfig) -> None:
    """A UsageError for a CNN trunk: this script's SB3 side steps gymnasium's env as it is, without the frame
    preprocessing of rlcli's Atari envs (bench_peers.py's Pong rows build SB3's own)."""
    if cnn_trunk(cfg):
        raise UsageError("trunk=cnn cannot be run by this script (its SB3 side steps gymnasium's env without "
                         "rlcli's frame preprocessing): use an env with vector observations")


def sb3_kwargs(cfg: ReplayConfig) -> dict[str, Any]:
    """SB3's keyword arguments for rlcli's ``cfg`` of any of the algorithms."""
    if isinstance(cfg, SACConfig):
        return sb3_sac_kwargs(cfg)
    if isinstance(cfg, TD3Config):
        return sb3_td3_kwargs(cfg)
    if isinstance(cfg, DQNConfig):
        return sb3_dqn_kwargs(cfg)
    raise UsageError(f"this script runs SB3's {', '.join(a.upper() for a in ALGOS)}, not {cfg.algo}")


def make_model(cfg: RunConfig, kwargs: dict[str, Any], env: Any, found: Path | None = None,
               device: str = "cpu") -> Any:
    """SB3's model for ``cfg`` (``sb3_kwargs``' ``kwargs``): new, or loaded from the save folder ``found``; a CNN
    trunk's DQN is a CnnPolicy."""
    import numpy as np
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = copy.deepcopy(kwargs)  # SB3 adds its own keys to the policy_kwargs it is given
    if "action_noise_std" in kwargs:
        size = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(size), np.full(size, kwargs.pop("action_noise_std")))
    model_class: Any = {"sac": SAC, "td3": TD3, "dqn": DQN}[cfg.algo.algo]
    if "n_quantiles" in kwargs["policy_kwargs"]:
        from sb3_contrib import QRDQN

        model_class = QRDQN
    if found is not None:
        extra = {"action_noise": kwargs["action_noise"]} if "action_noise" in kwargs else {}
        model = model_class.load(found / "model.zip", env=env, device=device, **extra)
    else:
        policy = "CnnPolicy" if cnn_trunk(cfg) else "MlpPolicy"
        model = model_class(policy, env, seed=cfg.seed, device=device, **kwargs)
    # no outputs: this script logs its own progress, and SB3's default logger makes a folder in /tmp
    model.set_logger(Logger(None, []))
    return model


def described(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` as JSON values (the activation and optimiser classes by name)."""
    policy = {key: value.__name__ if isinstance(value, type) else value
              for key, value in kwargs["policy_kwargs"].items()}
    return dict(kwargs, policy_kwargs=policy)


class SB3Policy(nn.Module):
    """Raw observations -> env actions through SB3's ``predict`` (tanh of the mean, scaled to the bounds,
    when deterministic), for rlcli's ``evaluate``."""

    def __init__(self, model: Any, deterministic: bool) -> None:
        super().__init__()
        self.model, self.deterministic = model, deterministic

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        actions, _ = self.model.predict(obs.cpu().numpy(), deterministic=self.deterministic)
        return torch.as_tensor(actions)


class SB3Agent:
    """What ``rlcli.training.evaluation.evaluate`` reads of an agent: its device and its policy."""

    device = torch.device("cpu")

    def __init__(self, model: Any) -> None:
        self.model = model

    def policy(self, deterministic: bool = True) -> nn.Module:
        return SB3Policy(self.model, deterministic)


def evaluation_env(cfg: RunConfig) -> Any:
    """The env ``rlcli train`` evaluates this run on: its backend, its number of envs, its seed."""
    from rlcli.training.agents import make_env
    from rlcli.training.train import PERIODIC_EVAL_ENVS

    return make_env(cfg, min(PERIODIC_EVAL_ENVS, cfg.eval.episodes), cfg.seed + EVAL_SEED_OFFSET)


class Progress:
    """A seed's evaluations so far, its seconds of training before this process, and where it resumed."""

    def __init__(self, evaluations: list[tuple[int, EvalResult, float]] | None = None, seconds: float = 0.0,
                 resumes: list[int] | None = None) -> None:
        self.evaluations = evaluations or []
        self.seconds, self.resumes = seconds, resumes or []
        self.started = time.perf_counter()

    @property
    def wall(self) -> float:
        return self.seconds + time.perf_counter() - self.started

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.wall, "resumes": self.resumes,
                "evaluations": [{"step": step, "seconds": sec, **r.as_dict()} for step, r, sec in self.evaluations]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        evaluations = [(e["step"], EvalResult(returns=e["returns"], lengths=e["lengths"]), e["seconds"])
                       for e in data["evaluations"]]
        return cls(evaluations, data["seconds"], data["resumes"])


def partial_dir(out: Path, cfg: RunConfig) -> Path:
    return out / RUNS / PARTIAL / record_path(out, cfg).stem


def save_folders(path: Path) -> tuple[Path, Path, Path]:
    """A seed's save, the one being written, and the one it replaces during the swap."""
    return path, path.with_name(path.name + ".saving"), path.with_name(path.name + ".old")


def saved_partial(path: Path) -> Path | None:
    """The folder of the last whole save of a seed: ``path``, or where a stop between the swap's two renames
    left it (``progress.json`` is written last, so a staging folder that holds it is whole)."""
    for candidate in save_folders(path):
        if (candidate / "progress.json").is_file():
            return candidate
    return None


def remove_partial(out: Path, cfg: RunConfig) -> None:
    """A finished seed's saves, and the folder of saves once no seed has one."""
    path = partial_dir(out, cfg)
    for folder in save_folders(path):
        shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def save_partial(path: Path, model: Any, progress: Progress, cfg: RunConfig, kwargs: dict[str, Any]) -> None:
    """SB3's model and replay buffer and the seed's progress, swapped in whole (``saved_partial`` finds the
    last whole save after a stop at any point). Its seconds are not the run's: they come off its wall time."""
    started = time.perf_counter()
    _, staging, old = save_folders(path)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save(staging / "model.zip")
    model.save_replay_buffer(staging / "replay_buffer.pkl")
    progress.seconds -= time.perf_counter() - started  # before the progress saved with it reads its wall time
    checkpoint.write_json(staging / "progress.json", {"settings": settings(cfg, kwargs), "steps": model.num_timesteps,
                                                      **progress.as_dict()})
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    staging.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def make_evaluator(cfg: RunConfig, model: Any, log: Any, progress: Progress, save: Any) -> Any:
    """An SB3 callback evaluating at every multiple of ``cfg.eval.every`` env steps, after that step's
    gradient steps (at the start of the next rollout), as rlcli evaluates after its iteration's updates,
    then calling ``save()``; ``progress.evaluations`` holds (step, EvalResult, seconds)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Evaluator(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.env, self.agent = evaluation_env(cfg), SB3Agent(model)
            self.last = progress.evaluations[-1][0] if progress.evaluations else 0

        def evaluate_now(self) -> None:
            started = time.perf_counter()
            result = evaluate(self.agent, self.env, cfg.eval.episodes, cfg.eval.deterministic)
            step = self.model.num_timesteps
            progress.evaluations.append((step, result, time.perf_counter() - started))
            self.last = step
            log(f"seed {cfg.seed}: step {step:,} eval {result.mean:.1f} ± {result.std:.1f}")
            if step < cfg.algo.steps:
                save()

        def _on_rollout_start(self) -> None:
            every = cfg.eval.every
            if every and self.model.num_timesteps // every > self.last // every:
                self.evaluate_now()

        def _on_step(self) -> bool:
            return True

    return Evaluator()


def train_seed(cfg: RunConfig, log: Any, out: Path) -> dict[str, Any]:
    """One SB3 run to ``cfg.algo.steps`` env steps, from its partial state under ``out`` where there is one;
    returns the seed's record (row, evaluations, settings)."""
    from stable_baselines3.common.env_util import make_vec_env

    algo: ReplayConfig = cfg.algo  # type: ignore[assignment]
    kwargs = sb3_kwargs(algo)
    torch.set_num_threads(cfg.torch_threads or 1)
    partial = partial_dir(out, cfg)
    found = saved_partial(partial)
    saved = json.loads((found / "progress.json").read_text()) if found is not None else None
    if saved is not None and saved["settings"] != settings(cfg, kwargs):
        raise UsageError(f"{found} ran with other settings; use another --out or delete it")
    # a resumed seed's envs and generators start from its step, so its new episodes are not its first ones
    seed = cfg.seed + (saved["steps"] if saved is not None else 0)
    env = make_vec_env(gymnasium_name(cfg.env.id), n_envs=algo.n_envs, seed=seed,
                       env_kwargs=dict(cfg.env.kwargs) or None)
    if saved is not None:
        model = make_model(cfg, kwargs, env, found)
        model.load_replay_buffer(found / "replay_buffer.pkl")
        model.set_random_seed(seed)
        progress = Progress.from_dict(saved)
        progress.resumes.append(model.num_timesteps)
        log(f"seed {cfg.seed}: resuming at step {model.num_timesteps:,} (new episodes)")
    else:
        model, progress = make_model(cfg, kwargs, env, None), Progress()
    evaluator = make_evaluator(cfg, model, log, progress, lambda: save_partial(partial, model, progress, cfg, kwargs))
    progress.started = time.perf_counter()
    model.learn(total_timesteps=algo.steps - model.num_timesteps, callback=evaluator,
                reset_num_timesteps=not progress.resumes)
    if evaluator.last != model.num_timesteps:
        evaluator.evaluate_now()
    evaluator.env.close()
    env.close()
    return record_of(cfg, model.num_timesteps, progress, kwargs)


def record_of(cfg: RunConfig, steps: int, progress: Progress, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A finished seed's row in rlcli's results format, its evaluations, where it resumed and both sides'
    settings. The wall time counts training and evaluations, as rlcli's does."""
    evaluations, wall = progress.evaluations, progress.wall
    final = evaluations[-1][1]
    row = RunResult(algo=cfg.algo.algo, env_id=cfg.env.id, seed=cfg.seed, budget=cfg.algo.steps, status="finished",
                    steps=steps, final_return=final.mean, final_std=final.std,
                    best_return=max(r.mean for _, r, _ in evaluations), wall_time_s=wall, sps=steps / wall,
                    backend=f"SB3 gymnasium (eval: rlcli {resolve_backend(cfg.env.id, cfg.env.backend)})",
                    versions=versions(), git_commit=checkpoint.git_commit(),
                    curve=tuple((step, r.mean) for step, r, _ in evaluations))
    return {"row": row.model_dump(mode="json"), "settings": settings(cfg, kwargs), "resumes": progress.resumes,
            "evaluations": progress.as_dict()["evaluations"]}


def settings(cfg: RunConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What makes two records of a seed comparable: the rlcli settings and SB3's arguments from them (not
    ``flush_denormal``, which SB3's training never reads)."""
    rlcli = cfg.model_dump(mode="json")
    rlcli["algo"].pop("flush_denormal", None)
    return {"rlcli": rlcli, "sb3": described(kwargs)}


def versions() -> dict[str, str]:
    out = dict(checkpoint.environment_versions())
    out["stable_baselines3"] = metadata.version("stable_baselines3")
    out["python"] = platform.python_version()
    return out


def record_path(out: Path, cfg: RunConfig) -> Path:
    return out / RUNS / f"{cfg.env.id}__{cfg.algo.algo}__s{cfg.seed}.json"


def finished_record(out: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """The saved record of this seed when it ran with these settings; None when there is none; a
    UsageError when one ran with others."""
    path = record_path(out, cfg)
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    if saved["settings"] != settings(cfg, sb3_kwargs(cfg.algo)):  # type: ignore[arg-type]
        raise UsageError(f"{path} ran with other settings; use another --out or delete it")
    return saved


def write_table(out: Path) -> list[RunResult]:
    """``results.json`` and ``results.csv`` from every finished seed under ``out``."""
    rows = [RunResult.model_validate(json.loads(p.read_text())["row"]) for p in sorted((out / RUNS).glob("*.json"))]
    rows.sort(key=lambda r: (r.env_id, r.seed))
    write_results(out, rows)
    return rows


def run(configs: list[RunConfig], out: Path, log: Any) -> list[RunResult]:
    """Trains each seed not yet finished with these settings; returns the table of all finished seeds."""
    (out / RUNS).mkdir(parents=True, exist_ok=True)
    for cfg in configs:
        if finished_record(out, cfg) is not None:
            log(f"seed {cfg.seed}: finished before, skipped")
            remove_partial(out, cfg)  # where a stop came between its record and this
            continue
        record = train_seed(cfg, log, out)
        checkpoint.write_json(record_path(out, cfg), record)
        remove_partial(out, cfg)
        write_table(out)
    return write_table(out)


def curve_rows(rows_a: list[RunResult], rows_b: list[RunResult], env_id: str) -> list[list[str]]:
    """Mean ± std across seeds at each evaluation step of either side."""
    table: dict[int, list[str]] = {}
    for i, rows in enumerate((rows_a, rows_b)):
        steps, mean, std = mean_curve([r.curve for r in rows if r.env_id == env_id])
        for step, m, s in zip(steps, mean, std, strict=True):
            table.setdefault(int(step), ["", ""])[i] = f"{m:,.1f} ± {s:,.1f}"
    return [[f"{step:,}", *cells] for step, cells in sorted(table.items())]


def side_by_side(dir_a: Path, dir_b: Path, out: Path) -> Path:
    """``out/side_by_side.md``: rlcli's compare of A with B, then per env both mean curves as a table and,
    with matplotlib, a figure (``out/figures/``). Finished runs only, as the compare counts them: a seed
    still training would pull the curves' means apart from the final returns above them."""
    rows_a, rows_b = _finished(load_results(dir_a)), _finished(load_results(dir_b))
    lines = [compare(rows_a, rows_b, str(dir_a), str(dir_b)), "", "## Curves", ""]
    for env_id in sorted({r.env_id for r in rows_a} & {r.env_id for r in rows_b}):
        lines += [f"### {env_id}", "", *_table(["env steps", f"A: {dir_a}", f"B: {dir_b}"],
                                                curve_rows(rows_a, rows_b, env_id)), ""]
        labelled = [r.model_copy(update={"algo": f"{label} {r.algo}"})
                    for label, rows in ((f"A {dir_a.name}:", rows_a), (f"B {dir_b.name}:", rows_b)) for r in rows]
        figure = out / "figures" / f"side_by_side_{env_id}.png"
        figure.parent.mkdir(parents=True, exist_ok=True)
        if plot_curves(labelled, env_id, figure):
            lines += [f"![{env_id}](figures/{figure.name})", ""]
    path = out / "side_by_side.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", nargs="?", help="env id with an rlcli entry for the algorithm, e.g. Hopper-v5")
    parser.add_argument("--algo", choices=ALGOS, default="sac", help="the algorithm both sides run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, help="env steps per run [default: the entry's budget]")
    parser.add_argument("--eval-every", type=int, default=25_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--backend", default="auto", help="backend of the evaluation env, as rlcli's --backend")
    parser.add_argument("-p", "--param", action="append", default=[], help="rlcli override key=value")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, help="benchmark directory to write")
    parser.add_argument("--side-by-side", nargs=2, type=Path, metavar=("RLCLI_DIR", "SB3_DIR"),
                        help="write side_by_side.md (compare and both curves) into --out [default: SB3_DIR]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mujoco_warnings_to_python()  # SB3 makes its envs through gym.make, not rlcli's backend
    try:
        if args.side_by_side:
            a, b = args.side_by_side
            print(f"wrote {side_by_side(a, b, args.out or b)}")
            return 0
        if args.env is None or args.out is None:
            raise UsageError("name an env and --out DIR (or --side-by-side RLCLI_DIR SB3_DIR)")
        configs = [run_config(args.algo, args.env, seed, args.steps, args.eval_every, args.eval_episodes, args.backend,
                              args.param, args.threads) for seed in args.seeds]
        for cfg in configs:
            check_vector_observations(cfg)
            sb3_kwargs(cfg.algo)  # type: ignore[arg-type]  # refuse before any run starts
        rows = run(configs, args.out, lambda text: print(text, flush=True))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(rows, args.out))
    return 0


def summary(rows: list[RunResult], out: Path) -> str:
    """The closing line: the finished runs of a benchmark directory and their final returns."""
    return f"{len(rows)} runs in {out}: " + ", ".join(f"{r.env_id} s{r.seed} {r.final_return:.1f}" for r in rows)


if __name__ == "__main__":
    sys.exit(main())
