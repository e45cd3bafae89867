"""The players a learner meets in a turn-based game beyond uniform random (``rlcli.envs.seats``): each
game's scripted player and policies (snapshots of the learner, other runs)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlcli.envs.games import Game
from rlcli.envs.layout import ObsLayout
from rlcli.envs.seats import Opponent, RandomOpponent
from rlcli.errors import UsageError

FIXED = ("random", "scripted")  # the opponents named on the command line (beside a run directory)


class ScriptedOpponent:
    """The game's own heuristic player (``rlcli.envs.games``)."""

    name = "scripted"

    def __init__(self, game: Game, layout: ObsLayout, seed: int) -> None:
        self.game, self.rng = game, np.random.default_rng(seed)
        self.observation = layout.span("observation")
        assert layout.mask_key is not None  # fixed_opponent seats fixed players in masked games only
        self.mask = layout.span(layout.mask_key)

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.array([self.game.scripted(self.game.board(row[self.observation]), row[self.mask] > 0.5, self.rng)
                         for row in obs], dtype=np.int64)


class PolicyOpponent:
    """A policy module (raw observations -> env actions), acting on the CPU without gradients."""

    def __init__(self, name: str, policy: nn.Module) -> None:
        self.name, self.policy = name, policy

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.policy(torch.as_tensor(obs)).numpy()


def fixed_opponent(name: str, game: Game | None, layout: ObsLayout | None, seed: int) -> Opponent:
    """The opponent ``name`` (random or scripted) for a game; a UsageError for one the game lacks."""
    if layout is None or layout.mask_key is None:
        raise UsageError("fixed opponents play games whose observations carry an action mask")
    if name == "random":
        return RandomOpponent(layout, seed)
    if name == "scripted":
        if game is None:
            raise UsageError("this game has no scripted player in rlcli (tictactoe_v3 and connect_four_v3 have); "
                             "use random or a trained run")
        return ScriptedOpponent(game, layout, seed)
    raise UsageError(f"unknown opponent '{name}'; choose random, scripted or a run directory")
