"""DQN's hyperparameters (with the Rainbow components as settings), its search space and its thread policy."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rlcli.algos.dqn.networks import Trunk
from rlcli.algos.offpolicy import ReplayConfig
from rlcli.algos.threads import ThreadPlan, update_shares_cores
from rlcli.config import RunConfig


class DQNConfig(ReplayConfig):
    """Deep Q-learning hyperparameters; SB3's DQN defaults where a field has one."""

    algo: Literal["dqn"] = "dqn"
    """The algorithm."""
    learning_starts: Annotated[int, Field(ge=0)] = 100
    """Env steps of uniform random actions before learning; at most buffer_size (equal: learning starts once
    the replay is full)."""
    batch_size: Annotated[int, Field(gt=0)] = 32
    """Transitions per gradient step."""
    utd_ratio: Annotated[float, Field(gt=0)] = 0.25
    """Gradient steps per env step collected (SB3's gradient_steps / train_freq)."""
    learning_rate: Annotated[float, Field(gt=0)] = 1e-4
    """Adam's learning rate."""
    adam_eps: Annotated[float, Field(gt=0)] = 1e-8
    """Adam's epsilon (Rainbow: 1.5e-4)."""
    target_update_every: Annotated[int, Field(gt=0)] = 10_000
    """Gradient steps between updates of the target network."""
    target_update_rate: Annotated[float, Field(gt=0, le=1)] = 1.0
    """How far each target update moves the target towards the online network (1: a copy)."""
    epsilon_start: Annotated[float, Field(ge=0, le=1)] = 1.0
    """The chance of a uniform random action at the start."""
    epsilon_end: Annotated[float, Field(ge=0, le=1)] = 0.05
    """The chance of a uniform random action after the exploration phase."""
    exploration_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1
    """The fraction of the budget over which epsilon falls linearly from its start to its end."""
    double_q: bool = True
    """Double Q-learning: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling heads: Q = V + A - mean(A)."""
    loss: Literal["huber", "mse"] = "huber"
    """The TD error's loss: Huber (smooth L1, as SB3 and the Nature paper) or squared."""
    max_grad_norm: Annotated[float, Field(gt=0)] | None = 10.0
    """Gradients clipped to this global norm; none: no clipping."""
    trunk: Trunk = "mlp"
    """The Q network's body: mlp for flat observations, cnn (the Nature CNN) for stacked uint8 frames."""
    hidden: Annotated[tuple[Annotated[int, Field(gt=0)], ...], Field(min_length=1)] = (64, 64)
    """Units of each layer of the Q network (with the cnn trunk: the last is its dense layer's width)."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """The Q network's activation."""
    atoms: Annotated[int, Field(gt=0)] = 1
    """Distributional values (C51, Bellemare et al. 2017): each action's return as a distribution over this
    many atoms evenly spaced on [v_min, v_max], learnt by cross-entropy to the projected target (``loss``
    does not apply); 1: one value per action."""
    quantiles: Annotated[int, Field(gt=0)] = 1
    """Quantile regression (QR-DQN, Dabney et al. 2018): each action's return as this many quantiles, at the
    levels (2i - 1) / 2N, learnt by the quantile Huber loss (kappa 1) to the next state's quantiles moved by
    the Bellman operator (``loss`` does not apply); the action's value is their mean. 1: one value per action.
    The other form of distributional values than ``atoms``: one of the two may be above 1."""
    v_min: float = -10.0
    """The smallest atom of a distributional value."""
    v_max: float = 10.0
    """The largest atom of a distributional value."""
    noisy: bool = False
    """Noisy linear layers (Fortunato et al. 2018) for the heads' exploration: weights with learnt,
    factorised Gaussian noise, drawn anew at each act and gradient step; evaluation uses the mean weights.
    Epsilon still applies: set epsilon_start and epsilon_end to 0 to explore by the noise alone."""
    noisy_std: Annotated[float, Field(gt=0)] = 0.5
    """The noise's initial scale, sigma_0 (each weight's sigma starts at sigma_0 / sqrt(inputs))."""

    @model_validator(mode="after")
    def _distributional(self) -> DQNConfig:
        if self.atoms > 1 and self.quantiles > 1:
            raise ValueError(f"atoms (C51) and quantiles (QR-DQN) are two forms of distributional values: set one of "
                             f"them to 1 (got atoms={self.atoms}, quantiles={self.quantiles})")
        if self.atoms > 1 and not self.v_min < self.v_max:
            raise ValueError(f"v_min must be below v_max for distributional values (got {self.v_min}, {self.v_max})")
        check_raw_pixels(self.trunk, self.normalize_obs)
        return self


def check_raw_pixels(trunk: Trunk, normalize_obs: bool) -> None:
    if trunk == "cnn" and normalize_obs:
        raise ValueError("normalize_obs must be false with the cnn trunk, which scales pixels by 1/255")


SEARCH_SPACE: dict[str, Any] = {
    "learning_rate": {"low": 1.0e-5, "high": 3.0e-3, "log": True},
    "gamma": {"one_minus": True, "low": 1.0e-3, "high": 0.1, "log": True},
    "batch_size": [32, 64, 128, 256],
    "utd_ratio": [0.0625, 0.125, 0.25, 0.5, 1.0],
    "target_update_every": [100, 500, 1000, 5000, 10000],
    "exploration_fraction": {"low": 0.05, "high": 0.5},
    "epsilon_end": {"low": 0.0, "high": 0.2},
    "hidden": [[64, 64], [128, 128], [256, 256]],
    "n_step": [1, 3, 5],
}


def thread_plan(cfg: RunConfig, cores: int) -> ThreadPlan:
    """A CNN takes every core for both acting and updating: a gradient step comes every few env steps, and
    switching the count between them cost about 9 ms a gradient step (Pong, 4,000 steps from learning_starts
    on 2 cores: 57.6 s with the update on one thread, 48.3 s switching to two, 37.6-39.8 s on two throughout).
    An MLP acts with one thread (one observation row a step) and updates with every core once its batch is
    large enough to share (``update_shares_cores``, as PPO's); on a GPU, the update is the device's."""
    algo = cfg.algo
    if cfg.device == "cuda":
        return ThreadPlan(1, cores)
    if algo.trunk == "cnn":  # type: ignore[attr-defined]
        return ThreadPlan(cores, cores)
    shares = update_shares_cores(algo.batch_size, max(algo.hidden))  # type: ignore[attr-defined]
    return ThreadPlan(1, cores if shares else 1)
