"""What each process of the distributed tests runs (a module of its own, for multiprocessing's spawn to import):
one PPO update by two processes, and the same update by one process over both processes' rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rlcli.algos.buffers import RolloutBatch
from rlcli.algos.ppo import PPO, PPOConfig
from rlcli.algos.world import SINGLE, join

ENVS, STEPS = 4, 16  # each process's rollout
CONFIG = {"n_steps": STEPS, "minibatch_size": 32, "n_epochs": 3, "learning_rate": 1e-3, "lr_schedule": "adaptive_kl",
          "kl_target": 5e-4, "normalize_obs": True, "normalize_reward": True, "normalize_value": True,
          "ent_coef": 0.01}
OBS, ACTIONS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(3)


def transitions(envs: int) -> dict[str, torch.Tensor]:
    """A rollout's worth of made-up transitions for ``envs`` envs, [STEPS, envs, ...], the same in every process."""
    g = torch.Generator().manual_seed(0)
    return {"raw_obs": torch.randn(STEPS, envs, 4, generator=g) * 3 + 1,
            "obs": torch.randn(STEPS, envs, 4, generator=g),
            "actions": torch.randint(0, 3, (STEPS, envs, 1), generator=g),
            "rewards": torch.rand(STEPS, envs, generator=g),
            "dones": torch.rand(STEPS, envs, generator=g) < 0.1,
            "advantages": torch.randn(STEPS, envs, generator=g)}


def agent_that_saw(data: dict[str, torch.Tensor], envs: slice, world=SINGLE) -> tuple[PPO, RolloutBatch]:
    """A new agent (seed 0) whose normalisers saw ``envs``' raw observations and rewards step by step, as the
    collector feeds them, and the rollout batch of those envs, under the initial policy."""
    n = len(range(*envs.indices(data["obs"].shape[1])))
    torch.manual_seed(0)
    agent = PPO(PPOConfig(n_envs=n, **CONFIG), OBS, ACTIONS, n, torch.device("cpu"), world=world)
    for t in range(STEPS):
        agent.observe(data["raw_obs"][t, envs])
        agent.scale_rewards(data["rewards"][t, envs], data["dones"][t, envs])
    obs, actions = data["obs"][:, envs].flatten(0, 1), data["actions"][:, envs].flatten(0, 1)
    with torch.no_grad():
        log_probs, _, values = agent.net.evaluate(obs, actions)
    advantages = data["advantages"][:, envs].flatten(0, 1)
    return agent, RolloutBatch(obs, actions, log_probs, values, advantages, values + advantages)


def recorded(agent: PPO) -> dict[str, list]:
    """Records the minibatches the agent draws (one list per epoch) and every learning rate it sets."""
    seen: dict[str, list] = {"plans": [], "rates": []}
    draw, set_lr = agent.minibatches.draw, agent.lr.apply

    def minibatches(n: int, size: int, count: int | None) -> tuple[torch.Tensor, ...]:
        chunks = draw(n, size, count)
        seen["plans"].append([c.clone() for c in chunks])
        return chunks

    def rate(lr: float) -> None:
        seen["rates"].append(lr)
        set_lr(lr)

    agent.minibatches.draw, agent.lr.apply = minibatches, rate  # type: ignore[method-assign]
    return seen


def one_update_by_two(rank: int, port: int, out: str) -> None:
    """Process ``rank`` of two: one update over its envs' rows; the lead then makes the same update in one
    process over both processes' rows, drawn in the same minibatches, and writes what it found to ``out``."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    world = join()
    data = transitions(2 * ENVS)
    agent, batch = agent_that_saw(data, slice(rank * ENVS, (rank + 1) * ENVS), world)
    seen = recorded(agent)
    metrics = agent.update(batch, progress=0.25)
    gathered = world.to_lead({"model": agent.state_dict(), "stats": [agent.obs_norm.rms.state_dict(),
                                                                      agent.reward_scaler.rms.state_dict()],
                              "rates": seen["rates"], "plans": seen["plans"], "metrics": metrics})
    world.close()
    if gathered is None:
        return
    reference, _ = agent_that_saw(data, slice(None))  # its normalisers saw every env, each step
    parts = [agent_that_saw(data, slice(r * ENVS, (r + 1) * ENVS))[1] for r in range(2)]
    whole = RolloutBatch(*(torch.cat(rows) for rows in zip(*parts, strict=True)))  # process 0's rows, then 1's
    ref_seen = recorded(reference)
    rows = batch.obs.shape[0]
    plans = iter([[torch.cat([a, b + rows]) for a, b in zip(p0, p1, strict=True)]
                  for p0, p1 in zip(gathered[0]["plans"], gathered[1]["plans"], strict=True)])
    reference.minibatches.draw = lambda n, size, count: next(plans)  # type: ignore[method-assign]
    ref_metrics = reference.update(whole, progress=0.25)
    ref_model, ref_stats = reference.state_dict(), [reference.obs_norm.rms.state_dict(),
                                                    reference.reward_scaler.rms.state_dict()]

    def largest(a: dict, b: dict, relative: bool = False) -> float:
        """The largest difference between two state dicts' entries (relative to ``b``'s)."""
        scale = {k: b[k].double().abs() + 1e-30 if relative else 1.0 for k in b}
        return max(float(((a[k].double() - b[k].double()).abs() / scale[k]).max()) for k in a)

    Path(out).write_text(json.dumps({
        "processes_equal": all(torch.equal(gathered[0]["model"][k], gathered[1]["model"][k]) for k in ref_model),
        "largest_weight_difference": largest(gathered[0]["model"], ref_model),
        "largest_weight_change": largest(ref_model, agent_that_saw(data, slice(None))[0].state_dict()),
        "stats_equal_between_processes": all(torch.equal(a[k], b[k]) for a, b in zip(*[g["stats"] for g in gathered],
                                                                                     strict=True) for k in a),
        "largest_stats_relative_difference": max(largest(a, b, True) for a, b in zip(gathered[0]["stats"], ref_stats,
                                                                                   strict=True)),
        "rates": [g["rates"] for g in gathered], "reference_rates": ref_seen["rates"],
        "metrics": gathered[0]["metrics"], "reference_metrics": ref_metrics,
        "minibatches_per_epoch": [len(p) for p in gathered[0]["plans"]],
    }, indent=1))


def thread_names() -> list[str]:
    """The names of this process's threads, as Linux shows them (gloo's are gloo_tcp_loop, pt_gloo_runloop)."""
    return sorted(task.read_text().strip() for task in Path("/proc/self/task").glob("*/comm"))


def threads_of_a_closed_world(rank: int, port: int, out: str) -> None:
    """Process ``rank`` of two: its threads' names after the world's collectives and after it closed, written to
    ``out``.RANK as {"open": [...], "closed": [...]}."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    world = join()
    world.from_lead({"step": 1})
    world.flags(False, rank == 1)
    world.sum_(torch.ones(3))
    open_threads = thread_names()
    world.close()
    Path(f"{out}.{rank}").write_text(json.dumps({"open": open_threads, "closed": thread_names()}))
