"""Self-play's opponents: a pool of the learner's own past snapshots, with Elo ratings.

A snapshot is the learner's policy weights at one moment, added every ``snapshot_every`` updates (the
oldest dropped beyond ``pool_size``). Each new game's opponent is the newest snapshot with probability
``latest``, else one drawn uniformly from the older ones (the newest alone while there is no older one).
After each game the learner's rating and that snapshot's move by Elo's rule; a new snapshot starts at the
learner's rating of the moment. The pool's state is tensors and JSON values, for the run directory.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcli.config import SelfPlayConfig
from rlcli.envs.seats import Opponent
from rlcli.training.selfplay.elo import INITIAL, expected_score, game_score, updated
from rlcli.training.selfplay.opponents import PolicyOpponent

LIVE_OPPONENTS = 8  # snapshot policies kept built at once (the rest are rebuilt from their weights)
RECENT_GAMES = 1000  # games the pool's score metric averages over
FIXED_PLAYERS = ("random", "scripted")  # the keys of the games against a fixed player


def prioritized_weight(learner_score: float) -> float:
    """The weight of a snapshot against which the learner expects ``learner_score`` (0 to 1): (1 - p)^2, a
    little above 0 so that no snapshot is never drawn."""
    return (1.0 - learner_score) ** 2 + 1e-6


@dataclass
class Member:
    """One snapshot in the pool."""

    id: int
    step: int  # the env step at which it was taken
    elo: float
    games: int = 0


class OpponentPool:
    """The learner's past snapshots as an ``OpponentSource``. ``template`` is the learner's live policy
    module (raw observations -> env actions); snapshots are copies of its weights."""

    def __init__(self, cfg: SelfPlayConfig, template: nn.Module, seed: int,
                 fixed: dict[str, Opponent] | None = None) -> None:
        # ``fixed``: the players (random, scripted) a share of the games is played against instead
        self.cfg, self.template, self.fixed = cfg, template, fixed or {}
        self.members: list[Member] = []
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.retired: dict[int, dict[str, torch.Tensor]] = {}  # dropped by the last snapshot, still playing
        self.learner_elo = INITIAL
        self.next_id = 0
        self.rng = np.random.default_rng(seed)
        self.recent: deque[float] = deque(maxlen=RECENT_GAMES)  # the learner's scores, newest last
        # the same against each fixed player
        self.recent_fixed: dict[str, deque[float]] = {name: deque(maxlen=RECENT_GAMES) for name in FIXED_PLAYERS}
        self._live: OrderedDict[int, Opponent] = OrderedDict()

    def add(self, step: int) -> Member:
        """A snapshot of the learner's current weights; the oldest leaves once there are ``pool_size``."""
        member = Member(self.next_id, step, self.learner_elo)
        self.weights[member.id] = {k: v.detach().clone().cpu() for k, v in self.template.state_dict().items()}
        self.members.append(member)
        self.next_id += 1
        # a dropped snapshot finishes the games it is playing: kept until the next snapshot, at least a
        # rollout later, which is longer than a game of the turn-based games rlcli plays
        self.retired = {}
        while len(self.members) > self.cfg.pool_size:
            gone = self.members.pop(0)
            self.retired[gone.id] = self.weights.pop(gone.id)
        return member

    def pick(self, env_index: int) -> Hashable:
        if self.fixed and (self.cfg.random or self.cfg.scripted):
            draw = self.rng.random()
            for name, share in (("random", self.cfg.random), ("scripted", self.cfg.scripted)):
                if draw < share and name in self.fixed:
                    return name
                draw -= share
        newest = self.members[-1]
        if len(self.members) == 1 or self.rng.random() < self.cfg.latest:
            return newest.id
        older = self.members[:-1]
        if self.cfg.sampling == "uniform":
            return older[int(self.rng.integers(len(older)))].id
        weights = np.array([prioritized_weight(expected_score(self.learner_elo, m.elo)) for m in older])
        return older[int(self.rng.choice(len(older), p=weights / weights.sum()))].id

    def opponent(self, key: Hashable) -> Opponent:
        if key in FIXED_PLAYERS:
            return self.fixed[key]
        assert isinstance(key, int)  # else a snapshot's id, as ``pick`` returns it
        member_id = key
        if member_id not in self._live:
            policy = copy.deepcopy(self.template).cpu()
            policy.load_state_dict(self.weights.get(member_id) or self.retired[member_id])
            self._live[member_id] = PolicyOpponent(f"snapshot {member_id}", policy)
            while len(self._live) > LIVE_OPPONENTS:
                self._live.popitem(last=False)
        self._live.move_to_end(member_id)
        return self._live[member_id]

    def result(self, key: Hashable, learner_return: float) -> None:
        """Both ratings after a game against snapshot ``key`` (one since dropped counts for the learner's
        score only)."""
        score = game_score(learner_return)
        if key in FIXED_PLAYERS:
            self.recent_fixed[key].append(score)
            return
        self.recent.append(score)
        member = next((m for m in self.members if m.id == key), None)
        if member is None:
            return
        self.learner_elo, member.elo = updated(self.learner_elo, member.elo, score, self.cfg.elo_k)
        member.games += 1

    def metrics(self) -> dict[str, float]:
        """The learner's rating, the pool's size and ratings, and the learner's mean score over recent games
        (1 win, 0.5 draw, 0 loss)."""
        out = {"selfplay/elo": self.learner_elo, "selfplay/pool_size": float(len(self.members)),
               "selfplay/newest_elo": self.members[-1].elo,
               "selfplay/pool_mean_elo": float(np.mean([m.elo for m in self.members]))}
        if self.recent:
            out["selfplay/score"] = float(np.mean(self.recent))
        for name, recent in self.recent_fixed.items():
            if recent:
                out[f"selfplay/{name}_score"] = float(np.mean(recent))
        return out

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(every snapshot's weights as ``ID/NAME`` tensors, the rest as JSON values)."""
        tensors = {f"{member_id}/{name}": t for member_id, w in self.weights.items() for name, t in w.items()}
        meta = {"members": [asdict(m) for m in self.members], "learner_elo": self.learner_elo,
                "next_id": self.next_id, "recent": list(self.recent), "rng": self.rng.bit_generator.state}
        return tensors, meta

    def load(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """The pool as ``state`` returned it."""
        self.members = [Member(**m) for m in meta["members"]]
        self.learner_elo, self.next_id = float(meta["learner_elo"]), int(meta["next_id"])
        self.recent = deque(meta.get("recent", []), maxlen=RECENT_GAMES)
        self.rng.bit_generator.state = meta["rng"]
        self.weights = {m.id: {} for m in self.members}
        for key, tensor in tensors.items():
            member_id, _, name = key.partition("/")
            if int(member_id) in self.weights:
                self.weights[int(member_id)][name] = tensor
        self._live.clear()
