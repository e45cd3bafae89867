"""Reference numbers shipped as data: published scores to compare against, and the random and reference
returns that normalise scores for aggregate metrics. Each number carries its source. Benchmark reports
and the tuning of several envs at once (scored by normalised return) both read them.

``rlcli/data/published_scores.csv``: final returns other libraries publish (source, algo, env name
without version, the env version they used, budget in env steps, mean, std, seeds, the kind of return,
and where: URL, commit, description).
``rlcli/data/normalization.csv``: per env id, the return of a uniform random policy and a reference
return (human for Atari, a published or defined level elsewhere), each with its source.
"""

from __future__ import annotations

import csv
import math
import re
from functools import lru_cache
from typing import NamedTuple

from rlcli.config import data_dir

ATARI_PREFIX = "ALE/"


class Published(NamedTuple):
    """A published final return for an algorithm on an environment at a budget."""

    source: str
    algo: str
    env: str  # name without version, e.g. "Hopper"
    env_version: str  # the version the source used, e.g. "v4" or "v5-envpool"
    steps: int
    mean: float
    std: float | None
    seeds: int | None
    where: str
    # "training" (the learning policy's own episodes), "eval-deterministic" or "eval-stochastic": what
    # the number measures, as its source says; rlcli's reports are eval-deterministic
    return_kind: str
    url: str  # the published page, pinned at ``commit`` where it lives in a repository
    commit: str


class Normalization(NamedTuple):
    """Scores normalise as ``(score - random) / (reference - random)``."""

    env_id: str
    random: float
    reference: float
    reference_kind: str  # "human", "published", "threshold", "maximum"
    random_source: str
    reference_source: str


def _rows(name: str) -> list[dict[str, str]]:
    with open(data_dir() / name, newline="") as f:
        return [row for row in csv.DictReader(f) if row and not row[next(iter(row))].startswith("#")]


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


@lru_cache(maxsize=1)
def published_scores() -> tuple[Published, ...]:
    return tuple(Published(r["source"], r["algo"], r["env_id"], r["env_version_used"], int(r["steps"]),
                           float(r["mean_return"]), _number(r["std_return"]),
                           int(r["seeds"]) if r["seeds"].strip() else None, r["where_published"],
                           r["return_kind"], r["url"], r["commit"])
                 for r in _rows("published_scores.csv"))


@lru_cache(maxsize=1)
def normalizations() -> dict[str, Normalization]:
    rows = _rows("normalization.csv")
    return {r["env_id"]: Normalization(r["env_id"], float(r["random"]), float(r["reference"]),
                                       r["reference_kind"], r["random_source"], r["reference_source"])
            for r in rows}


def env_name(env_id: str) -> str:
    """``Hopper-v5`` -> ``Hopper``; ``ALE/Pong-v5`` -> ``Pong``."""
    return re.sub(r"-v\d+$", "", env_id.removeprefix(ATARI_PREFIX))


def published_for(algo: str, env_id: str, steps: int) -> list[Published]:
    """Published results for the same algorithm, environment (any version) and budget in env steps."""
    name = env_name(env_id)
    return [p for p in published_scores() if p.algo == algo and p.env == name and p.steps == steps]


def published_elsewhere(algo: str, env_id: str) -> list[Published]:
    """Published results for the same algorithm and environment at any budget."""
    name = env_name(env_id)
    return [p for p in published_scores() if p.algo == algo and p.env == name]


def normalization_for(env_id: str) -> Normalization | None:
    """The normalisation of ``env_id`` (``ALE/Pong-v5`` uses ``Pong-v5``'s), or None where there is none."""
    return normalizations().get(env_id.removeprefix(ATARI_PREFIX))


def random_policy_return(env_id: str, episodes: int = 100, seed: int = 0) -> tuple[float, float]:
    """Mean and std of the undiscounted return of a uniform random policy over ``episodes`` episodes of
    a gymnasium env (each episode seeded ``seed + i``, actions from the seeded action space). This is
    how the ``rlcli`` random scores in normalization.csv were measured. A PettingZoo environment's: see
    ``random_multiagent_return``."""
    import gymnasium as gym
    import numpy as np

    from rlcli.envs.pettingzoo_ids import is_pettingzoo

    if is_pettingzoo(env_id):
        return random_multiagent_return(env_id, episodes, seed)

    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    mean, std = float(np.mean(returns)), float(np.std(returns))
    return (mean, std) if math.isfinite(mean) else (math.nan, math.nan)


def random_multiagent_return(env_id: str, episodes: int = 100, seed: int = 0) -> tuple[float, float]:
    """Mean and std return of uniform random play in a PettingZoo environment over ``episodes`` episodes of
    one env seeded ``seed``: a turn-based game's random legal moves against its first evaluation opponent
    (the scripted player where rlcli has one, else random), seats alternating game by game; a
    simultaneous-move env's team return with every agent's action drawn from its seeded action space."""
    import numpy as np

    from rlcli.envs import TurnBasedEnv, make_vec_env
    from rlcli.envs.seats import FixedOpponents, RandomOpponent
    from rlcli.training.selfplay.opponents import fixed_opponent

    env = make_vec_env(env_id, 1, seed)
    if isinstance(env, TurnBasedEnv):
        env.opponents = FixedOpponents(fixed_opponent("scripted" if env.game else "random", env.game,
                                                      env.obs_layout, seed + 1))
        mover = RandomOpponent(env.obs_layout, seed)
        draw = mover.act
    elif env.obs_layout is not None and env.obs_layout.groups:  # each agent within its own group's actions
        rng = np.random.default_rng(seed)
        layout = env.obs_layout
        actions = np.array([group.actions for group in layout.groups])

        def draw(obs: np.ndarray) -> np.ndarray:
            counts = actions[obs[:, layout.span("group")].argmax(axis=1)]
            return (rng.random(len(obs)) * counts).astype(np.int64)
    else:
        space = env.single_action_space
        space.seed(seed)

        def draw(obs: np.ndarray) -> np.ndarray:
            return np.stack([space.sample() for _ in range(len(obs))])
    returns: list[float] = []
    total = 0.0
    obs = env.reset()
    while len(returns) < episodes:
        result = env.step(draw(obs))
        total += float(result.raw_reward.sum())
        if result.game_over[0]:
            returns.append(total)
            total = 0.0
        obs = result.obs
    env.close()
    return float(np.mean(returns)), float(np.std(returns))
