"""How fast a lean eager-PyTorch loop runs the masked row's PPO iteration, against rlcli's own.

The masked row of ``bench_peers.py`` asks rlcli for 3x sb3-contrib's MaskablePPO. This script writes the
same iteration out as one plain loop: rlcli's ``MaskedChoice-v0`` entry (16 envs x 32 steps, 4 epochs of
256-row minibatches, [64, 64] tanh actor and critic, the linear learning-rate schedule), the task's vector
env, masked logits, a Gumbel-max draw, the reset rows of the next-step auto-reset left out of the update,
GAE, the clipped loss, gradient clipping and Adam. It keeps every speed-up of rlcli's that is not
bookkeeping (layers called as functions, GAE's numpy scan, one gather a tensor an epoch, rlcli's fused
Adam and clipping) and drops the rest (observation layout and mask checks, episode records for the
display, metrics, logging, normalisers, checkpoints). It alternates that iteration with rlcli's in one
process, each side on rlcli's thread plan (acting on one thread, updating on every core), and prints the
median time of each side's iteration, rollout and update:

    python scripts/eager_floor.py --iterations 60

scripts/README.md ("What bounds the masked row") reads the ratio of the two iterations.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ENV_ID = "MaskedChoice-v0"
MASKED_LOGIT = -1e8
SKIP = 5  # first iterations of each side left out of the medians (first calls, allocations)


@dataclass
class Timings:
    iteration: list[float] = field(default_factory=list)
    rollout: list[float] = field(default_factory=list)  # the steps and GAE
    update: list[float] = field(default_factory=list)

    def medians_ms(self) -> dict[str, float]:
        """Median milliseconds of each part, the first ``SKIP`` iterations left out."""
        return {name: 1e3 * statistics.median(getattr(self, name)[SKIP:])
                for name in ("iteration", "rollout", "update")}


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, out_gain: float, generator: torch.Generator
        ) -> list[tuple[nn.Parameter, nn.Parameter]]:
    """(weight, bias) of each layer, orthogonal (gain sqrt 2, the last ``out_gain``) with zero biases."""
    layers = []
    for i, width in enumerate([*hidden, n_out]):
        weight = torch.empty(width, n_in)
        nn.init.orthogonal_(weight, out_gain if i == len(hidden) else math.sqrt(2), generator=generator)
        layers.append((nn.Parameter(weight), nn.Parameter(torch.zeros(width))))
        n_in = width
    return layers


def forward(layers: list[tuple[nn.Parameter, nn.Parameter]], x: torch.Tensor) -> torch.Tensor:
    """The MLP, tanh between layers, each layer a function call (no module calls)."""
    for i, (weight, bias) in enumerate(layers):
        x = F.linear(x, weight, bias)
        if i < len(layers) - 1:
            x = torch.tanh(x)
    return x


class EntryChanged(ValueError):
    """The task's entry asks for something the lean loop does not do."""


def entry_mismatches(cfg: Any) -> list[str]:
    """The settings of the task's entry that the lean loop does not implement (it would then time another
    algorithm than rlcli's)."""
    algo, net = cfg.algo, cfg.algo.network
    expected = {"ent_coef": (algo.ent_coef, 0.0), "clip_value": (algo.clip_value, None),
                "clip_range_schedule": (algo.clip_range_schedule, "constant"),
                "normalize_advantage": (algo.normalize_advantage, True), "normalize_obs": (algo.normalize_obs, False),
                "normalize_reward": (algo.normalize_reward, False), "lr_schedule": (algo.lr_schedule.value, "linear"),
                "precision": (algo.precision, "fp32"), "network.activation": (net.activation, "tanh"),
                "network.shared": (net.shared, False), "network.recurrent": (net.recurrent, None),
                "network.ortho_init": (net.ortho_init, True)}
    return [f"{name} is {value!r} (the lean loop has {want!r})" for name, (value, want) in expected.items()
            if value != want]


class LeanPPO:
    """The written-out iteration. Its random numbers come from a generator of its own, so that its run does
    not depend on how many rlcli draws from torch's."""

    def __init__(self, cfg: Any, seed: int) -> None:
        from rlcli.envs.masked import MaskedChoiceVector
        from rlcli.optim import Adam

        algo = self.algo = cfg.algo
        self.generator = torch.Generator().manual_seed(seed)
        self.env = MaskedChoiceVector(algo.n_envs)
        self.obs, info = self.env.reset(seed=seed)
        self.mask = info["action_mask"]
        n_obs, n_actions, hidden = self.obs.shape[1], self.mask.shape[1], tuple(algo.network.hidden)
        self.actor = mlp(n_obs, hidden, n_actions, 0.01, self.generator)
        self.critic = mlp(n_obs, hidden, 1, 1.0, self.generator)
        self.optimizer = Adam([p for layer in self.actor + self.critic for p in layer], lr=algo.learning_rate,
                              eps=algo.adam_eps)
        shape = (algo.n_steps, algo.n_envs)
        self.b_obs, self.b_mask = torch.zeros(*shape, n_obs), torch.zeros(*shape, n_actions, dtype=torch.bool)
        self.b_actions = torch.zeros(shape, dtype=torch.long)
        self.b_log_probs, self.b_values = torch.zeros(shape), torch.zeros(algo.n_steps + 1, algo.n_envs)
        self.b_rewards = torch.zeros(shape)
        self.b_terminated, self.b_dones, self.b_valid = (torch.zeros(shape, dtype=torch.bool) for _ in range(3))
        self.prev_done = np.zeros(algo.n_envs, dtype=bool)  # the next row is a reset row, its action ignored
        self.returns: list[float] = []  # finished episodes' returns
        self._running = np.zeros(algo.n_envs)

    @torch.no_grad()
    def rollout(self) -> tuple[torch.Tensor, ...]:
        """A new rollout's valid rows: (obs, masks, actions, log-probabilities, advantages, returns)."""
        from rlcli.buffers import compute_gae

        algo = self.algo
        for t in range(algo.n_steps):
            obs, mask = torch.from_numpy(self.obs), torch.from_numpy(self.mask).bool()
            logp = F.log_softmax(forward(self.actor, obs).masked_fill(~mask, MASKED_LOGIT), -1)
            noise = torch.rand(logp.shape, generator=self.generator)
            action = (logp - torch.log(-torch.log(noise))).argmax(-1)
            self.b_values[t] = forward(self.critic, obs).squeeze(-1)
            self.obs, reward, terminated, truncated, info = self.env.step(action.numpy())
            self.mask, done = info["action_mask"], terminated | truncated
            self.b_obs[t], self.b_mask[t], self.b_actions[t] = obs, mask, action
            self.b_log_probs[t] = logp.gather(-1, action[:, None])[:, 0]
            self.b_rewards[t] = torch.from_numpy(reward)
            self.b_terminated[t], self.b_dones[t] = torch.from_numpy(terminated), torch.from_numpy(done)
            self.b_valid[t] = torch.from_numpy(~self.prev_done)
            self.prev_done = done
            self._running += reward
            self.returns.extend(self._running[done].tolist())
            self._running[done] = 0.0
        self.b_values[-1] = forward(self.critic, torch.from_numpy(self.obs)).squeeze(-1)
        advantages = compute_gae(rewards=self.b_rewards, values=self.b_values, terminated=self.b_terminated,
                                 dones=self.b_dones, gamma=algo.gamma, gae_lambda=algo.gae_lambda)
        keep = self.b_valid.flatten().nonzero().squeeze(-1)
        return tuple(t.flatten(0, 1).index_select(0, keep) for t in (
            self.b_obs, self.b_mask, self.b_actions, self.b_log_probs, advantages, advantages + self.b_values[:-1]))

    def update(self, rows: tuple[torch.Tensor, ...], progress: float) -> None:
        """Minibatch epochs over the rollout's rows, the learning rate at ``progress`` of its schedule."""
        algo = self.algo
        self.optimizer.lr = algo.learning_rate * max(1.0 - progress, 0.0)
        for _ in range(algo.n_epochs):
            order = torch.randperm(len(rows[0]), generator=self.generator)
            shuffled = [t.index_select(0, order) for t in rows]
            for start in range(0, len(order), algo.minibatch_size):
                obs, mask, actions, old_log_probs, adv, ret = (t[start:start + algo.minibatch_size] for t in shuffled)
                logp = F.log_softmax(forward(self.actor, obs).masked_fill(~mask, MASKED_LOGIT), -1)
                ratio = (logp.gather(-1, actions[:, None])[:, 0] - old_log_probs).exp()
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = ratio.clamp(1.0 - algo.clip_range, 1.0 + algo.clip_range)
                policy_loss = torch.max(-adv * ratio, -adv * clipped).mean()
                value_loss = 0.5 * (forward(self.critic, obs).squeeze(-1) - ret).square().mean()
                self.optimizer.zero_grad()
                (policy_loss + algo.vf_coef * value_loss).backward()
                self.optimizer.clip_grad_norm_(algo.max_grad_norm)
                self.optimizer.step()


def timed_iteration(rollout: Callable[[], Any], update: Callable[[Any], None], plan: Any, timings: Timings) -> None:
    """One iteration, the rollout on the plan's acting threads and the update on its updating ones."""
    from rlcli.threads import torch_threads

    start = time.perf_counter()
    with torch_threads(plan.acting):
        data = rollout()
    middle = time.perf_counter()
    with torch_threads(plan.updating):
        update(data)
    end = time.perf_counter()
    timings.iteration.append(end - start)
    timings.rollout.append(middle - start)
    timings.update.append(end - middle)


def measure(iterations: int, seed: int) -> dict[str, Any]:
    """Each side's median times (ms) over ``iterations`` iterations, the two alternating (in turn first),
    the ratio of their iterations, the written-out loop's mean return over its last 100 episodes, and the
    thread plan."""
    from rlcli.algos import resolve
    from rlcli.allocator import retain_freed_memory
    from rlcli.train import close, set_up

    # the process settings rlcli's training runs under (rlcli.train.run)
    retain_freed_memory()
    torch.set_flush_denormal(True)
    cfg = resolve("ppo", ENV_ID, backend="gymnasium", overrides={}, seed=seed, device="cpu", eval_every=0)
    mismatches = entry_mismatches(cfg)
    if mismatches:
        raise EntryChanged(f"{ENV_ID}'s entry has changed: " + "; ".join(mismatches))
    sides = {"lean": Timings(), "rlcli": Timings()}
    with tempfile.TemporaryDirectory(prefix="eager-floor-") as tmp:
        session = set_up(cfg, Path(tmp) / "run", [], None, False, False)
        collector, agent, plan = session.learner.collector, session.agent, session.learner.plan
        lean = None
        try:
            lean = LeanPPO(cfg, seed)
            for i in range(iterations):
                progress = i / iterations
                runs = {
                    "lean": lambda p=progress: timed_iteration(lean.rollout, lambda rows: lean.update(rows, p),
                                                               plan, sides["lean"]),
                    "rlcli": lambda p=progress: timed_iteration(
                        lambda: collector.collect().batch(cfg.algo.gamma, cfg.algo.gae_lambda),
                        lambda batch: agent.update(batch, progress=p), plan, sides["rlcli"]),
                }
                for name in (("lean", "rlcli") if i % 2 == 0 else ("rlcli", "lean")):
                    runs[name]()
        finally:
            close(session)
            if lean is not None:
                lean.env.close()
    result: dict[str, Any] = {name: timings.medians_ms() for name, timings in sides.items()}
    result["speedup"] = result["rlcli"]["iteration"] / result["lean"]["iteration"]
    result["lean_return"] = float(np.mean(lean.returns[-100:])) if lean.returns else math.nan
    result["threads"] = {"acting": plan.acting, "updating": plan.updating}
    return result


def main(argv: list[str] | None = None) -> int:
    """Prints the two sides' medians and their ratio (argparse exits with 2 on bad arguments)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=60,
                        help=f"iterations of each side, more than {SKIP} (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the result here")
    opts = parser.parse_args(argv)
    if opts.iterations <= SKIP:
        parser.error(f"--iterations must be more than {SKIP}, the iterations left out as warm-up")
    try:
        result = measure(opts.iterations, opts.seed)
    except EntryChanged as error:
        parser.error(str(error))
    threads = result["threads"]
    print(f"{ENV_ID}, {opts.iterations} iterations a side, acting on {threads['acting']} thread(s), updating "
          f"on {threads['updating']}; medians (ms):")
    print(f"{'':8s} {'iteration':>10s} {'rollout':>10s} {'update':>10s}")
    for side in ("lean", "rlcli"):
        row = result[side]
        print(f"{side:8s} {row['iteration']:10.2f} {row['rollout']:10.2f} {row['update']:10.2f}")
    print(f"the lean loop's iteration runs {result['speedup']:.2f}x rlcli's; its last 100 episodes returned "
          f"{result['lean_return']:.1f} on average")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
