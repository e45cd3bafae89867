"""How fast eager PyTorch runs the masked row's PPO iteration when nothing else is in the way.

The masked row of ``bench_peers.py`` asks rlcli for 3x sb3-contrib's MaskablePPO. This script writes the
same iteration out plainly, as CleanRL writes PPO: rlcli's ``MaskedChoice-v0`` entry (16 envs x 32 steps, 4
epochs of 256-row minibatches, [64, 64] tanh actor and critic), the task's vector env, masked logits, a
Gumbel-max draw, GAE, the clipped loss, gradient clipping and fused Adam, and none of rlcli's bookkeeping
(observation layout, episode records, metrics, logging, normalisers, checkpoints). It alternates that
iteration with rlcli's own, in one process, on the threads rlcli's plan gives (acting on one, updating on
the rest), and prints the median time of each side's iteration, rollout and update:

    python scripts/eager_floor.py --iterations 60

The ratio of the two iterations bounds what rlcli could gain at these shapes without compiling or fusing
its step; scripts/README.md ("What bounds the masked row") reads it.
"""

from __future__ import annotations

import argparse
import json
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


@dataclass
class Timings:
    iteration: list[float] = field(default_factory=list)
    rollout: list[float] = field(default_factory=list)  # the steps and GAE
    update: list[float] = field(default_factory=list)

    def medians_ms(self, skip: int) -> dict[str, float]:
        return {name: 1e3 * statistics.median(getattr(self, name)[skip:])
                for name in ("iteration", "rollout", "update")}


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, out_gain: float) -> nn.Sequential:
    """CleanRL's MLP: orthogonal weights (gain sqrt 2, the output layer ``out_gain``), zero biases, tanh."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(n_in, width), nn.Tanh()]
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, out_gain if i == len(linears) - 1 else 2 ** 0.5)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


class PlainPPO:
    """The written-out iteration, its rollout storage preallocated as CleanRL's."""

    def __init__(self, cfg: Any, seed: int) -> None:
        from rlcli.envs.masked import MaskedChoiceVector

        algo = self.algo = cfg.algo
        torch.manual_seed(seed)
        self.env = MaskedChoiceVector(algo.n_envs)
        self.obs, info = self.env.reset(seed=seed)
        self.mask = info["action_mask"]
        n_obs, n_actions = self.obs.shape[1], self.mask.shape[1]
        hidden = tuple(algo.network.hidden)
        self.actor, self.critic = mlp(n_obs, hidden, n_actions, 0.01), mlp(n_obs, hidden, 1, 1.0)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=algo.learning_rate, eps=algo.adam_eps, fused=True)
        shape = (algo.n_steps, algo.n_envs)
        self.b_obs = torch.zeros(*shape, n_obs)
        self.b_mask = torch.zeros(*shape, n_actions, dtype=torch.bool)
        self.b_actions = torch.zeros(shape, dtype=torch.long)
        self.b_log_probs, self.b_values = torch.zeros(shape), torch.zeros(shape)
        self.b_rewards, self.b_dones = torch.zeros(shape), torch.zeros(shape)
        self.b_terminated = torch.zeros(shape)
        self.returns: list[float] = []  # finished episodes' returns
        self._running = np.zeros(algo.n_envs)

    @torch.no_grad()
    def rollout(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, returns) of a new rollout, [n_steps, n_envs]."""
        algo = self.algo
        for t in range(algo.n_steps):
            obs, mask = torch.from_numpy(self.obs), torch.from_numpy(self.mask).bool()
            logp = F.log_softmax(self.actor(obs).masked_fill(~mask, MASKED_LOGIT), -1)
            action = (logp - torch.log(-torch.log(torch.rand_like(logp)))).argmax(-1)
            value = self.critic(obs).squeeze(-1)
            self.obs, reward, terminated, truncated, info = self.env.step(action.numpy())
            self.mask = info["action_mask"]
            done = terminated | truncated
            self.b_obs[t], self.b_mask[t], self.b_actions[t] = obs, mask, action
            self.b_log_probs[t] = logp.gather(-1, action[:, None])[:, 0]
            self.b_values[t] = value
            self.b_rewards[t] = torch.from_numpy(reward)
            self.b_terminated[t], self.b_dones[t] = torch.from_numpy(terminated), torch.from_numpy(done)
            self._count_episodes(reward, done)
        next_value = self.critic(torch.from_numpy(self.obs)).squeeze(-1)
        return self._gae(next_value)

    def _count_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        self._running += reward
        self.returns.extend(self._running[done].tolist())
        self._running[done] = 0.0

    def _gae(self, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE with the task's next-step auto-reset: the value after a step that ended an episode is that
        of its final observation (a truncation bootstraps from it, a termination does not), and the
        recursion stops there."""
        algo = self.algo
        advantages, last = torch.zeros_like(self.b_rewards), torch.zeros(algo.n_envs)
        for t in reversed(range(algo.n_steps)):
            following = next_value if t == algo.n_steps - 1 else self.b_values[t + 1]
            delta = self.b_rewards[t] + algo.gamma * following * (1.0 - self.b_terminated[t]) - self.b_values[t]
            last = delta + algo.gamma * algo.gae_lambda * (1.0 - self.b_dones[t]) * last
            advantages[t] = last
        return advantages, advantages + self.b_values

    def update(self, advantages: torch.Tensor, returns: torch.Tensor) -> None:
        algo = self.algo
        rows = [t.flatten(0, 1) for t in (self.b_obs, self.b_mask, self.b_actions, self.b_log_probs,
                                            advantages, returns)]
        for _ in range(algo.n_epochs):
            for index in torch.randperm(algo.batch_size).split(algo.minibatch_size):
                obs, mask, actions, old_log_probs, adv, ret = (t[index] for t in rows)
                logp = F.log_softmax(self.actor(obs).masked_fill(~mask, MASKED_LOGIT), -1)
                ratio = (logp.gather(-1, actions[:, None])[:, 0] - old_log_probs).exp()
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = ratio.clamp(1.0 - algo.clip_range, 1.0 + algo.clip_range)
                policy_loss = torch.max(-adv * ratio, -adv * clipped).mean()
                value_loss = 0.5 * (self.critic(obs).squeeze(-1) - ret).square().mean()
                loss = policy_loss + algo.vf_coef * value_loss
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.params, algo.max_grad_norm, foreach=True)
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


def measure(iterations: int, seed: int, skip: int = 5) -> dict[str, Any]:
    """Both sides' median times (ms) over ``iterations`` iterations each, alternating, after ``skip``; and
    the written-out loop's mean return over its last 100 finished episodes."""
    from rlcli.algos import resolve
    from rlcli.allocator import retain_freed_memory
    from rlcli.train import close, set_up

    retain_freed_memory()
    torch.set_flush_denormal(True)
    cfg = resolve("ppo", ENV_ID, backend="gymnasium", overrides={}, seed=seed, device="cpu", eval_every=0)
    with tempfile.TemporaryDirectory(prefix="eager-floor-") as tmp:
        session = set_up(cfg, Path(tmp) / "run", [], None, False, False)
        collector, agent, plan = session.learner.collector, session.agent, session.learner.plan
        plain, sides = PlainPPO(cfg, seed), {"plain": Timings(), "rlcli": Timings()}
        try:
            for i in range(iterations):
                timed_iteration(plain.rollout, lambda data: plain.update(*data), plan, sides["plain"])
                timed_iteration(lambda: collector.collect().batch(cfg.algo.gamma, cfg.algo.gae_lambda),
                                lambda batch, i=i: agent.update(batch, progress=i / iterations), plan, sides["rlcli"])
        finally:
            close(session)
    result: dict[str, Any] = {name: timings.medians_ms(skip) for name, timings in sides.items()}
    result["speedup"] = result["rlcli"]["iteration"] / result["plain"]["iteration"]
    result["plain_return"] = float(np.mean(plain.returns[-100:])) if plain.returns else float("nan")
    result["threads"] = {"acting": plan.acting, "updating": plan.updating}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=60, help="iterations of each side (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the result here")
    opts = parser.parse_args(argv)
    result = measure(opts.iterations, opts.seed)
    print(f"{ENV_ID}, {opts.iterations} iterations a side, medians (ms):")
    print(f"{'':8s} {'iteration':>10s} {'rollout':>10s} {'update':>10s}")
    for side in ("plain", "rlcli"):
        row = result[side]
        print(f"{side:8s} {row['iteration']:10.2f} {row['rollout']:10.2f} {row['update']:10.2f}")
    print(f"the written-out iteration runs {result['speedup']:.2f}x rlcli's; its last 100 episodes returned "
          f"{result['plain_return']:.1f} on average")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
