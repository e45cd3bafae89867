"""Who a turn-based game's learner plays while it trains: its snapshot pool, or one fixed opponent."""

from __future__ import annotations

from typing import Any

import torch

from rlcli.algos.base import Agent
from rlcli.config import RunConfig
from rlcli.envs import ManyAgentEnv, TurnBasedEnv, VecEnv
from rlcli.envs.seats import FixedOpponents
from rlcli.errors import UsageError
from rlcli.training.selfplay.opponents import fixed_opponent
from rlcli.training.selfplay.pool import OpponentPool

POOL_FILE = "pool.safetensors"  # the snapshots' weights, in the run directory; the rest is in meta.json


def attach_opponents(cfg: RunConfig, env: VecEnv, agent: Agent, step: int,
                     saved: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None) -> OpponentPool | None:
    """Seats the training env's opponents: for a turn-based game, the learner's snapshot pool (restored from
    ``saved``, else started with a snapshot of the agent now) or the fixed opponent configured; returns the
    pool, None where there is none."""
    if not isinstance(env, TurnBasedEnv):
        return None
    selfplay = cfg.env.multiagent.selfplay
    if selfplay.opponent != "pool":
        env.opponents = FixedOpponents(fixed_opponent(selfplay.opponent, env.game, env.obs_layout, cfg.seed + 17))
        return None
    template = agent.policy(deterministic=selfplay.greedy)
    if getattr(template, "state_size", 0):
        raise UsageError("self-play snapshots play as feed-forward policies; drop network.recurrent, or train "
                         "against a fixed opponent (-p multiagent.selfplay.opponent=scripted)")
    fixed = {"random": fixed_opponent("random", None, env.obs_layout, cfg.seed + 19)}
    if selfplay.scripted:
        fixed["scripted"] = fixed_opponent("scripted", env.game, env.obs_layout, cfg.seed + 23)
    pool = OpponentPool(selfplay, template, cfg.seed + 17, fixed)
    if saved is not None:
        pool.load(*saved)
    else:
        pool.add(step)
    env.opponents = pool
    return pool


def selfplay_columns(env: VecEnv, cfg: RunConfig) -> tuple[str, ...]:
    """Metric names a multi-agent run logs beside the single-agent ones: each agent's return, self-play's
    ratings and each evaluation opponent's rates."""
    columns: list[str] = [f"charts/episode_return/{agent}" for agent in env.agents] if isinstance(
        env, ManyAgentEnv) else []
    if isinstance(env, TurnBasedEnv):
        if cfg.env.multiagent.selfplay.opponent == "pool":
            columns += ["selfplay/elo", "selfplay/pool_size", "selfplay/newest_elo", "selfplay/pool_mean_elo",
                        "selfplay/score", "selfplay/random_score", "selfplay/scripted_score"]
        names = cfg.env.multiagent.eval_opponents or (("scripted", "random") if env.game else ("random",))
        for name in names:
            columns += [f"eval/{name}/{result}" for result in ("win", "draw", "loss")]
    return tuple(columns)
