"""mpe2's simple_spread stepped as arrays: every copy of the world in one set of numpy operations.

mpe2 steps one world at a time in Python objects (a force per pair of entities, an observation per agent),
which costs several times the policy's own step. Here the E worlds' agents and landmarks are [E, N, 2]
arrays and each step is a few dozen array operations. The arithmetic is mpe2's, operation for operation
and in its order (the forces on an agent summed pair by pair as ``World.apply_environment_force`` sums
them, the global reward subtracted landmark by landmark), so the results are equal to the bit to mpe2's
own (pinned by a test). Episodes start through mpe2 itself (``reset_world`` with the env's generator),
whose positions are then read in: the random stream is the env's own.

Only the configuration this reproduces is taken (``SpreadWorlds.fits``): discrete actions, silent agents
without noise, acceleration or speed limit, full observability, no curriculum, no early termination;
anything else keeps mpe2's own step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SENSITIVITY = 5.0  # mpe2's force per unit of a discrete action, where an agent sets no accel
# discrete action -> (axis, sign): 0 is no move; 1 left, 2 right, 3 down, 4 up
MOVES = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])


class SpreadWorlds:
    """E copies of a simple_spread world: agents' positions and velocities, landmarks' positions."""

    def __init__(self, raws: list[Any]) -> None:
        first = raws[0]
        world = first.world
        self.n_agents, self.n_landmarks = len(world.agents), len(world.landmarks)
        self.max_cycles = first.max_cycles
        self.local_ratio = float(first.local_ratio)
        self.dt, self.damping = world.dt, world.damping
        self.contact_force, self.contact_margin = world.contact_force, world.contact_margin
        self.dim_c = world.dim_c
        sizes = [agent.size for agent in world.agents]
        self.masses = np.array([agent.mass for agent in world.agents])[None, :, None]
        # the pairs of agents in World.apply_environment_force's order (a, then each b > a), with their
        # collision distance as mpe2 adds it (entity_a.size + entity_b.size)
        pairs = [(a, b) for a in range(self.n_agents) for b in range(a + 1, self.n_agents)]
        self.first = np.array([a for a, _ in pairs], dtype=np.intp)
        self.second = np.array([b for _, b in pairs], dtype=np.intp)
        self.dist_min = np.array([sizes[a] + sizes[b] for a, b in pairs])[None, :, None]
        # the forces on agent i in the order mpe2 adds them: -F(j, i) for each j < i, then F(i, b) for each b > i
        self.terms = np.array([[pairs.index((j, i)) for j in range(i)] + [pairs.index((i, b)) for b in
                               range(i + 1, self.n_agents)] for i in range(self.n_agents)], dtype=np.intp)
        self.signs = np.array([[-1.0] * i + [1.0] * (self.n_agents - 1 - i) for i in range(self.n_agents)])[..., None]
        self.collide_at = np.array([[sizes[a] + sizes[b] for b in range(self.n_agents)] for a in range(self.n_agents)])
        self.others = [[o for o in range(self.n_agents) if o != a] for a in range(self.n_agents)]
        e, n = len(raws), self.n_agents
        self.pos = np.zeros((e, n, 2))
        self.vel = np.zeros((e, n, 2))
        self.landmarks = np.zeros((e, self.n_landmarks, 2))
        self.steps = np.zeros(e, dtype=np.int64)

    @staticmethod
    def fits(raws: list[Any]) -> bool:
        """Whether these raw mpe2 envs are simple_spread worlds in the configuration this reproduces."""
        try:
            from mpe2.simple_spread.simple_spread import Scenario
        except ImportError:
            return False
        for raw in raws:
            world, scenario = raw.world, raw.scenario
            agents_fit = all(agent.movable and agent.silent and agent.collide and not agent.u_noise
                             and agent.accel is None and agent.max_speed is None and agent.action_callback is None
                             for agent in world.agents)
            if not (type(scenario) is Scenario and agents_fit and not raw.continuous_actions
                    and raw.local_ratio is not None and not raw.benchmark_data and raw.render_mode is None
                    and not scenario.curriculum and not scenario.terminate_on_success
                    and scenario.num_agent_neighbors is None and scenario.num_landmark_neighbors is None
                    and all(not lm.collide and not lm.movable for lm in world.landmarks)
                    and world.dim_p == 2):
                return False
        return True

    def load(self, e: int, raw: Any) -> None:
        """World ``e``'s state from its mpe2 env, as that env's reset left it."""
        world = raw.world
        self.pos[e] = [agent.state.p_pos for agent in world.agents]
        self.vel[e] = [agent.state.p_vel for agent in world.agents]
        self.landmarks[e] = [lm.state.p_pos for lm in world.landmarks]
        self.steps[e] = raw.steps

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every world one step on with ``actions`` [E, N] (discrete): (rewards [E, N] float64, whether each
        world's episode was truncated by this step [E])."""
        force = MOVES[actions] * SENSITIVITY + 0.0  # mpe2: p_force = u + noise, noise 0.0
        k = self.contact_margin
        delta = self.pos[:, self.first] - self.pos[:, self.second]  # [E, pairs, 2]
        dist = np.sqrt(np.sum(np.square(delta), axis=-1, keepdims=True))
        penetration = np.logaddexp(0, -(dist - self.dist_min) / k) * k
        pair = self.contact_force * delta / dist * penetration
        terms = pair[:, self.terms] * self.signs  # [E, N, N - 1, 2]: each agent's forces, in mpe2's order
        for t in range(self.n_agents - 1):
            force = terms[:, :, t] + force
        self.pos += self.vel * self.dt
        self.vel = self.vel * (1 - self.damping)
        self.vel += (force / self.masses) * self.dt
        self.steps += 1
        return self.rewards(), self.steps >= self.max_cycles

    def rewards(self) -> np.ndarray:
        """Scenario.global_reward and Scenario.reward, mixed by local_ratio as SimpleEnv mixes them."""
        to_landmarks = self.pos[:, None, :, :] - self.landmarks[:, :, None, :]  # [E, L, N, 2]: agent - landmark
        nearest = np.sqrt(np.sum(np.square(to_landmarks), axis=-1)).min(axis=2)  # [E, L]
        global_reward = np.zeros(len(self.pos))
        for lm in range(self.n_landmarks):
            global_reward = global_reward - nearest[:, lm]
        between = self.pos[:, :, None, :] - self.pos[:, None, :, :]  # [E, N (a), N (agent), 2]
        colliding = np.sqrt(np.sum(np.square(between), axis=-1)) < self.collide_at
        colliding[:, np.arange(self.n_agents), np.arange(self.n_agents)] = False
        agent_reward = 0.0 - colliding.sum(axis=1)  # as mpe2 counts: 0 - 1.0 per collision
        return global_reward[:, None] * (1 - self.local_ratio) + agent_reward * self.local_ratio

    def observations(self) -> np.ndarray:
        """Scenario.observation of every agent, [E, N, 4 + 2L + 4(N - 1)] float32: own velocity and position,
        landmarks and other agents relative to it, the others' communication (silent: zeros)."""
        e, n = self.pos.shape[:2]
        landmarks = self.landmarks[:, None, :, :] - self.pos[:, :, None, :]  # [E, N, L, 2]
        others = np.stack([self.pos[:, self.others[a]] - self.pos[:, a:a + 1] for a in range(n)], axis=1)
        comm = np.zeros((e, n, (n - 1) * self.dim_c))
        return np.concatenate([self.vel, self.pos, landmarks.reshape(e, n, -1), others.reshape(e, n, -1), comm],
                              axis=-1).astype(np.float32)
