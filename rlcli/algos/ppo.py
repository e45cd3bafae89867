"""Proximal Policy Optimisation (Schulman et al. 2017) for every action space the networks support:
its hyperparameters, search space, thread policy and agent.

The agent meets the on-policy learner through ``observe``, ``sample``/``value_of`` (the critic runs
while the envs step), ``scale_rewards`` and ``update``, which runs the minibatch epochs over one rollout
and returns plain floats, synchronising with the device once per update (plus once per epoch for the
adaptive-KL schedule, which needs the epoch's KL to pick the next learning rate).

With several processes (``rlcli.algos.world``) each learns from its own rollout: every minibatch is split
between them (the global minibatch is the configured one), its advantages normalised by the moments of the
whole of it, each loss a sum over the process's rows divided by the global minibatch's, and the gradients
summed over the processes before clipping, so that one update equals one process's over all the rollouts.
The learning rate and clip range are the lead's, and the normalisation statistics are pooled before each
update.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Annotated, Any, Literal

import gymnasium as gym
import torch
from pydantic import Field, model_validator
from torch import nn

from rlcli.algos.buffers import RolloutBatch, RolloutBuffer, SequenceBatch
from rlcli.algos.compiling import captured, compiled
from rlcli.algos.optim import adam, set_lr
from rlcli.algos.threads import ThreadPlan
from rlcli.algos.world import SINGLE, World
from rlcli.config import AlgoConfig, NetworkConfig, Precision, RunConfig, Schedule
from rlcli.envs.layout import ObsLayout
from rlcli.errors import UsageError
from rlcli.nets.grouped import GroupedActorCritic
from rlcli.nets.models import ActorCritic, ActorCriticPolicy, PolicySample, training_precision
from rlcli.nets.normalization import ObsNormalizer, RewardScaler, RunningMeanStd, ValueNormalizer, pool_statistics
from rlcli.nets.recurrent import RecurrentActorCritic, RecurrentPolicy

MIN_LR, MAX_LR = 1e-6, 1e-2  # adaptive-KL bounds, as rl_games


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
    lr_adapt_every: Literal["epoch", "minibatch"] = "epoch"
    """When adaptive_kl picks the next learning rate: after each epoch from its mean KL, or after each
    minibatch from that minibatch's KL (rl_games' default)."""
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
    """Advantages standardised per minibatch."""
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
    """Whether an MLP update is worth a second thread: layers (or a memory) at least 128 wide and a minibatch's product
    with the widest of at least 2^22 multiply-adds. Forward, backward and Adam of a two-layer MLP on 2
    cores, one thread against two (µs): 64 wide, 64 rows 317 against 353, 2,048 rows 1,240 against 1,469;
    256 wide, 64 rows 680 against 594, 512 rows 2,998 against 1,622. Below, a second thread gains nothing
    alone, and beside a busy process its spinning wait collapses the update (64 rows of 64: 317 against
    1,584 µs)."""
    network = algo.network
    widest = max((*network.hidden, network.recurrent_size if network.recurrent else 0), default=64)
    return widest >= 128 and algo.minibatch_size * widest * widest >= 2 ** 22


def network_class(cfg: NetworkConfig, layout: ObsLayout | None) -> type[nn.Module]:
    """The actor-critic for the config and the env's layout: recurrent, one policy per agent group, or plain."""
    if layout is not None and layout.groups:
        if cfg.recurrent:
            raise UsageError("agents of different spaces get feed-forward policies of their own; drop "
                             "network.recurrent")
        return GroupedActorCritic
    return RecurrentActorCritic if cfg.recurrent else ActorCritic


def adaptive_kl_lr(lr: float, kl: float, target: float) -> float:
    """rl_games' rule: shrink the step when the policy moved too far, grow it when it barely moved."""
    if kl > 2.0 * target:
        return max(lr / 1.5, MIN_LR)
    if kl < 0.5 * target:
        return min(lr * 1.5, MAX_LR)
    return lr


def row_mean(values: torch.Tensor, total: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of ``values``; with ``total``, their sum over ``total`` rows: this process's share of the mean
    over a minibatch split between processes, whose shares sum to it."""
    return values.mean() if total is None else values.sum() / total


def smooth_clamp(x: torch.Tensor, low: float | torch.Tensor, high: float | torch.Tensor) -> torch.Tensor:
    """A sigmoid from ``low`` to ``high`` through their midpoint with slope 1 there (rl_games'
    smooth_clamp): ``low + (high - low) * sigmoid(4 (x - low) / (high - low) - 2)``."""
    width = high - low
    return low + width * torch.sigmoid(4.0 * (x - low) / width - 2.0)


def clipped_surrogate_loss(advantages: torch.Tensor, ratio: torch.Tensor, clip: float | torch.Tensor,
                           total: torch.Tensor | None = None, smooth: bool = False) -> torch.Tensor:
    """PPO's clipped objective, negated to a loss: mean of max(-A r, -A clip(r, 1 - clip, 1 + clip)),
    the clip a sigmoid where ``smooth`` (``total``: see ``row_mean``)."""
    clipped = smooth_clamp(ratio, 1.0 - clip, 1.0 + clip) if smooth else ratio.clamp(1.0 - clip, 1.0 + clip)
    return row_mean(torch.max(-advantages * ratio, -advantages * clipped), total)


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip_value: float | None, total: torch.Tensor | None = None) -> torch.Tensor:
    """Half the mean squared error of the values; with ``clip_value``, of whichever is worse, the new
    value or the rollout's value moved by at most ``clip_value`` towards it (PPO2's value clipping)."""
    if clip_value is None:
        return 0.5 * row_mean((values - returns).square(), total)
    clipped = old_values + (values - old_values).clamp(-clip_value, clip_value)
    return 0.5 * row_mean(torch.max((values - returns).square(), (clipped - returns).square()), total)


def pooled_standardize(advantages: torch.Tensor, world: World, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows of a minibatch split between processes in the whole minibatch's rows, as float32; the
    advantages standardised by its mean and standard deviation where ``normalize``), with one all-reduce."""
    a = advantages.double()
    moments = world.sum_(torch.stack([torch.tensor(float(a.numel()), dtype=torch.float64, device=a.device),
                                      a.sum(), a.square().sum()]))
    count, total, squares = moments.unbind()
    if normalize:
        mean = total / count
        std = ((squares - total * mean) / (count - 1.0).clamp_min(1.0)).clamp_min(0.0).sqrt()
        advantages = ((a - mean) / (std + 1e-8)).to(advantages.dtype)
    return count.float(), advantages


# Saved models name the actor-critic ``policy``, as the first format did: old runs and the zoo's agents load
SAVED, HELD = "policy.", "net."


def _saved_names(module: nn.Module, state: dict[str, Any], prefix: str, metadata: Any) -> None:
    for key in [k for k in state if k.startswith(prefix + HELD)]:
        state[prefix + SAVED + key[len(prefix + HELD):]] = state.pop(key)


def _loaded_names(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    for key in [k for k in state if k.startswith(prefix + SAVED)]:
        state[prefix + HELD + key[len(prefix + SAVED):]] = state.pop(key)


class PPO(nn.Module):
    """Networks, normalisers and optimiser of one PPO agent; all state is tensors."""

    def __init__(self, cfg: PPOConfig, obs_space: gym.spaces.Box, action_space: gym.Space,
                 n_envs: int, device: torch.device, obs_layout: ObsLayout | None = None,
                 world: World = SINGLE) -> None:
        super().__init__()
        self.cfg = cfg
        self.device = device
        self._one = torch.ones((), device=device)  # the minibatch count each minibatch step adds to its sums
        self.__dict__["world"] = world  # the processes this agent learns with; not a module
        # obs_layout: the env's (VecEnv.obs_layout), for Dict observations and action masks
        self.net = network_class(cfg.network, obs_layout)(obs_space, action_space, cfg.network, obs_layout)
        self.obs_norm = ObsNormalizer(tuple(obs_space.shape), cfg.normalize_obs, cfg.clip_obs,
                                      obs_layout.mask_columns() if obs_layout else ())
        self.reward_scaler = RewardScaler(n_envs, cfg.gamma, cfg.normalize_reward)
        self.value_norm = ValueNormalizer(cfg.normalize_value)
        self.to(device)
        self.reward_scaler.returns = self.reward_scaler.returns.to(device)
        for stats in self._shared_statistics():  # on the device: what they pool is read there
            stats.share()
        self.optimizer = adam(self.net.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
        self._params = list(self.net.parameters())
        self._clip = torch.zeros((), device=device)  # a tensor: a schedule's new value recompiles nothing
        if device.type == "cuda" and not isinstance(self.net, RecurrentActorCritic) and world.size == 1:
            # one CUDA graph a minibatch step (of each row count): the eager step's kernels, since torch.compile's
            # code for varying row counts fails to capture. Not for a sequence minibatch, which keeps its valid
            # rows (a count read back to the host), nor where processes sum gradients between backward and Adam
            self._step = captured(self._minibatch_step, cfg.compile, device)
        else:
            self._step = compiled(self._minibatch_step, cfg.compile, device, rows_vary=True)
        # acting's outputs outlive the next call (the critic finishes from the actor's), so no CUDA graphs
        self._sample = compiled(self.net.sample, cfg.compile, device)
        self._value_of = compiled(self.net.value_of, cfg.compile, device)
        self.learning_rate = cfg.learning_rate
        self.action_shape = (len(self.net.nvec),) if self.net.nvec else tuple(action_space.shape)
        self.action_dtype = torch.long if self.net.nvec else torch.float32
        self.obs_dtype = (torch.float32 if cfg.normalize_obs or obs_space.dtype != "uint8"
                          else torch.uint8)
        # not submodules: they share this agent's parameters, which its state_dict already holds
        self.__dict__["_policies"] = {}
        self.register_state_dict_post_hook(_saved_names)
        self.register_load_state_dict_pre_hook(_loaded_names)

    @staticmethod
    def check_spaces(obs_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(obs_space, gym.spaces.Box):
            raise UsageError(f"PPO takes Box observations; this environment's are {obs_space}")
        if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.Box):
            raise UsageError(f"PPO takes Discrete, MultiDiscrete or Box actions; this environment's are "
                             f"{action_space}")

    def training_precision(self) -> AbstractContextManager:
        """The arithmetic of rollout acting and the update (``precision``); evaluation is float32."""
        return training_precision(self.cfg.precision, self.device)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.optimizer}

    def extra_state(self) -> dict[str, float]:
        """What a resume needs beyond tensors: the adaptive schedule's current learning rate."""
        return {"learning_rate": self.learning_rate}

    def load_extra_state(self, state: dict[str, float]) -> None:
        self.learning_rate = float(state.get("learning_rate", self.learning_rate))

    def new_rollout(self, n_envs: int) -> RolloutBuffer:
        """Storage for one rollout of ``n_envs`` envs, in the shapes and types this agent learns from."""
        return RolloutBuffer(self.cfg.n_steps, n_envs, tuple(self.obs_norm.rms.mean.shape),
                             self.obs_dtype, self.action_shape, self.action_dtype, self.device,
                             getattr(self.net, "state_size", 0))

    def initial_state(self, n_envs: int) -> torch.Tensor | None:
        """Zeros [n_envs, S] for a recurrent network; None for a feed-forward one."""
        if not isinstance(self.net, RecurrentActorCritic):
            return None
        return torch.zeros(n_envs, self.net.state_size, device=self.device)

    def policy(self, deterministic: bool = True) -> ActorCriticPolicy | RecurrentPolicy:
        """Raw observations -> env actions, statistics frozen: what evaluation, play and export run. A
        recurrent one takes and returns the actor's state as well."""
        policies = self._policies
        if deterministic not in policies:
            kind = RecurrentPolicy if isinstance(self.net, RecurrentActorCritic) else ActorCriticPolicy
            policies[deterministic] = kind(self.obs_norm, self.net, deterministic)  # type: ignore[arg-type]
        return policies[deterministic]

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, deterministic: bool = True, state: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Env actions for raw observations, through ``policy``; a recurrent agent's are (actions, next
        state), from ``state`` (zeros, new episodes, where None)."""
        policy = self.policy(deterministic)
        if isinstance(policy, RecurrentPolicy):
            if state is None:
                state = torch.zeros(obs.shape[0], policy.state_size, device=obs.device)
            return policy(obs, state)
        return policy(obs)

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the rollout stores and acts on them, the statistics updated with them."""
        # disabled (as most often), the rows as they are: here and in scale_rewards, the module's call and
        # its no_grad context would cost 3-4 µs a step for nothing
        return self.obs_norm(obs, update=True) if self.obs_norm.enabled else obs

    def sample(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> PolicySample:
        """Actions drawn for observed rows, with their log-probabilities; ``value_of`` finishes the critic."""
        with self.training_precision():
            if state is None:
                return self._sample(obs)
            return self._sample(obs, state=state)

    def value_of(self, sample: PolicySample) -> torch.Tensor:
        with self.training_precision():
            return self.value_norm.denormalize(self._value_of(sample))

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """State values of raw observations (the bootstrap after a rollout's last step)."""
        with self.training_precision():
            if state is None:
                return self.value_norm.denormalize(self.net.value(self.obs_norm(obs)))
            return self.value_norm.denormalize(self.net.value(self.obs_norm(obs), state))  # type: ignore[call-arg]

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return self.net.env_actions(actions)

    def scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        return self.reward_scaler(rewards, dones) if self.reward_scaler.enabled else rewards

    def running_state(self) -> dict[str, torch.Tensor]:
        return {"reward_returns": self.reward_scaler.returns}

    def load_running_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.reward_scaler.returns.copy_(tensors["reward_returns"])

    def update(self, batch: RolloutBatch | SequenceBatch, progress: float) -> dict[str, float]:
        """Minibatch epochs over one rollout; ``progress`` is the fraction of training done, in [0, 1].
        A recurrent network's minibatches are whole env sequences, ``minibatch_size / n_steps`` envs each."""
        cfg = self.cfg
        if cfg.lr_schedule == Schedule.linear:
            self.learning_rate = cfg.learning_rate * max(1.0 - progress, 0.0)
        elif cfg.lr_schedule == Schedule.constant:
            self.learning_rate = cfg.learning_rate
        clip = cfg.clip_range * (max(1.0 - progress, 0.0) if cfg.clip_range_schedule == "linear" else 1.0)
        sequences = isinstance(batch, SequenceBatch)
        self.value_norm.update(batch.returns[batch.valid] if sequences else batch.returns)
        if self.world.size > 1:
            self.learning_rate, clip = self.world.agree(self.learning_rate, clip)
            pool_statistics(self._shared_statistics(), self.world.all_gather)
        self._set_lr(self.learning_rate)
        clip_t = self._clip.fill_(clip)
        raw = batch
        if self.value_norm.enabled:  # the critic learns, and is clipped, in the standardised scale
            batch = batch._replace(values=self.value_norm.normalize(batch.values),
                                   returns=self.value_norm.normalize(batch.returns))

        n, size = (batch.obs.shape[1], cfg.minibatch_size // cfg.n_steps) if sequences else (
            batch.obs.shape[0], cfg.minibatch_size)
        count = self._minibatch_count(n, size)
        sums = torch.zeros(6, device=self.device)  # policy, value, entropy, kl, clipfrac, count
        adapt = cfg.lr_adapt_every if cfg.lr_schedule == Schedule.adaptive_kl else None
        for _ in range(cfg.n_epochs):
            epoch_kl = torch.zeros((), device=self.device)
            n_minibatches = 0
            for rows in self._epoch(batch, n, size, count):
                stats = self._step(rows, clip_t)
                sums += stats
                epoch_kl += stats[3]
                n_minibatches += 1
                if adapt == "minibatch":
                    self._adapt_learning_rate(stats[3], 1)
            if adapt == "epoch":
                self._adapt_learning_rate(epoch_kl, n_minibatches)

        with torch.no_grad():
            returns, values = (raw.returns[raw.valid], raw.values[raw.valid]) if sequences else (
                raw.returns, raw.values)
            if self.world.size > 1:
                explained = self._pool_metrics(sums, returns, values)
            else:
                var_returns = returns.var()
                explained = 1.0 - (returns - values).var() / var_returns
                explained = torch.where(var_returns > 0, explained, torch.zeros_like(explained))
        means = (sums[:5] / sums[5]).tolist()
        return {
            "losses/policy": means[0], "losses/value": means[1], "losses/entropy": means[2],
            "losses/approx_kl": means[3], "losses/clip_fraction": means[4],
            "losses/explained_variance": float(explained), "charts/learning_rate": self.learning_rate,
            "charts/clip_range": clip,
        }

    def _shared_statistics(self) -> list[RunningMeanStd]:
        """The normalisation statistics in use, which several processes pool."""
        if self.world.size == 1:
            return []
        return [norm.rms for norm in (self.obs_norm, self.reward_scaler, self.value_norm) if norm.enabled]

    def _minibatch_count(self, n: int, size: int) -> int | None:
        """Minibatches per epoch where several processes split each (None for one process): as many as one
        process would make of all their rows (or sequences), ``size`` each."""
        if self.world.size == 1:
            return None
        total = int(self.world.sum_(torch.tensor(float(n))).item())
        return max(-(-total // size), 1)

    def _epoch(self, batch: RolloutBatch | SequenceBatch, n: int, size: int, count: int | None
               ) -> Iterator[tuple[torch.Tensor, ...]]:
        """Each minibatch of an epoch, the rows (or env sequences) in a new random order: ``size`` each, or
        this process's share of ``count`` minibatches split between processes. Rows come as the rollout
        holds them (a ``RolloutBatch``'s fields), sequences as a ``SequenceBatch``'s first eight fields
        and the state."""
        chunks = self._minibatches(n, size, count)
        if isinstance(batch, SequenceBatch):
            for index in chunks:
                yield self._sequence_rows(batch, index)
            return
        # the epoch's rows gathered once per tensor, each minibatch a slice of them
        shuffled = [t.index_select(0, torch.cat(chunks)) for t in batch]
        start = 0
        for index in chunks:
            yield tuple(t[start:start + len(index)] for t in shuffled)
            start += len(index)

    def _minibatches(self, n: int, size: int, count: int | None) -> tuple[torch.Tensor, ...]:
        """The row (or env) indices of each minibatch of an epoch, in a new random order: ``size`` each, or
        this process's share of ``count`` minibatches split between processes."""
        order = torch.randperm(n, device=self.device)
        return order.split(size) if count is None else order.tensor_split(count)

    def _adapt_learning_rate(self, epoch_kl: torch.Tensor, n_minibatches: int) -> None:
        """The adaptive-KL schedule's next learning rate, from the epoch's mean KL over every process's rows,
        decided by the lead."""
        kl = float(self.world.sum_(epoch_kl)) / n_minibatches
        self.learning_rate = adaptive_kl_lr(self.learning_rate, kl, self.cfg.kl_target)
        if self.world.size > 1:
            (self.learning_rate,) = self.world.agree(self.learning_rate)
        self._set_lr(self.learning_rate)

    def _pool_metrics(self, sums: torch.Tensor, returns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Sums the processes' shares of the losses into ``sums`` (in place) and returns the explained variance
        over every process's rows, with one all-reduce."""
        r, e = returns.double(), (returns - values).double()
        pooled = self.world.sum_(torch.cat([sums[:5].double(), torch.stack([
            torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device), r.sum(), r.square().sum(),
            e.sum(), e.square().sum()])]))
        sums[:5] = pooled[:5].to(sums.dtype)
        n, r_sum, r_squares, e_sum, e_squares = pooled[5:].unbind()
        var_returns = r_squares - r_sum * r_sum / n
        explained = 1.0 - (e_squares - e_sum * e_sum / n) / var_returns
        return torch.where(var_returns > 0, explained, torch.zeros_like(explained)).float()

    @staticmethod
    def _sequence_rows(batch: SequenceBatch, envs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The whole rollout sequences of the envs ``envs`` (a ``SequenceBatch``'s fields, env-indexed)."""
        return tuple(t.index_select(1, envs) for t in batch[:8]) + (batch.state.index_select(0, envs),)

    def _evaluated(self, rows: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """(log_probs, entropy, values) of a minibatch's rows under the current network, then the rollout's
        (log_probs, values, advantages, returns) of the same rows; a sequence minibatch is replayed from its
        stored state, and only its valid rows kept."""
        if len(rows) == 6:
            obs, actions, old_log_probs, old_values, advantages, returns = rows
            with self.training_precision():
                log_probs, entropy, values = self.net.evaluate(obs, actions)
            return log_probs, entropy, values, old_log_probs, old_values, advantages, returns
        obs, actions, old_log_probs, old_values, advantages, returns, valid, starts, state = rows
        with self.training_precision():
            log_probs, entropy, values = self.net.replay(obs, actions, state, starts)  # type: ignore[operator]
        keep = valid.flatten().nonzero().squeeze(-1)
        return tuple(t.flatten(0, 1).index_select(0, keep) for t in (
            log_probs, entropy, values, old_log_probs, old_values, advantages, returns))

    def _minibatch_step(self, rows: tuple[torch.Tensor, ...], clip: torch.Tensor) -> torch.Tensor:
        """One gradient step on a minibatch (forward, loss, backward, clipping, Adam): what ``compile``
        compiles. Returns the step's (policy loss, value loss, entropy, KL, clip fraction, 1)."""
        cfg = self.cfg
        log_probs, entropy, values, old_log_probs, old_values, advantages, returns = self._evaluated(rows)
        log_ratio = log_probs - old_log_probs
        ratio = log_ratio.exp()
        total = None  # one process: every loss is a mean over the minibatch
        if self.world.size > 1:
            total, advantages = pooled_standardize(advantages, self.world, cfg.normalize_advantage)
        elif cfg.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = clipped_surrogate_loss(advantages, ratio, clip, total, cfg.smooth_clip)
        value_loss = clipped_value_loss(values, old_values, returns, cfg.clip_value, total)
        entropy_mean = row_mean(entropy, total)
        # without an entropy bonus its term adds exact zeros to the loss and the logits' gradient: left out,
        # the backward pass skips the entropy's nodes (the same bits)
        loss = (policy_loss + cfg.vf_coef * value_loss if cfg.ent_coef == 0.0 else
                policy_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * value_loss)

        self.optimizer.zero_grad()
        loss.backward()
        self.world.sum_gradients_(self._params)
        nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm, foreach=True)
        self.optimizer.step()

        with torch.no_grad():
            change = ratio - 1.0
            approx_kl = row_mean(change - log_ratio, total)  # Schulman's low-variance estimator
            clip_fraction = row_mean((change.abs() > clip).float(), total)
            return torch.stack([policy_loss.detach(), value_loss.detach(), entropy_mean.detach(),
                                approx_kl, clip_fraction, self._one])

    def _set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)
