"""What the off-policy algorithms' hyperparameters share: the replay and its schedule (every one of them),
and the actor and critics of the actor-critic ones (SAC, TD3). Each algorithm's config subclasses one and
restates only the defaults it changes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlcli.config import AlgoConfig


class ReplayConfig(AlgoConfig):
    """Replay-based learning: what the off-policy learner reads."""

    n_envs: Annotated[int, Field(gt=0)] = 1
    """Envs stepped in parallel."""
    buffer_size: Annotated[int, Field(gt=0)] = 1_000_000
    """Transitions the replay buffer holds."""
    learning_starts: Annotated[int, Field(ge=0)] = 5_000
    """Env steps of uniform random actions before learning; at most buffer_size (equal: learning starts once
    the replay is full)."""
    batch_size: Annotated[int, Field(gt=0)] = 256
    """Transitions per gradient step."""
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    """Discount factor."""
    utd_ratio: Annotated[float, Field(gt=0)] = 1.0
    """Gradient steps per env step collected."""
    log_every: Annotated[int, Field(gt=0)] = 1_000
    """Env steps per training iteration (a metrics row)."""
    normalize_obs: bool = False
    """Observations standardised by running statistics (saved with the run)."""
    clip_obs: Annotated[float, Field(gt=0)] = 10.0
    """Normalised observations clipped to +- this."""
    n_step: Annotated[int, Field(gt=0, le=100)] = 1
    """Env steps summed into each stored transition's return, the value bootstrapped from that many steps on
    (n-step returns); 1: one-step targets."""
    prioritized: bool = False
    """Prioritised replay: transitions drawn in proportion to their last |TD error| ** priority_alpha, the
    loss weighted by importance sampling (Schaul et al. 2016)."""
    priority_alpha: Annotated[float, Field(ge=0, le=1)] = 0.6
    """How strongly priorities skew the draw (0: uniform)."""
    priority_beta: Annotated[float, Field(ge=0, le=1)] = 0.4
    """The importance-sampling exponent at the start; it rises linearly to 1 by the end of the run."""
    frame_replay: bool = True
    """Stacked uint8 frames (Atari) kept once each, the stacks rebuilt on sampling: 7 KB a 4 x 84 x 84
    transition instead of 56 KB; false: whole stacks (an env whose stacks do not slide from step to step)."""

    @model_validator(mode="after")
    def _replay_fills(self) -> ReplayConfig:
        for name in ("learning_starts", "batch_size"):
            if getattr(self, name) > self.buffer_size:
                raise ValueError(f"{name}={getattr(self, name)} exceeds buffer_size={self.buffer_size}: the replay "
                                 f"holds at most buffer_size transitions, so learning would never start; use "
                                 f"{name} <= buffer_size")
        return self


class ActorCriticReplayConfig(ReplayConfig):
    """An actor and critics with Polyak-averaged targets."""

    target_update_rate: Annotated[float, Field(gt=0, le=1)] = 0.005
    """Polyak factor of the targets ('tau')."""
    actor_lr: Annotated[float, Field(gt=0)] = 3e-4
    """The actor's learning rate."""
    critic_lr: Annotated[float, Field(gt=0)] = 3e-4
    """The critics' learning rate."""
    policy_delay: Annotated[int, Field(gt=0)] = 1
    """Critic updates per actor update."""
    actor_hidden: Annotated[tuple[Annotated[int, Field(gt=0)], ...], Field(min_length=1)] = (256, 256)
    """Units of each actor layer."""
    critic_hidden: Annotated[tuple[Annotated[int, Field(gt=0)], ...], Field(min_length=1)] = (256, 256)
    """Units of each critic layer."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """The networks' activation."""
