"""Atari preprocessing for the gymnasium backend: a Python copy of envpool's C++ pipeline
(``envpool/atari/atari_env.h``), so that both backends behave the same frame for frame.

What envpool does, and so what :class:`EnvpoolAtari` does, on the raw ALE (one emulator frame per ``act``):

* reset: the emulator is only reset (``reset_game``) on the first reset, after a real game over, or
  after the time limit; after a mere life loss (episodic life) the game simply goes on. Then, on
  *every* reset, ``U[0, noop_max - 1] + 1 - fire`` single-frame no-ops, and one single FIRE frame in
  games whose minimal action set has FIRE. Rewards of those frames are dropped. The observation is
  that last frame (no max-pool); the frame stack is filled with it only when the emulator was reset,
  a life-loss reset pushes just the one frame (the stack runs on across lives).
* step: the action is repeated ``frame_skip`` frames (stopping early at game over); the last two
  frames are max-pooled, converted to grey with the ALE palette, resized to 84x84 with
  ``cv2.INTER_AREA`` and pushed on a stack of 4. A lost life (``0 < lives < previous lives``) ends
  the learning episode (``terminated``); the real end of the game (``game_over``) is all lives gone.
  The time limit counts agent steps since the emulator reset (27,000 = 108,000 frames) and wins over
  termination, as in envpool (``terminated = done & ~trunc``).
* reward: ``sign`` of the frame-summed reward; the unclipped sum travels in ``info["raw_reward"]``.

No-op starts: with ``noop_max <= 1`` there is no randomness (envpool's ``noop_max=1``: zero no-op
frames in FIRE games, exactly one no-op frame otherwise); ``noop_max=0`` means the same, and the envpool
backend translates it to 1 (envpool itself crashes on 0). Larger values draw from the env's own RNG,
so the no-op counts (not their distribution) differ from envpool's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlcli.envs.base import make_gym_env

MAX_EPISODE_STEPS = 27_000  # agent steps (108,000 frames), envpool's Atari default


class EnvpoolAtari(gym.Wrapper):
    """Wraps a frameskip-1 ALE env and drives its emulator directly, as envpool's ``AtariEnv`` does.

    ``info`` carries ``raw_reward`` (the game's own reward), ``game_over`` (the real end of the game,
    all lives, or the time limit) and ``lives``.
    """

    def __init__(self, env: gym.Env, noop_max: int = 30, frame_skip: int = 4, stack_num: int = 4,
                 img_height: int = 84, img_width: int = 84, episodic_life: bool = True,
                 reward_clip: bool = True, use_fire_reset: bool = True,
                 max_episode_steps: int = MAX_EPISODE_STEPS) -> None:
        import cv2
        from ale_py import Action

        super().__init__(env)
        self._cv2 = cv2
        self._noop, self._fire_action = Action.NOOP, Action.FIRE
        self.ale = env.unwrapped.ale
        self._action_set = list(env.unwrapped._action_set)
        self._fire = use_fire_reset and Action.FIRE in self._action_set
        self._noop_max = max(int(noop_max), 1)  # envpool draws U[0, noop_max - 1]; 0 acts like 1
        self._frame_skip = int(frame_skip)
        self._size = (int(img_width), int(img_height))  # cv2's (width, height)
        self._episodic_life = episodic_life
        self._reward_clip = reward_clip
        self._max_steps = int(max_episode_steps)
        self._elapsed = self._max_steps + 1  # forces an emulator reset on the first reset
        self._lives = 0
        h, w = self.ale.getScreenDims()
        self._pool = [np.zeros((h, w), np.uint8), np.zeros((h, w), np.uint8)]
        self._stack = np.zeros((int(stack_num), int(img_height), int(img_width)), np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, self._stack.shape, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(len(self._action_set))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        ale = self.ale
        push_all = False
        if (seed is not None or not self._episodic_life or ale.game_over()
                or self._elapsed >= self._max_steps):
            self.env.reset(seed=seed, options=options)
            self._elapsed = 0
            push_all = True
        noops = int(self.np_random.integers(self._noop_max)) + 1 - int(self._fire)
        for _ in range(noops):
            ale.act(self._noop)
            if ale.game_over():
                ale.reset_game()
                push_all = True
        if self._fire:
            ale.act(self._fire_action)
        ale.getScreenGrayscale(self._pool[0])
        self._push(push_all, maxpool=False)
        self._lives = ale.lives()
        return self._stack.copy(), {"lives": self._lives, "raw_reward": np.float32(0.0), "game_over": False}

    def step(self, action: Any):
        ale = self.ale
        act = self._action_set[int(action)]
        reward = 0.0
        done = False
        skip = self._frame_skip
        while skip > 0 and not done:
            reward += ale.act(act)
            done = ale.game_over()
            if skip <= 2:  # the last two frames go to the max-pool buffer
                ale.getScreenGrayscale(self._pool[2 - skip])
            skip -= 1
        self._push(False, maxpool=skip == 0)
        self._elapsed += 1
        truncated = self._elapsed >= self._max_steps
        lives = ale.lives()
        life_lost = self._episodic_life and 0 < lives < self._lives
        terminated = (done or life_lost) and not truncated
        self._lives = lives
        info = {"lives": lives, "raw_reward": np.float32(reward), "game_over": bool(done or truncated)}
        if self._reward_clip:
            reward = float(np.sign(reward))
        return self._stack.copy(), reward, terminated, truncated, info

    def _push(self, push_all: bool, maxpool: bool) -> None:
        frame = self._pool[0]
        if maxpool:
            np.maximum(frame, self._pool[1], out=frame)
        img = self._cv2.resize(frame, self._size, interpolation=self._cv2.INTER_AREA)
        if push_all:
            self._stack[:] = img
        else:
            self._stack[:-1] = self._stack[1:]
            self._stack[-1] = img


def make_atari_env(gym_id: str, render_mode: str | None = None, noop_max: int = 30,
                   frame_skip: int = 4, stack_num: int = 4, img_height: int = 84, img_width: int = 84,
                   episodic_life: bool = True, reward_clip: bool = True, use_fire_reset: bool = True,
                   max_episode_steps: int = MAX_EPISODE_STEPS, **kwargs: Any) -> gym.Env:
    """An ALE game preprocessed as envpool does it; the keyword names are envpool's, so the same
    ``env_kwargs`` work on both backends. Other keywords go to ``gym.make`` (ALE options)."""
    ale_kwargs = dict(repeat_action_probability=0.0, full_action_space=False)
    ale_kwargs.update(kwargs)
    # one emulator frame per act; the time limit is ours (agent steps), so the ALE's own cap is off
    env = make_gym_env(gym_id, frameskip=1, max_num_frames_per_episode=0, obs_type="grayscale",
                        render_mode=render_mode, **ale_kwargs)
    return EnvpoolAtari(env, noop_max=noop_max, frame_skip=frame_skip, stack_num=stack_num,
                        img_height=img_height, img_width=img_width, episodic_life=episodic_life,
                        reward_clip=reward_clip, use_fire_reset=use_fire_reset,
                        max_episode_steps=max_episode_steps)
