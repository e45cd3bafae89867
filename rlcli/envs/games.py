"""What rlcli knows of particular board games: the board in an observation, a scripted player, and the
board as text for a person to play on. Keyed by PettingZoo's module name.

PettingZoo's board games observe from the player to move: plane 0 holds its own pieces, plane 1 the
opponent's. Boards here are int8 arrays of +1 (the player to move), -1 (its opponent) and 0 (empty).
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

import numpy as np


class Game(Protocol):
    """A board game rlcli can draw, and play with a scripted player."""

    scripted_name: str  # what the scripted player does, in a few words

    def board(self, observation: np.ndarray) -> np.ndarray:
        """The board (+1 own, -1 opponent, 0 empty) of one flat observation (without its mask)."""
        ...

    def scripted(self, board: np.ndarray, legal: np.ndarray, rng: np.random.Generator) -> int:
        """The scripted player's move on ``board`` (its own pieces +1) among the ``legal`` actions (bool)."""
        ...

    def text(self, board: np.ndarray, marks: tuple[str, str]) -> str:
        """The board as lines of text, ``marks`` for (own, opponent) pieces, with what to type for each move."""
        ...

    def parse_move(self, text: str) -> int | None:
        """The action a person's typed move names, None where it names none."""
        ...


class TicTacToe:
    """tictactoe_v3: squares 0-8 row by row from the top left (action = square)."""

    scripted_name = "minimax: a perfect player, choosing among equally good moves at random"

    def board(self, observation: np.ndarray) -> np.ndarray:
        planes = observation[:18].reshape(3, 3, 2)
        return (planes[..., 0] - planes[..., 1]).astype(np.int8).reshape(9)

    def scripted(self, board: np.ndarray, legal: np.ndarray, rng: np.random.Generator) -> int:
        best = _tictactoe_best_moves(tuple(int(v) for v in board))
        moves = [m for m in best if legal[m]] or list(np.flatnonzero(legal))
        return int(rng.choice(moves))

    def text(self, board: np.ndarray, marks: tuple[str, str]) -> str:
        cells = [marks[0] if v > 0 else marks[1] if v < 0 else str(i + 1) for i, v in enumerate(board.reshape(9))]
        rows = [" " + " | ".join(cells[r * 3:r * 3 + 3]) for r in range(3)]
        return "\n---+---+---\n".join(rows)

    def parse_move(self, text: str) -> int | None:
        text = text.strip()
        return int(text) - 1 if text.isdigit() and 1 <= int(text) <= 9 else None


_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def tictactoe_winner(board: tuple[int, ...]) -> int:
    """+1 or -1 where that side has three in a row, else 0."""
    for a, b, c in _LINES:
        if board[a] != 0 and board[a] == board[b] == board[c]:
            return board[a]
    return 0


@cache
def _tictactoe_value(board: tuple[int, ...]) -> int:
    """The game's value for the player to move (+1 its pieces): 1 win, 0 draw, -1 loss, with perfect play."""
    if tictactoe_winner(board):
        return -1  # the previous move, the opponent's, won
    empty = [i for i, v in enumerate(board) if v == 0]
    if not empty:
        return 0
    return max(-_tictactoe_value(_flip(board, i)) for i in empty)


def _flip(board: tuple[int, ...], move: int) -> tuple[int, ...]:
    """The board after the player to move takes ``move``, seen by the other player (signs swapped)."""
    return tuple(-(1 if i == move else v) for i, v in enumerate(board))


@cache
def _tictactoe_best_moves(board: tuple[int, ...]) -> tuple[int, ...]:
    empty = [i for i, v in enumerate(board) if v == 0]
    if not empty or tictactoe_winner(board):
        return ()
    values = {i: -_tictactoe_value(_flip(board, i)) for i in empty}
    best = max(values.values())
    return tuple(i for i in empty if values[i] == best)


class ConnectFour:
    """connect_four_v3: 6 rows (row 0 the top) by 7 columns; action = the column a piece drops into."""

    scripted_name = "wins where it can, else blocks the opponent's win, else plays a random legal column"
    rows, columns = 6, 7

    def board(self, observation: np.ndarray) -> np.ndarray:
        planes = observation[:84].reshape(6, 7, 2)
        return (planes[..., 0] - planes[..., 1]).astype(np.int8)

    def scripted(self, board: np.ndarray, legal: np.ndarray, rng: np.random.Generator) -> int:
        columns = np.flatnonzero(legal)
        for side in (1, -1):  # a winning drop of its own first, then the opponent's, which it blocks
            for column in columns:
                if connect_four_wins(board, int(column), side):
                    return int(column)
        return int(rng.choice(columns))

    def text(self, board: np.ndarray, marks: tuple[str, str]) -> str:
        lines = [" " + " ".join(marks[0] if v > 0 else marks[1] if v < 0 else "." for v in row) for row in board]
        return "\n".join([*lines, " " + " ".join(str(c + 1) for c in range(self.columns))])

    def parse_move(self, text: str) -> int | None:
        text = text.strip()
        return int(text) - 1 if text.isdigit() and 1 <= int(text) <= self.columns else None


def connect_four_wins(board: np.ndarray, column: int, side: int) -> bool:
    """Whether a piece of ``side`` dropped into ``column`` completes four in a row (any direction)."""
    empty = np.flatnonzero(board[:, column] == 0)
    if empty.size == 0:
        return False
    row = int(empty[-1])  # pieces fall to the lowest empty row
    rows, columns = board.shape
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < rows and 0 <= c < columns and board[r, c] == side:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


GAMES: dict[str, Game] = {"tictactoe_v3": TicTacToe(), "connect_four_v3": ConnectFour()}


def game_for(env_id: str) -> Game | None:
    """What rlcli knows of the game ``env_id`` (a module path or bare PettingZoo name); None for others."""
    return GAMES.get(env_id.rsplit(".", 1)[-1])
