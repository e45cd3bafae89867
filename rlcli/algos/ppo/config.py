"""PPO's hyperparameters, the search space ``rlcli tune`` draws them from, how an entry's minibatches follow
a changed rollout, and the threads acting and updating take."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import gymnasium as gym
from pydantic import Field, model_validator

from rlcli.algos.threads import ThreadPlan, update_shares_cores
from rlcli.config import AlgoConfig, NetworkConfig, Precision, RunConfig, Schedule
from rlcli.errors import UsageError


class PPOConfig(AlgoConfig):
    """PPO hyperparameters; one rollout is ``n_envs * n_steps`` env steps."""

    algo: Literal["ppo"] = "ppo"
    """The algorithm."""
    steps: Annotated[int, Field(gt=0)] = 1_000_000
    """Env steps to train for, over all envs."""
    n_envs: Annotated[int, Field(gt=0)] = 8
    """Envs stepped in parallel."""
    n_steps: Annotated[int, Field(gt=0)] = 128
    """Steps each env takes per rollout: a rollout is n_envs * n_steps env steps."""
    minibatch_size: Annotated[int, Field(gt=0)] = 256
    """Rows per gradient step (whole env sequences for a recurrent policy)."""
    n_epochs: Annotated[int, Field(gt=0)] = 10
    """Passes over each rollout."""
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    """Discount factor."""
    gae_lambda: Annotated[float, Field(ge=0, le=1)] = 0.95
    """GAE's lambda: the bias-variance trade-off of the advantages."""
    learning_rate: Annotated[float, Field(gt=0)] = 3e-4
    """Adam's learning rate (the start of a schedule)."""
    lr_schedule: Schedule = Schedule.linear
    """constant, linear to zero, or adaptive_kl (rl_games': /1.5 above twice kl_target, x1.5 below half)."""
    kl_target: Annotated[float, Field(gt=0)] = 0.008
    """The KL per epoch the adaptive_kl schedule aims at."""
    kl_target_schedule: Literal["constant", "linear"] = "constant"
    """constant, or linear to zero over training (adaptive_kl only): its steps shrink as the budget ends,
    so the final policy settles instead of moving as far each update as the first ones did."""
    lr_min: Annotated[float, Field(gt=0)] = 1e-6
    """The lowest rate adaptive_kl sets (rl_games' bound; adaptive_kl only)."""
    lr_max: Annotated[float, Field(gt=0)] = 1e-2
    """The highest rate adaptive_kl sets (rl_games' bound; adaptive_kl only): the critic shares the rate,
    so a policy that barely moves can otherwise push both to steps far above the starting rate."""
    lr_adapt_every: Literal["epoch", "minibatch"] = "epoch"
    """When adaptive_kl picks the next learning rate: after each epoch from its mean KL, or after each
    minibatch from that minibatch's KL (rl_games' default)."""
    kl_reference: Literal["rollout", "previous_epoch"] = "rollout"
    """What adaptive_kl measures each minibatch's KL from: the rollout's policy (how far the whole update has
    moved so far), or the policy of the same rows' step one epoch earlier (rl_games': how far the last epoch
    moved; the rollout's policy in the first epoch). previous_epoch needs a feed-forward network."""
    clip_range: Annotated[float, Field(gt=0)] = 0.2
    """PPO's ratio clipping."""
    clip_range_schedule: Literal["constant", "linear"] = "constant"
    """constant, or linear to zero."""
    clip_value: Annotated[float, Field(gt=0)] | None = None
    """Value-loss clipping range (PPO2's); none disables it."""
    ent_coef: Annotated[float, Field(ge=0)] = 0.0
    """Weight of the entropy bonus."""
    vf_coef: Annotated[float, Field(ge=0)] = 0.5
    """Weight of the value loss."""
    max_grad_norm: Annotated[float, Field(gt=0)] = 0.5
    """Gradients clipped to this global norm."""
    adam_eps: Annotated[float, Field(gt=0)] = 1e-5
    """Adam's epsilon."""
    normalize_advantage: bool = True
    """Advantages standardised by their mean and standard deviation (over what: normalize_advantage_over)."""
    normalize_advantage_over: Literal["minibatch", "rollout"] = "minibatch"
    """What ``normalize_advantage`` standardises over: each minibatch by its own moments (SB3, CleanRL), or the
    whole rollout once, before the epochs (rl_games)."""
    normalize_obs: bool = False
    """Observations standardised by running statistics (saved with the run)."""
    normalize_reward: bool = False
    """Rewards scaled by the running standard deviation of the discounted return."""
    reward_scale: Annotated[float, Field(gt=0)] = 1.0
    """Rewards multiplied by this before any normalisation (rl_games' reward_shaper.scale_value)."""
    normalize_value: bool = False
    """The critic learns value targets standardised by their running statistics (rl_games'
    normalize_value); its outputs are mapped back to returns."""
    smooth_clip: bool = False
    """PPO's ratio clipped by a sigmoid that passes 1 with slope 1 and saturates at the clip range (rl_games'
    use_smooth_clamp), instead of a hard clamp."""
    clip_obs: Annotated[float, Field(gt=0)] = 10.0
    """Normalised observations clipped to +- this."""
    network: NetworkConfig = NetworkConfig()
    """The actor-critic network."""
    precision: Precision = "fp32"
    """Arithmetic of the training passes: fp32, or bf16 hidden layers under autocast."""

    @property
    def batch_size(self) -> int:
        """Env steps per rollout (and samples per update epoch)."""
        return self.n_envs * self.n_steps

    @model_validator(mode="after")
    def _lr_bounds_ordered(self) -> PPOConfig:
        if self.lr_min > self.lr_max:
            raise ValueError(f"lr_min={self.lr_min} exceeds lr_max={self.lr_max}; set lr_min at most lr_max")
        return self

    @model_validator(mode="after")
    def _kl_reference_kept_per_row(self) -> PPOConfig:
        if self.kl_reference == "previous_epoch" and self.network.recurrent:
            raise ValueError("kl_reference=previous_epoch keeps each row's log-probability between epochs, which a "
                             "recurrent policy's sequence minibatches do not; use kl_reference=rollout")
        return self

    @model_validator(mode="after")
    def _cnn_takes_raw_pixels(self) -> PPOConfig:
        if self.network.trunk == "cnn" and self.normalize_obs:
            raise ValueError("normalize_obs must be false with the cnn trunk, which scales pixels by 1/255")
        return self

    @model_validator(mode="after")
    def _minibatch_fits(self) -> PPOConfig:
        if self.minibatch_size > self.batch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} exceeds the rollout size n_envs*n_steps={self.batch_size} "
                f"({self.n_envs}*{self.n_steps}); lower minibatch_size to at most {self.batch_size} or raise n_envs "
                "or n_steps")
        if self.network.recurrent and self.minibatch_size % self.n_steps:
            raise ValueError(
                f"a recurrent policy learns from whole env sequences: minibatch_size={self.minibatch_size} "
                f"must be a multiple of n_steps={self.n_steps}")
        return self


# Powers of two throughout the rollout shape: any n_envs x n_steps here is a multiple of every
# minibatch count, so the minibatch size is an integer for every combination.
SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"low": 1.0e-5, "high": 3.0e-3, "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "gae_lambda": [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0],
    "n_envs": [4, 8, 16, 32, 64],
    "n_steps": [16, 32, 64, 128, 256, 512],
    "minibatch_size": {"minibatches": [1, 2, 4, 8, 16, 32]},
    "n_epochs": [1, 3, 5, 10, 20],
    "clip_range": [0.1, 0.2, 0.3, 0.4],
    "ent_coef": {"low": 1.0e-8, "high": 0.1, "log": True},
    "network.hidden": [[64, 64], [128, 128], [256, 256], [256, 128, 64]],
    "network.activation": ["tanh", "relu", "elu"],
}
# fields whose valid values depend on one another's (the config's cross-field checks): a search space
# is checked in every combination of the parameters that set them
COUPLED = ("n_envs", "n_steps", "minibatch_size", "normalize_obs", "network.trunk", "network.recurrent")


def fit_minibatches(entry: dict[str, Any], chosen: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (``chosen`` over the ``entry``) with the entry's number of minibatches kept where the user
    changed the rollout (``n_envs`` or ``n_steps``) but set no ``minibatch_size``, as rl_games'
    ``minibatch_size_per_env`` does: ``--n-envs 8`` on a 64-env entry of 2 minibatches trains on 2
    minibatches of a 512-step rollout. A recurrent policy's minibatches stay whole env sequences."""
    if "minibatch_size" in chosen or not {"n_envs", "n_steps"} & set(chosen):
        return values
    fields = PPOConfig.model_fields

    def value(source: dict[str, Any], name: str) -> int:
        return int(source.get(name, fields[name].default))

    entry_rollout = value(entry, "n_envs") * value(entry, "n_steps")
    count = max(round(entry_rollout / value(entry, "minibatch_size")), 1)
    n_envs, n_steps = value(values, "n_envs"), value(values, "n_steps")
    if (values.get("network") or {}).get("recurrent"):
        size = max(n_envs // count, 1) * n_steps
    else:
        size = max(n_envs * n_steps // count, 1)
    return {**values, "minibatch_size": size}


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """An MLP acts with one thread, leaving the cores to the env backend's threads (two would spin
    beside them: Hopper's rollout went from 251 to 398 ms), and updates with every core once its
    minibatch is large enough to share (``shares_cores``). A CNN on a CPU takes every core for both: its
    acting is a convolution stack over every env's frames. ``cfg.device`` is resolved here: cpu or cuda."""
    algo = cfg.algo
    if cfg.device == "cuda":
        return ThreadPlan(1, cores)
    if algo.network.trunk == "cnn":  # type: ignore[attr-defined]
        return ThreadPlan(cores, cores)
    return ThreadPlan(1, cores if shares_cores(algo) else 1)  # type: ignore[arg-type]


def shares_cores(algo: PPOConfig) -> bool:
    """Whether the MLP update (layers or a memory) is worth a second thread (``update_shares_cores``)."""
    network = algo.network
    widest = max((*network.hidden, network.recurrent_size if network.recurrent else 0), default=64)
    return update_shares_cores(algo.minibatch_size, widest)


def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
    """A UsageError unless PPO can act in these spaces."""
    if not isinstance(obs_space, gym.spaces.Box):
        raise UsageError(f"PPO takes Box observations; this environment's are {obs_space}")
    if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.Box):
        raise UsageError(f"PPO takes Discrete, MultiDiscrete or Box actions; this environment's are {action_space}")
