"""Who sits in a turn-based game's other seats: the opponent protocol, a source naming each game's opponent,
and the two any game has (uniform random, and one opponent for every game). rlcli.training.selfplay supplies the
rest: scripted players, snapshot policies and the self-play pool.

An opponent acts on rows of flat observations as the env makes them (the observation's columns, then the
action mask's: ``rlcli.envs.layout``), seen from the seat it plays.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import numpy as np

from rlcli.envs.layout import ObsLayout


class Opponent(Protocol):
    name: str

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions [k] for observation rows [k, layout.size]; only legal moves."""
        ...


class OpponentSource(Protocol):
    def pick(self, env_index: int) -> Hashable:
        """The key of the opponent that plays the game starting now in env ``env_index``."""
        ...

    def opponent(self, key: Hashable) -> Opponent: ...

    def result(self, key: Hashable, learner_return: float) -> None:
        """A game against ``key`` ended with the learner's return ``learner_return``."""
        ...


class RandomOpponent:
    """Uniform over the legal moves."""

    name = "random"

    def __init__(self, layout: ObsLayout, seed: int) -> None:
        self.mask = layout.span(layout.mask_key) if layout.mask_key else None
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray) -> np.ndarray:
        legal = obs[:, self.mask] > 0.5
        # a uniform draw per row: the first legal action whose rank reaches a uniform index
        counts = legal.sum(axis=1)
        picks = (self.rng.random(len(obs)) * counts).astype(np.int64)
        return (np.cumsum(legal, axis=1) > picks[:, None]).argmax(axis=1)


class FixedOpponents:
    """One opponent for every game; results are only counted."""

    def __init__(self, opponent: Opponent) -> None:
        self.one = opponent
        self.results: list[float] = []

    def pick(self, env_index: int) -> Hashable:
        return self.one.name

    def opponent(self, key: Hashable) -> Opponent:
        return self.one

    def result(self, key: Hashable, learner_return: float) -> None:
        self.results.append(learner_return)
