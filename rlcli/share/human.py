"""A person against a saved agent in a turn-based game, one move at a time (``rlcli play --human``)."""

from __future__ import annotations

import numpy as np
import torch

from rlcli.envs.layout import n_actions
from rlcli.envs.turns import TurnVecEnv
from rlcli.errors import UsageError
from rlcli.runs.rundir import RunDir
from rlcli.training.agents import agent_from_run, make_env, resolve_device

MARKS = ("X", "O", "+", "*")  # the pieces of the first, second, ... player


class IllegalMove(ValueError):
    """A typed move that is not a legal move now; its message says which are."""


class HumanGame:
    """Games between a person in seat ``human_seat`` (0 moves first) and a saved agent."""

    def __init__(self, run: RunDir, human_seat: int, seed: int, deterministic: bool = True, best: bool = False):
        vec = make_env(run.cfg, 1, seed)
        if not isinstance(vec, TurnVecEnv):
            vec.close()
            raise UsageError(f"{run.cfg.env.id} is not a turn-based game; --human plays games only")
        self.vec = vec
        self.env = self.vec.envs[0]
        self.players = list(self.env.possible_agents)
        if not 0 <= human_seat < len(self.players):
            self.vec.close()
            raise UsageError(f"--seat {human_seat + 1}: this game has seats 1 to {len(self.players)}")
        self.game = self.vec.game
        self.layout = self.vec.obs_layout
        self.policy = agent_from_run(run, self.vec, resolve_device("cpu"), best).policy(deterministic)
        self.human = self.players[human_seat]
        self.seed = seed
        self.games = 0
        self.returned = 0.0  # the person's rewards this game, each step's summed as the env hands them out

    def new_game(self) -> None:
        self.env.reset(seed=self.seed + self.games)
        self.games += 1
        self.returned = 0.0

    def _step(self, action: int) -> None:
        self.env.step(action)
        self.returned += float(self.env.rewards[self.human])

    @property
    def over(self) -> bool:
        return bool(self.env.terminations.get(self.human, True) or self.env.truncations.get(self.human, False))

    @property
    def human_to_move(self) -> bool:
        return not self.over and self.env.agent_selection == self.human

    def _row(self, agent: str) -> np.ndarray:
        return self.vec._observe(self.env, agent)

    def legal_moves(self) -> list[int]:
        """The actions the person may take now."""
        row = self._row(self.human)
        if self.layout is None or self.layout.mask_key is None:
            return list(range(n_actions(self.vec.single_action_space)))
        return [int(a) for a in np.flatnonzero(row[self.layout.span(self.layout.mask_key)] > 0.5)]

    def move_name(self, action: int) -> str:
        """What a person types for ``action``: the number the board shows."""
        return str(action + 1) if self.game is not None else str(action)

    def board_text(self) -> str:
        """The board from the person's side, their pieces marked as their seat's."""
        if self.game is None:
            return "(rlcli draws no board for this game; moves are action numbers)"
        seat = self.players.index(self.human)
        marks = (MARKS[seat], MARKS[1 - seat] if len(self.players) == 2 else "#")
        return self.game.text(self.game.board(self._row(self.human)[self.layout.span("observation")]), marks)

    def play(self, text: str) -> int:
        """The person's move as typed; IllegalMove (naming the legal moves) for anything else."""
        if self.game is not None:
            action = self.game.parse_move(text)
        else:
            action = int(text) if text.strip().isdigit() else None
        legal = self.legal_moves()
        if action is None or action not in legal:
            names = ", ".join(self.move_name(a) for a in legal)
            raise IllegalMove(f"'{text.strip()}' is not a legal move; choose one of: {names}")
        self._step(action)
        return action

    @torch.no_grad()
    def agent_move(self) -> int:
        """The agent's move in the seat whose turn it is; returns the action."""
        row = self._row(self.env.agent_selection)
        action = int(self.policy(torch.as_tensor(row).unsqueeze(0))[0])
        self._step(action)
        return action

    def close(self) -> None:
        self.vec.close()
