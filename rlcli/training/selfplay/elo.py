"""Elo ratings (Elo 1978): pure functions of ratings and results."""

from __future__ import annotations

INITIAL = 1200.0  # every player's rating before its first game
SCALE = 400.0  # a rating gap of SCALE points gives the stronger player an expected score of 10/11


def expected_score(rating: float, opponent: float) -> float:
    """The score (1 win, 0.5 draw, 0 loss) a player rated ``rating`` is expected to make against one rated
    ``opponent``: 1 / (1 + 10^((opponent - rating) / 400))."""
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / SCALE))


def updated(rating: float, opponent: float, score: float, k: float) -> tuple[float, float]:
    """Both ratings after one game in which the first player scored ``score`` (1, 0.5 or 0): each moves by
    ``k`` times the difference between its score and its expected score, so the points one gains the
    other loses."""
    change = k * (score - expected_score(rating, opponent))
    return rating + change, opponent - change


def game_score(game_return: float) -> float:
    """A two-player zero-sum game's return as a result: 1 for a win (positive), 0.5 for a draw, 0 for a loss."""
    return 1.0 if game_return > 0 else 0.5 if game_return == 0 else 0.0
