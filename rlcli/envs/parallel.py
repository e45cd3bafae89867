"""Simultaneous-move PettingZoo environments (the Parallel API) as a vector env of agents.

``num_envs`` copies side by side, one row per agent of each copy (env e's agent j is row e * A + j, A
agents in ``possible_agents`` order), so the rollout, GAE and truncation code stay the single-agent ones.
Every agent's observation becomes the flat row of an ``ObsLayout``: its own ``observation``, the env's
global ``state()`` (the critic's privileged input: MAPPO) and a one-hot ``agent_id`` where configured.

Agents that leave (PettingZoo's ``agents`` shrinking) keep their rows until the env's episode ends: from
the step after their last one they read as ended every step (zero observation and reward), which makes
those rows reset rows that nothing learns from. The env resets on the step after its last agent left,
with next-step semantics: that step's actions are ignored and it returns the first observations.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from rlcli.config import MultiAgentConfig
from rlcli.envs.base import StepResult
from rlcli.envs.layout import PRIVILEGED_KEY, ObsLayout, flat_space
from rlcli.errors import UsageError


class ParallelVecEnv:
    backend = "pettingzoo"

    def __init__(self, env_id: str, module: ModuleType, num_envs: int, seed: int, kwargs: dict[str, Any],
                 cfg: MultiAgentConfig, render_mode: str | None = None) -> None:
        extra = {"render_mode": render_mode} if render_mode else {}
        self.envs = [module.parallel_env(**kwargs, **extra) for _ in range(num_envs)]
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        self.agents_per_env = len(self.agents)
        obs_space, self.single_action_space = self._shared_spaces(env_id, first)
        fields = [("observation", int(np.prod(obs_space.shape)))]
        self._state = cfg.state and getattr(first, "state_space", None) is not None
        if self._state:
            fields.append((PRIVILEGED_KEY, int(np.prod(first.state_space.shape))))
        if cfg.agent_id:
            fields.append(("agent_id", self.agents_per_env))
        layout = ObsLayout(tuple(fields))
        # a plain Box observation stays one, as a single-agent env's
        self.obs_layout = layout if len(fields) > 1 else None
        self.single_observation_space = flat_space(layout)
        self.num_envs = num_envs * self.agents_per_env
        self.seed, self.render_mode = seed, render_mode
        self._obs = np.zeros((self.num_envs, layout.size), dtype=np.float32)
        self._spans = {key: layout.span(key) for key in layout.keys}
        if cfg.agent_id:
            self._obs[:, self._spans["agent_id"]] = np.tile(np.eye(self.agents_per_env, dtype=np.float32),
                                                            (num_envs, 1))
        self._over = np.zeros(num_envs, dtype=bool)
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        # the particle worlds' own env under PettingZoo's AEC-to-parallel layers, stepped directly
        worlds = [particle_world(env) for env in self.envs]
        self._worlds = worlds if all(w is not None for w in worlds) else None

    def _shared_spaces(self, env_id: str, env: Any) -> tuple[gym.spaces.Box, gym.Space]:
        spaces = {(str(env.observation_space(a)), str(env.action_space(a))) for a in self.agents}
        if len(spaces) > 1:
            raise UsageError(f"{env_id}: its agents observe or act in different spaces; rlcli trains agents "
                             "that share one policy, which needs equal spaces")
        obs_space = env.observation_space(self.agents[0])
        if not isinstance(obs_space, gym.spaces.Box):
            raise UsageError(f"{env_id}: rlcli takes Box observations from simultaneous-move environments; "
                             f"its agents observe {obs_space}")
        return obs_space, env.action_space(self.agents[0])

    def _write(self, e: int, obs: dict[str, Any], env: Any) -> None:
        """Env ``e``'s observations into its rows: absent agents read zeros."""
        a = self.agents_per_env
        rows = self._obs[e * a:(e + 1) * a]
        span = self._spans["observation"]
        for j, agent in enumerate(self.agents):
            rows[j, span] = np.asarray(obs[agent], dtype=np.float32).reshape(-1) if agent in obs else 0.0
        if self._state:
            rows[:, self._spans[PRIVILEGED_KEY]] = np.asarray(env.state(), dtype=np.float32).reshape(-1)

    def reset(self) -> np.ndarray:
        """New episodes everywhere, env e seeded with ``seed + e``."""
        for e, env in enumerate(self.envs):
            obs, _ = env.reset(seed=self.seed + e)
            self._write(e, obs, env)
        self._over[:] = False
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        a, n = self.agents_per_env, self.num_envs
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for e, env in enumerate(self.envs):
            if self._over[e]:
                obs, _ = env.reset()
                self._write(e, obs, env)
                self._over[e] = False
                continue
            base = e * a
            live = set(env.agents)
            step = {agent: self._env_action(actions[base + j]) for j, agent in enumerate(self.agents) if agent in live}
            obs, rewards, terms, truncs = (step_world(self._worlds[e], step) if self._worlds is not None
                                           else env.step(step)[:4])
            for j, agent in enumerate(self.agents):
                if agent in obs:
                    reward[base + j] = rewards.get(agent, 0.0)
                    terminated[base + j] = terms.get(agent, False)
                    truncated[base + j] = truncs.get(agent, False) and not terminated[base + j]
                else:  # gone before this step: ended, every step until the env resets
                    terminated[base + j] = True
            self._write(e, obs, env)
            self._over[e] = (not env.agents) if self._worlds is None else all(
                terms[agent] or truncs[agent] for agent in terms)
        game_over = np.repeat(self._over, a)
        return StepResult(self._obs.copy(), reward, terminated, truncated, reward.copy(), game_over)

    def _env_action(self, action: np.ndarray) -> Any:
        return int(action) if self._discrete else np.asarray(action)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> StepResult:
        return self.step(self._actions)

    def render(self) -> np.ndarray:
        return self.envs[0].render()

    @property
    def render_fps(self) -> int:
        return int(self.envs[0].metadata.get("render_fps") or 10)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def particle_world(env: Any) -> Any | None:
    """The particle-world env (mpe2's ``SimpleEnv``) under a parallel env's wrappers, or None for another env."""
    raw = getattr(getattr(env, "aec_env", None), "unwrapped", None)
    needed = ("_execute_world_step", "world", "scenario", "current_actions", "max_cycles", "_index_map")
    return raw if raw is not None and all(hasattr(raw, name) for name in needed) else None


def step_world(raw: Any, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
    """One step of a particle world with every agent's action at once: what PettingZoo's parallel step
    returns (observations, rewards, terminations, truncations), without its turn-by-turn AEC bookkeeping,
    which costs as much as the physics (mpe2's SimpleEnv.step and aec_to_parallel_wrapper.step, pinned by a
    test). Its agents all end together, at max_cycles or the scenario's terminal state."""
    for agent, action in actions.items():
        raw.current_actions[raw._index_map[agent]] = action
    raw._execute_world_step()
    raw.steps += 1
    truncated = raw.steps >= raw.max_cycles
    terminated = not truncated and bool(getattr(raw.scenario, "is_terminal", lambda world: False)(raw.world))
    agents = list(actions)
    return ({agent: raw.observe(agent) for agent in agents}, {agent: raw.rewards[agent] for agent in agents},
            dict.fromkeys(agents, terminated), dict.fromkeys(agents, truncated))
