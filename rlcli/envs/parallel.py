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
from rlcli.envs.layout import GROUP_KEY, PRIVILEGED_KEY, AgentGroup, ObsLayout, flat_space
from rlcli.envs.spread import SpreadWorlds
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
        self._group_of, groups, widths, self.single_action_space = agent_groups(env_id, first, self.agents)
        self._state = cfg.state and getattr(first, "state_space", None) is not None
        layout = flat_layout(groups, widths, int(np.prod(first.state_space.shape)) if self._state else None,
                             self.agents_per_env if cfg.agent_id else None)
        # a plain Box observation stays one, as a single-agent env's
        self.obs_layout = layout if len(layout.fields) > 1 else None
        self.single_observation_space = flat_space(layout)
        self.num_envs = num_envs * self.agents_per_env
        self.seed, self.render_mode = seed, render_mode
        self._obs = np.zeros((self.num_envs, layout.size), dtype=np.float32)
        self._spans = {key: layout.span(key) for key in layout.keys}
        # the columns each agent's observation goes to, and the constant ones: agent id, group, action mask
        self._agent_span = [self._spans[groups[g].obs_key] if groups else self._spans["observation"]
                            for g in self._group_of]
        rows = self._obs.reshape(num_envs, self.agents_per_env, -1)
        if cfg.agent_id:
            rows[:, :, self._spans["agent_id"]] = np.eye(self.agents_per_env, dtype=np.float32)
        for j, g in enumerate(self._group_of if groups else []):
            rows[:, j, self._spans[GROUP_KEY].start + g] = 1.0
            rows[:, j, self._spans[groups[g].mask_key]] = 1.0
        self._over = np.zeros(num_envs, dtype=bool)
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        # the particle worlds' own env under PettingZoo's AEC-to-parallel layers, stepped directly
        worlds = [particle_world(env) for env in self.envs]
        self._worlds = worlds if all(w is not None for w in worlds) else None
        # simple_spread's copies as arrays, stepped together (rlcli.envs.spread)
        self._batch = SpreadWorlds(worlds) if self._worlds is not None and SpreadWorlds.fits(worlds) else None

    def _write(self, e: int, obs: dict[str, Any], env: Any) -> None:
        """Env ``e``'s observations into its rows: absent agents read zeros."""
        a = self.agents_per_env
        rows = self._obs[e * a:(e + 1) * a]
        for j, agent in enumerate(self.agents):
            span = self._agent_span[j]
            rows[j, span] = np.asarray(obs[agent], dtype=np.float32).reshape(-1) if agent in obs else 0.0
        if self._state:
            rows[:, self._spans[PRIVILEGED_KEY]] = np.asarray(env.state(), dtype=np.float32).reshape(-1)

    def reset(self) -> np.ndarray:
        """New episodes everywhere, env e seeded with ``seed + e``."""
        for e, env in enumerate(self.envs):
            obs, _ = env.reset(seed=self.seed + e)
            self._write(e, obs, env)
            if self._batch is not None:
                self._batch.load(e, self._worlds[e])
        self._over[:] = False
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        if self._batch is not None:
            return self._step_batch(actions)
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

    def _step_batch(self, actions: np.ndarray) -> StepResult:
        """``step`` with every world stepped as arrays: the envs whose episode ended last step start a new
        one through mpe2 (and are read back in); the others step together. mpe2's world objects then hold
        each episode's first state only: nothing reads them (rendering keeps mpe2's step), and one group
        of agents (``SpreadWorlds.fits``) has one observation span."""
        a, worlds = self.agents_per_env, len(self.envs)
        starting = self._over.copy()
        rewards, ended = self._batch.step(np.asarray(actions).reshape(worlds, a))
        stepped = ~starting
        rows = self._obs.reshape(worlds, a, -1)
        obs = self._batch.observations()[stepped]
        rows[stepped, :, self._agent_span[0]] = obs
        if self._state:
            rows[stepped, :, self._spans[PRIVILEGED_KEY]] = obs.reshape(len(obs), 1, a * obs.shape[-1])
        for e in np.flatnonzero(starting):
            obs_e, _ = self.envs[e].reset()
            self._write(e, obs_e, self.envs[e])
            self._batch.load(e, self._worlds[e])
        reward = np.where(stepped[:, None], rewards, 0.0).astype(np.float32).reshape(-1)
        truncated = np.repeat(ended & stepped, a)
        self._over = ended & stepped
        game_over = np.repeat(self._over, a)
        return StepResult(self._obs.copy(), reward, np.zeros(self.num_envs, dtype=bool), truncated, reward.copy(),
                          game_over)

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


def agent_groups(env_id: str, env: Any, agents: list[str]
                 ) -> tuple[list[int], tuple[AgentGroup, ...], list[int], gym.Space]:
    """(each agent's group index, the groups, each group's observation width, the action space the rows
    share). Agents whose spaces are equal share a policy; where they differ, each set of alike agents is a
    group with a policy of its own (no groups: one set). Groups need Discrete actions, which the rows share
    as the widest, each group's mask allowing its own; observations must be Box vectors."""
    signatures: list[tuple[str, str]] = []
    index = []
    for agent in agents:
        space = env.observation_space(agent)
        if not isinstance(space, gym.spaces.Box):
            raise UsageError(f"{env_id}: rlcli takes Box observations from simultaneous-move environments; "
                             f"agent {agent} observes {space}")
        signature = (str(space), str(env.action_space(agent)))
        if signature not in signatures:
            signatures.append(signature)
        index.append(signatures.index(signature))
    firsts = [agents[index.index(g)] for g in range(len(signatures))]
    widths = [int(np.prod(env.observation_space(agent).shape)) for agent in firsts]
    if len(signatures) == 1:
        return index, (), widths, env.action_space(agents[0])
    spaces = [env.action_space(agent) for agent in firsts]
    if not all(isinstance(space, gym.spaces.Discrete) for space in spaces):
        raise UsageError(f"{env_id}: its agents act in different spaces ({', '.join(map(str, spaces))}); rlcli "
                         "gives agents of different spaces policies of their own for Discrete actions only")
    names = [agent.rstrip("0123456789").rstrip("_") for agent in firsts]  # adversary_0 -> adversary
    if len(set(names)) < len(names) or not all(names):
        names = [f"group{g}" for g in range(len(firsts))]
    groups = tuple(AgentGroup(name, f"observation/{name}", f"action_mask/{name}", int(space.n))
                   for name, space in zip(names, spaces, strict=True))
    return index, groups, widths, gym.spaces.Discrete(max(g.actions for g in groups))


def flat_layout(groups: tuple[AgentGroup, ...], widths: list[int], state: int | None, agents: int | None
                ) -> ObsLayout:
    """The columns of an agent's row: its observation (each group's own key where there are groups), the
    global state (``state`` columns; None: none), the agent id (``agents`` columns; None: none), and with
    groups the group one-hot and each group's action mask."""
    fields = [(g.obs_key, width) for g, width in zip(groups, widths, strict=True)] if groups else [
        ("observation", widths[0])]
    if state is not None:
        fields.append((PRIVILEGED_KEY, state))
    if agents is not None:
        fields.append(("agent_id", agents))
    if groups:
        fields.append((GROUP_KEY, len(groups)))
        fields += [(g.mask_key, g.actions) for g in groups]
    return ObsLayout(tuple(fields), None, groups)
