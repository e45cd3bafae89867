"""Evaluation episodes: the only other code that steps environments."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import torch
from torch import nn

from rlcli.algos.base import Agent
from rlcli.config import RunConfig
from rlcli.envs import ManyAgentEnv, RenderedEnv, TurnBasedEnv, TurnBasedVecEnv, VecEnv, agents_per_env
from rlcli.envs.seats import FixedOpponents, Opponent
from rlcli.errors import UsageError
from rlcli.runs.rundir import RunDir
from rlcli.training.agents import EVAL_ENVS, agent_from_run, make_env, resolve_device
from rlcli.training.selfplay.opponents import PolicyOpponent, fixed_opponent


class EvalResult(NamedTuple):
    returns: list[float]
    lengths: list[int]
    # with several agents per env: each episode's return of each agent ({agent: [returns]}); else empty
    agent_returns: dict[str, list[float]] = {}

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def as_dict(self) -> dict[str, float | int | list]:
        out = {"mean_return": self.mean, "std_return": self.std, "episodes": len(self.returns),
               "mean_length": float(np.mean(self.lengths)), "returns": self.returns, "lengths": self.lengths}
        if self.agent_returns:
            out["agent_mean_returns"] = {name: float(np.mean(r)) for name, r in self.agent_returns.items()}
        return out


class Actor:
    """A policy acting step after step in ``n`` envs: a recurrent one's state is carried, and set to zero
    where an episode starts (the row after a reset row, under next-step auto-reset)."""

    def __init__(self, policy: nn.Module, n: int, device: torch.device) -> None:
        self.policy, self.device = policy, device
        size = getattr(policy, "state_size", 0)
        self.state = torch.zeros(n, size, device=device) if size else None

    def __call__(self, obs: np.ndarray) -> torch.Tensor:
        """Env actions for raw observations [n, ...]."""
        if self.state is None:
            return self.policy(torch.as_tensor(obs, device=self.device))
        actions, self.state = self.policy(torch.as_tensor(obs, device=self.device), self.state)
        return actions

    def next_step(self, reset_rows: np.ndarray) -> None:
        """After a step: the observations it returned for ``reset_rows`` (the rows whose previous step
        ended an episode) are the first of new episodes."""
        if self.state is not None and reset_rows.any():
            self.state[torch.as_tensor(reset_rows, device=self.device)] = 0.0


@torch.no_grad()
def evaluate(agent: Agent, env: VecEnv, episodes: int, deterministic: bool = True,
             on_frame: Callable[[], None] | None = None) -> EvalResult:
    """Runs ``episodes`` full games (all lives), spread evenly over the envs so that short episodes
    are not over-represented; returns their unclipped returns and lengths in env steps. In an env of
    several agents (``agents_per_env`` rows), an episode's return is the team's: its agents' summed."""
    agents = agents_per_env(env)
    n = env.num_envs // agents
    targets = np.array([(episodes + i) // n for i in range(n)])
    done_counts = np.zeros(n, dtype=np.int64)
    ep_returns = np.zeros((n, agents))
    ep_lengths = np.zeros(n, dtype=np.int64)
    returns: list[float] = []
    lengths: list[int] = []
    names = list(env.agents) if isinstance(env, ManyAgentEnv) and agents > 1 else []
    agent_returns: dict[str, list[float]] = {name: [] for name in names}
    prev_done = np.zeros(env.num_envs, dtype=bool)
    act = Actor(agent.policy(deterministic), env.num_envs, agent.device)
    obs = env.reset()
    while (done_counts < targets).any():
        actions = act(obs)
        result = env.step(actions.cpu().numpy())
        if on_frame is not None:
            on_frame()
        ep_returns += result.raw_reward.reshape(n, agents)
        ep_lengths += (~prev_done).reshape(n, agents).any(axis=1)
        act.next_step(prev_done)
        prev_done = result.terminated | result.truncated
        for i in np.flatnonzero(result.game_over.reshape(n, agents)[:, 0]):
            if done_counts[i] < targets[i]:
                returns.append(float(ep_returns[i].sum()))
                lengths.append(int(ep_lengths[i]))
                for name, value in zip(names, ep_returns[i], strict=False):
                    agent_returns[name].append(float(value))
                done_counts[i] += 1
            ep_returns[i] = 0.0
            ep_lengths[i] = 0
        obs = result.obs
    return EvalResult(returns, lengths, agent_returns)


class GameResult(NamedTuple):
    """Games against one opponent, one result per seat the learner held (first player first)."""

    opponent: str
    seats: list[EvalResult]

    @property
    def overall(self) -> EvalResult:
        return EvalResult([r for s in self.seats for r in s.returns], [n for s in self.seats for n in s.lengths])

    def rates(self) -> dict[str, float]:
        """Win, draw and loss rates over all games and per seat (``first_win``, ``second_win``, ...), as
        fractions of the games played; a game's result is the sign of the learner's return."""
        out: dict[str, float] = {}
        for prefix, result in [("", self.overall), *((f"{SEATS[i]}_", s) for i, s in enumerate(self.seats))]:
            returns = np.asarray(result.returns)
            for name, games in (("win", returns > 0), ("draw", returns == 0), ("loss", returns < 0)):
                out[prefix + name] = float(games.mean()) if returns.size else 0.0
        return out


SEATS = ("first", "second", "third", "fourth")


def is_game(env: VecEnv) -> TypeGuard[TurnBasedVecEnv]:
    """Whether ``env`` is a turn-based game played against opponents (``rlcli.envs.turns``)."""
    return isinstance(env, TurnBasedEnv)


def evaluate_game(agent: Agent, env: TurnBasedVecEnv, opponent: Opponent, games: int, deterministic: bool = True
                  ) -> GameResult:
    """``games`` games against ``opponent`` from each seat of the turn-based game ``env``; the env's own
    opponents and seating are restored after."""
    saved = env.opponents, env.seat
    env.opponents = FixedOpponents(opponent)
    try:
        seats = []
        for seat in range(len(env.players)):
            env.seat = seat
            seats.append(evaluate(agent, env, games, deterministic))
    finally:
        env.opponents, env.seat = saved
    return GameResult(opponent.name, seats)


def eval_opponents(cfg: RunConfig, env: TurnBasedEnv, seed: int, names: Sequence[str] | None = None
                   ) -> list[Opponent]:
    """The fixed players a game's agent is measured against: ``names``, else the run's
    ``multiagent.eval_opponents``, else the game's scripted player (where rlcli has one) and random."""
    game = env.game
    chosen = names or cfg.env.multiagent.eval_opponents or (("scripted", "random") if game else ("random",))
    return [fixed_opponent(name, game, env.obs_layout, seed + i) for i, name in enumerate(chosen)]


def game_opponent(env: TurnBasedVecEnv, opponent: str | RunDir, seed: int) -> Opponent:
    """The opponent named on a command line (random, scripted, or a run of the same game playing its
    deterministic policy) for the turn-based game ``env``."""
    if not isinstance(opponent, RunDir):
        return fixed_opponent(opponent, env.game, env.obs_layout, seed)
    if opponent.cfg.env.id != env.env_id:
        raise UsageError(f"--opponent {opponent.path} plays {opponent.cfg.env.id}, not {env.env_id}")
    other = agent_from_run(opponent, env, resolve_device("cpu"))
    return PolicyOpponent(str(opponent.path), other.policy(deterministic=True))


def match(run: RunDir, opponent: str | RunDir, games: int, seed: int, deterministic: bool = True,
          best: bool = False) -> GameResult:
    """``games`` games from each seat of a saved game-playing run against ``opponent``: random, scripted, or
    another run of the same game (playing its deterministic policy), on the CPU."""
    env = make_env(run.cfg, min(EVAL_ENVS, games), seed)
    try:
        if not is_game(env):
            raise UsageError(f"{run.cfg.env.id} is not a turn-based game: --opponent plays games only")
        agent = agent_from_run(run, env, resolve_device("cpu"), best)
        return evaluate_game(agent, env, game_opponent(env, opponent, seed + 1), games, deterministic)
    finally:
        env.close()


def evaluate_run(agent: Agent, env: VecEnv, cfg: RunConfig, seed: int) -> tuple[EvalResult, dict[str, Any]]:
    """A periodic evaluation: ``cfg.eval.episodes`` episodes, or for a turn-based game that many games from
    each seat against each evaluation opponent, whose first gives the result (a game's return: 1 win, 0
    draw, -1 loss) and all their rates as ``OPPONENT/win`` etc."""
    if not is_game(env):
        return evaluate(agent, env, cfg.eval.episodes, cfg.eval.deterministic), {}
    results = [evaluate_game(agent, env, opponent, cfg.eval.episodes, cfg.eval.deterministic)
               for opponent in eval_opponents(cfg, env, seed)]
    rates = {f"{r.opponent}/{name}": value for r in results for name, value in r.rates().items()}
    return results[0].overall, rates


class Recording(NamedTuple):
    """Episodes played by a saved agent, with what the screen showed."""

    result: EvalResult
    frames: list[np.ndarray]  # RGB, one per env step; empty unless rendered to "rgb_array"
    fps: int | None  # the frame rate of real time; None when nothing was rendered


def render_off_screen() -> None:
    """Renders without a display: MuJoCo through EGL, pygame into a dummy video driver. Both read
    their setting when first imported, so this has to come before any environment is made."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def rendered(env: VecEnv) -> RenderedEnv:
    """``env``, made with a render_mode, as the screen it renders to."""
    assert isinstance(env, RenderedEnv), "a render_mode makes a backend that renders (gymnasium, PettingZoo, envpool)"
    return env


def record_episodes(run: RunDir, episodes: int, seed: int, *, deterministic: bool = True,
                    num_envs: int = 1, render_mode: str | None = None, best: bool = False,
                    opponent: str | RunDir | None = None,
                    on_frame: Callable[[int], None] | None = None) -> Recording:
    """Plays ``episodes`` episodes of a saved run on the CPU, over ``num_envs`` envs seeded from
    ``seed``. ``render_mode`` "rgb_array" keeps a frame per env step (``render_off_screen`` first,
    where there is no display), "human" shows a window; either needs ``num_envs`` 1. ``best``: the best
    evaluated model rather than the last. A turn-based game's ``opponent``: random (None), scripted, or
    another run of the game. ``on_frame`` is told how many frames are kept after each one ("rgb_array"): a
    recording's progress, where a frame of a detailed scene takes a software renderer a third of a second."""
    if render_mode is not None and num_envs != 1:
        raise ValueError(f"rendering shows one env; num_envs is {num_envs}")
    env = make_env(run.cfg, num_envs, seed, render_mode=render_mode)
    frames: list[np.ndarray] = []
    try:
        agent = agent_from_run(run, env, resolve_device("cpu"), best)
        if opponent is not None:
            if not is_game(env):
                raise UsageError(f"{run.cfg.env.id} is not a turn-based game: --opponent plays games only")
            env.opponents = FixedOpponents(game_opponent(env, opponent, seed + 1))
        screen = rendered(env) if render_mode is not None else None

        def keep_frame() -> None:
            assert screen is not None
            frames.append(screen.render())
            if on_frame is not None:
                on_frame(len(frames))

        keeping = screen is not None and render_mode == "rgb_array"
        result = evaluate(agent, env, episodes, deterministic, on_frame=keep_frame if keeping else None)
        fps = screen.render_fps if screen is not None else None
    finally:
        env.close()
    return Recording(result, frames, fps)


class Episodes(NamedTuple):
    """What envs showed a policy step after step: raw observations [steps, n_envs, *obs_shape] and where
    each row starts an episode [steps, n_envs] (a recurrent policy's state is zero there)."""

    obs: np.ndarray
    starts: np.ndarray


@torch.no_grad()
def sample_episodes(agent: Agent, env: VecEnv, steps: int, deterministic: bool = False) -> Episodes:
    """Raw observations met while the agent acts for ``steps`` vector steps, as the env produces them
    (no normalisation), with the episode starts. Export checks its files on these."""
    act = Actor(agent.policy(deterministic), env.num_envs, agent.device)
    obs = env.reset()
    seen = [obs.copy()]  # a backend may reuse its output buffer on the next step
    starts = [np.ones(env.num_envs, dtype=bool)]
    prev_done = np.zeros(env.num_envs, dtype=bool)
    for _ in range(steps - 1):
        result = env.step(act(obs).cpu().numpy())
        act.next_step(prev_done)
        starts.append(prev_done)
        prev_done = result.terminated | result.truncated
        obs = result.obs
        seen.append(obs.copy())
    return Episodes(np.stack(seen), np.stack(starts))
