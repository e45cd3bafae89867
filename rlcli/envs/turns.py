"""Turn-based PettingZoo games (the AEC API) as a vector env of the learner's turns.

Each env is one game; the learner holds one seat (alternating between games: first, second, ...) and the
other seats are played by opponents an ``OpponentSource`` names for each game. One vector step plays the
learner's move in every game, then every opponent move until it is the learner's turn again, the
opponents' moves batched across games. A move's reward is what the learner receives until its next turn
(PettingZoo's ``rewards`` after each of those steps, summed), so a game that the opponent's reply wins is
a loss credited to the learner's last move.

Next-step auto-reset, as every rlcli backend: the step that ends a game returns the final board seen from
the learner's seat; the next step ignores its action and starts a new game (the opponents moving first
where the learner's new seat is not the first).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from rlcli.config import MultiAgentConfig
from rlcli.envs.base import StepResult
from rlcli.envs.games import game_for
from rlcli.envs.layout import MASK_KEY, ObsLayout, check_masks, flat_space
from rlcli.envs.seats import FixedOpponents, OpponentSource, RandomOpponent
from rlcli.errors import UsageError


def game_layout(space: gym.Space, action_space: gym.Space) -> ObsLayout:
    """The flat layout of a game's observation: the board (any shape, flattened) and its action mask."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise UsageError(f"rlcli plays turn-based games with Discrete moves; this game's are {action_space}")
    if isinstance(space, gym.spaces.Dict):
        board = space.spaces.get("observation")
        if board is None or not isinstance(board, gym.spaces.Box):
            raise UsageError(f"a turn-based game's observation needs an 'observation' Box; this one is {space}")
        fields: list[tuple[str, int]] = [("observation", int(np.prod(board.shape)))]
        if MASK_KEY in space.spaces:
            fields.append((MASK_KEY, int(action_space.n)))
        return ObsLayout(tuple(fields), MASK_KEY if MASK_KEY in space.spaces else None)
    if isinstance(space, gym.spaces.Box):
        return ObsLayout((("observation", int(np.prod(space.shape))),))
    raise UsageError(f"a turn-based game's observations must be a Box or a Dict of them; this one is {space}")


class TurnVecEnv:
    backend = "pettingzoo"
    agents_per_env = 1  # one row per game: the learner's seat

    def __init__(self, env_id: str, module: ModuleType, num_envs: int, seed: int, kwargs: dict[str, Any],
                 cfg: MultiAgentConfig, render_mode: str | None = None) -> None:
        extra = {"render_mode": render_mode} if render_mode else {}
        self.envs = [module.env(**kwargs, **extra) for _ in range(num_envs)]
        # the games under PettingZoo's checking wrappers (order, bounds, illegal moves), which cost more than
        # the games themselves: moves are stepped here once checked against the mask (``_play``)
        self.games = [env.unwrapped for env in self.envs]
        first = self.envs[0]
        self.players = list(first.possible_agents)
        spaces = {(str(first.observation_space(p)), str(first.action_space(p))) for p in self.players}
        if len(spaces) > 1:
            raise UsageError(f"{env_id}: its players observe or act in different spaces; rlcli's self-play "
                             "needs seats that are alike")
        self.single_action_space = first.action_space(self.players[0])
        self.obs_layout = game_layout(first.observation_space(self.players[0]), self.single_action_space)
        self.single_observation_space = flat_space(self.obs_layout)
        self.num_envs, self.cfg, self.seed, self.env_id = num_envs, cfg, seed, env_id
        self.game_name = env_id.rsplit(".", 1)[-1]
        self.game = game_for(env_id)
        self.render_mode = render_mode
        # who sits where: None alternates the learner's seat game by game; a number fixes it
        self.seat: int | None = None
        self._opponents: OpponentSource = FixedOpponents(RandomOpponent(self.obs_layout, seed))
        self._games = np.zeros(num_envs, dtype=np.int64)  # games started per env
        self._learner = [self.players[0]] * num_envs
        self._keys: list[Hashable] = [None] * num_envs
        self._returns = np.zeros(num_envs)
        self._over = np.zeros(num_envs, dtype=bool)
        self._row = np.zeros(self.obs_layout.size, dtype=np.float32)
        self._steps = 0  # vector steps since the first reset, for error messages

    @property
    def opponents(self) -> OpponentSource:
        """Who plays the other seats: asked for an opponent at the start of every game."""
        return self._opponents

    @opponents.setter
    def opponents(self, source: OpponentSource) -> None:
        self._opponents = source
        self._keys = [source.pick(i) for i in range(self.num_envs)]  # games in progress: its picks

    def _observe(self, env: Any, agent: str) -> np.ndarray:
        """One seat's observation as a flat row (board, then mask)."""
        obs = env.observe(agent)
        row = self._row.copy()
        if isinstance(obs, dict):
            width = self.obs_layout.fields[0][1]
            row[:width] = np.asarray(obs["observation"], dtype=np.float32).reshape(-1)
            if self.obs_layout.mask_key:
                row[width:] = obs[MASK_KEY]
        else:
            row[:] = np.asarray(obs, dtype=np.float32).reshape(-1)
        return row

    def _start_game(self, i: int) -> None:
        """The learner's seat and the opponent of env ``i``'s new game."""
        seat = (i + int(self._games[i])) % len(self.players) if self.seat is None else self.seat
        self._learner[i] = self.games[i].possible_agents[seat]
        self._keys[i] = self._opponents.pick(i)
        self._games[i] += 1
        self._returns[i] = 0.0

    def _finished(self, i: int) -> bool:
        env, learner = self.games[i], self._learner[i]
        return bool(env.terminations.get(learner, True) or env.truncations.get(learner, False))

    def _opponents_move(self, rewards: np.ndarray) -> None:
        """Opponent moves, batched by opponent, until every unfinished game waits on the learner."""
        while True:
            waiting: dict[Hashable, list[int]] = defaultdict(list)
            for i, game in enumerate(self.games):
                if not self._finished(i) and game.agent_selection != self._learner[i]:
                    waiting[self._keys[i]].append(i)
            if not waiting:
                return
            for key, games in waiting.items():
                rows = np.stack([self._observe(self.games[i], self.games[i].agent_selection) for i in games])
                for i, row, action in zip(games, rows, self.opponents.opponent(key).act(rows), strict=True):
                    rewards[i] += self._play(i, row, int(action))

    def reset(self) -> np.ndarray:
        """New games in every env, env i seeded with ``seed + i`` and its seat counter restarted."""
        self._games[:] = 0
        for i, env in enumerate(self.envs):
            env.reset(seed=self.seed + i)
            self._start_game(i)
        self._over[:] = False
        self._opponents_move(np.zeros(self.num_envs))
        return self._learner_rows()

    def _learner_rows(self) -> np.ndarray:
        """The learner's observations. A finished game's final board allows every move: that row's action
        is never played (the next step starts a new game), and an empty mask is kept for errors; any other
        row whose mask allows nothing is a UsageError."""
        obs = np.stack([self._observe(game, self._learner[i]) for i, game in enumerate(self.games)])
        if self.obs_layout.mask_key:
            mask = self.obs_layout.span(self.obs_layout.mask_key)
            obs[self._over, mask] = 1.0
            check_masks(obs[:, mask] > 0.5, [int(self.single_action_space.n)], self._steps)
        self._last = obs
        return obs

    def _play(self, i: int, row: np.ndarray, action: int) -> float:
        """``action`` in game ``i`` by the seat to move, whose observation is ``row``; returns the learner's
        reward for it. A move the row's mask forbids is a UsageError (the game itself would end on it)."""
        if self.obs_layout.mask_key and not row[self.obs_layout.span(self.obs_layout.mask_key)][action] > 0.5:
            raise UsageError(f"{self.game_name}: move {action} is illegal for {self.games[i].agent_selection} at "
                             f"step {self._steps} (its action mask forbids it)")
        game = self.games[i]
        game.step(action)
        return float(game.rewards[self._learner[i]])

    def step(self, actions: np.ndarray) -> StepResult:
        self._steps += 1
        rewards = np.zeros(self.num_envs)
        for i, env in enumerate(self.envs):
            if self._over[i]:  # the game ended last step: this row starts the next one
                env.reset()
                self._start_game(i)
            else:
                rewards[i] += self._play(i, self._last[i], int(actions[i]))
        self._opponents_move(rewards)
        terminated = np.array([bool(g.terminations.get(self._learner[i], True)) for i, g in enumerate(self.games)])
        truncated = np.array([bool(g.truncations.get(self._learner[i], False)) for i, g in enumerate(self.games)])
        truncated &= ~terminated
        self._returns += rewards
        self._over = terminated | truncated
        for i in np.flatnonzero(self._over):
            self.opponents.result(self._keys[i], float(self._returns[i]))
        obs = self._learner_rows()
        reward = rewards.astype(np.float32)
        return StepResult(obs, reward, terminated, truncated, reward, self._over.copy())

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> StepResult:
        return self.step(self._actions)

    def learner_seat(self, i: int = 0) -> int:
        """The seat (0 first) the learner holds in env ``i``'s current game."""
        return self.games[i].possible_agents.index(self._learner[i])

    def render(self) -> np.ndarray:
        return self.envs[0].render()

    @property
    def render_fps(self) -> int:
        return int(self.envs[0].metadata.get("render_fps") or 2)

    def close(self) -> None:
        for env in self.envs:
            env.close()
