"""envpool backend: the C++ vectorised engine, used wherever it has the task."""

from __future__ import annotations

import numpy as np

from rlcli.envs.base import StepResult, creation_error, float32_obs, float32_space

# Standard Atari preprocessing (Machado et al. / Nature DQN); rlcli/envs/atari.py copies it for gymnasium.
ATARI_KWARGS = dict(
    episodic_life=True, reward_clip=True, use_fire_reset=True, noop_max=30, frame_skip=4,
    stack_num=4, img_height=84, img_width=84, gray_scale=True, repeat_action_probability=0.0,
)


def atari_opts(kwargs: dict | None) -> dict:
    """ATARI_KWARGS overridden by ``kwargs``. ``noop_max`` below 1 becomes 1: envpool draws
    U[0, noop_max - 1] no-op frames (crashing on 0), so 1 is its "no random no-ops" (none in FIRE
    games, a single one otherwise), which is what ``noop_max: 0`` means on the gymnasium backend."""
    opts = {**ATARI_KWARGS, **(kwargs or {})}
    opts["noop_max"] = max(int(opts["noop_max"]), 1)
    return opts


class EnvpoolVecEnv:
    backend = "envpool"

    def __init__(self, name: str, num_envs: int, seed: int, atari: bool,
                 kwargs: dict | None = None, num_threads: int = 0) -> None:
        import envpool

        opts = atari_opts(kwargs) if atari else dict(kwargs or {})
        try:
            self._env = envpool.make(name, env_type="gymnasium", num_envs=num_envs, seed=seed,
                                     num_threads=num_threads, **opts)
        except (TypeError, ValueError, AssertionError) as e:  # envpool's answers to keywords it does not take
            raise creation_error(name, e) from e
        self._atari = atari
        self.num_envs = num_envs
        self.single_observation_space = float32_space(self._env.observation_space)
        self.single_action_space = float32_space(self._env.action_space)

    def reset(self) -> np.ndarray:
        obs, _ = self._env.reset()
        return float32_obs(obs)

    def step(self, actions: np.ndarray) -> StepResult:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        self._env.send(actions)

    def step_wait(self) -> StepResult:
        obs, reward, terminated, truncated, info = self._env.recv(reset=False, return_info=True)
        if self._atari:
            raw_reward = info["reward"].astype(np.float32)
            game_over = info["terminated"].astype(bool) | truncated
        else:
            raw_reward = reward.astype(np.float32)
            game_over = terminated | truncated
        return StepResult(float32_obs(obs), reward.astype(np.float32), terminated, truncated,
                          raw_reward, game_over)

    def close(self) -> None:
        self._env.close()
