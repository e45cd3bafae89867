"""How PPO's epochs walk a rollout: rows (or, for a recurrent policy, whole env sequences) in a new random
order each epoch, a minibatch's worth at a time; with several processes, each takes its share of as many
minibatches as one process would make of all their rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import torch
from torch import nn

from rlcli.algos.buffers import RolloutBatch, SequenceBatch
from rlcli.algos.ppo.schedule import LearningRate
from rlcli.algos.world import World

Rows = tuple[torch.Tensor, ...]


def sequence_rows(batch: SequenceBatch, envs: torch.Tensor) -> Rows:
    """The whole rollout sequences of the envs ``envs`` (a ``SequenceBatch``'s fields, env-indexed)."""
    return tuple(t.index_select(1, envs) for t in batch[:8]) + (batch.state.index_select(0, envs),)


def evaluated(net: nn.Module, rows: Rows, precision: AbstractContextManager) -> Rows:
    """(log_probs, entropy, values) of a minibatch's rows under the current network, then the rollout's
    (log_probs, values, advantages, returns) of the same rows; a sequence minibatch is replayed from its
    stored state, and only its valid rows kept."""
    if len(rows) == 6:
        obs, actions, old_log_probs, old_values, advantages, returns = rows
        with precision:
            log_probs, entropy, values = net.evaluate(obs, actions)
        return log_probs, entropy, values, old_log_probs, old_values, advantages, returns
    obs, actions, old_log_probs, old_values, advantages, returns, valid, starts, state = rows
    with precision:
        log_probs, entropy, values = net.replay(obs, actions, state, starts)
    keep = valid.flatten().nonzero().squeeze(-1)
    return tuple(t.flatten(0, 1).index_select(0, keep) for t in (
        log_probs, entropy, values, old_log_probs, old_values, advantages, returns))


class Minibatches:
    """The minibatches of each epoch over one rollout, ``minibatch_size`` rows (``minibatch_size / n_steps``
    env sequences) each."""

    def __init__(self, minibatch_size: int, n_steps: int, world: World, device: torch.device) -> None:
        self.minibatch_size, self.n_steps, self.world, self.device = minibatch_size, n_steps, world, device

    def epochs(self, batch: RolloutBatch | SequenceBatch, n_epochs: int
               ) -> Iterator[Iterator[tuple[torch.Tensor, Rows]]]:
        """Each epoch's minibatches as (their row or env indices in the rollout, their rows): rows as the
        rollout holds them (a ``RolloutBatch``'s fields), sequences as a ``SequenceBatch``'s first eight
        fields and the state."""
        if isinstance(batch, SequenceBatch):
            n, size = batch.obs.shape[1], self.minibatch_size // self.n_steps
        else:
            n, size = batch.obs.shape[0], self.minibatch_size
        count = self.count(n, size)
        for _ in range(n_epochs):
            yield self.epoch(batch, n, size, count)

    def train(self, batch: RolloutBatch | SequenceBatch, n_epochs: int,
              step: Callable[[Rows, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]], lr: LearningRate,
              previous_epoch: bool = False) -> torch.Tensor:
        """``step`` on each minibatch of ``n_epochs`` epochs, the learning rate adapted to the KL after each
        minibatch or epoch as ``lr`` says; returns the steps' summed statistics (``step``'s first output:
        policy loss, value loss, entropy, KL, clip fraction, 1), on the device. ``step`` also returns its
        rows' log-probabilities before it stepped; with ``previous_epoch`` (rows, not sequences) each row's
        are kept and given to its next step, one epoch later, as the policy its KL is measured from (the
        rollout's in the first epoch); otherwise it is given None."""
        sums = torch.zeros(6, device=self.device)
        kept = batch.log_probs.clone() if previous_epoch else None
        for epoch in self.epochs(batch, n_epochs):
            epoch_kl, steps = torch.zeros((), device=self.device), 0
            for index, rows in epoch:
                stats, log_probs = step(rows, None if kept is None else kept.index_select(0, index))
                if kept is not None:
                    kept.index_copy_(0, index, log_probs.to(kept.dtype))
                sums += stats
                epoch_kl += stats[3]
                steps += 1
                if lr.adapt_every == "minibatch":
                    lr.adapt(stats[3], 1)
            if lr.adapt_every == "epoch":
                lr.adapt(epoch_kl, steps)
        return sums

    def count(self, n: int, size: int) -> int | None:
        """Minibatches per epoch where several processes split each (None for one process): as many as one
        process would make of all their rows (or sequences), ``size`` each."""
        if self.world.size == 1:
            return None
        total = int(self.world.sum_(torch.tensor(float(n))).item())
        return max(-(-total // size), 1)

    def epoch(self, batch: RolloutBatch | SequenceBatch, n: int, size: int, count: int | None
              ) -> Iterator[tuple[torch.Tensor, Rows]]:
        """Each minibatch of an epoch (its indices, its rows), the rows (or env sequences) in a new random
        order."""
        chunks = self.draw(n, size, count)
        if isinstance(batch, SequenceBatch):
            for index in chunks:
                yield index, sequence_rows(batch, index)
            return
        # the epoch's rows gathered once per tensor, each minibatch a slice of them
        shuffled = [t.index_select(0, torch.cat(chunks)) for t in batch]
        start = 0
        for index in chunks:
            yield index, tuple(t[start:start + len(index)] for t in shuffled)
            start += len(index)

    def draw(self, n: int, size: int, count: int | None) -> Rows:
        """The row (or env) indices of each minibatch of an epoch, in a new random order: ``size`` each, or
        this process's share of ``count`` minibatches split between processes."""
        order = torch.randperm(n, device=self.device)
        return order.split(size) if count is None else order.tensor_split(count)
