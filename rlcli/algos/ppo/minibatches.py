"""How PPO's epochs walk a rollout: rows (or, for a recurrent policy, whole env sequences) in a new random
order each epoch, a minibatch's worth at a time; with several processes, each takes its share of as many
minibatches as one process would make of all their rows."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from rlcli.algos.buffers import RolloutBatch, SequenceBatch
from rlcli.algos.world import World

Rows = tuple[torch.Tensor, ...]


def sequence_rows(batch: SequenceBatch, envs: torch.Tensor) -> Rows:
    """The whole rollout sequences of the envs ``envs`` (a ``SequenceBatch``'s fields, env-indexed)."""
    return tuple(t.index_select(1, envs) for t in batch[:8]) + (batch.state.index_select(0, envs),)


class Minibatches:
    """The minibatches of each epoch over one rollout, ``minibatch_size`` rows (``minibatch_size / n_steps``
    env sequences) each."""

    def __init__(self, minibatch_size: int, n_steps: int, world: World, device: torch.device) -> None:
        self.minibatch_size, self.n_steps, self.world, self.device = minibatch_size, n_steps, world, device

    def epochs(self, batch: RolloutBatch | SequenceBatch, n_epochs: int) -> Iterator[Iterator[Rows]]:
        """Each epoch's minibatches: rows as the rollout holds them (a ``RolloutBatch``'s fields), sequences
        as a ``SequenceBatch``'s first eight fields and the state."""
        if isinstance(batch, SequenceBatch):
            n, size = batch.obs.shape[1], self.minibatch_size // self.n_steps
        else:
            n, size = batch.obs.shape[0], self.minibatch_size
        count = self.count(n, size)
        for _ in range(n_epochs):
            yield self.epoch(batch, n, size, count)

    def count(self, n: int, size: int) -> int | None:
        """Minibatches per epoch where several processes split each (None for one process): as many as one
        process would make of all their rows (or sequences), ``size`` each."""
        if self.world.size == 1:
            return None
        total = int(self.world.sum_(torch.tensor(float(n))).item())
        return max(-(-total // size), 1)

    def epoch(self, batch: RolloutBatch | SequenceBatch, n: int, size: int, count: int | None
              ) -> Iterator[Rows]:
        """Each minibatch of an epoch, the rows (or env sequences) in a new random order."""
        chunks = self.draw(n, size, count)
        if isinstance(batch, SequenceBatch):
            for index in chunks:
                yield sequence_rows(batch, index)
            return
        # the epoch's rows gathered once per tensor, each minibatch a slice of them
        shuffled = [t.index_select(0, torch.cat(chunks)) for t in batch]
        start = 0
        for index in chunks:
            yield tuple(t[start:start + len(index)] for t in shuffled)
            start += len(index)

    def draw(self, n: int, size: int, count: int | None) -> Rows:
        """The row (or env) indices of each minibatch of an epoch, in a new random order: ``size`` each, or
        this process's share of ``count`` minibatches split between processes."""
        order = torch.randperm(n, device=self.device)
        return order.split(size) if count is None else order.tensor_split(count)
