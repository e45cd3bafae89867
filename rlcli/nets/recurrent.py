"""Recurrent actor-critics: an LSTM or GRU after the trunk, whose state is one [envs, state_size] tensor.

The state is carried from step to step and across rollouts, set to zero where an episode starts, and
stored once per rollout, at its first step. The update replays each env's whole rollout as a sequence
(CleanRL's ppo_atari_lstm semantics: minibatches of envs, backpropagation through the rollout, the state
set to zero inside the sequence where an episode starts), through ``rlcli.nets.rnn``'s layers. Fixed-length
chunks with stored states (rl_games) would bound the backpropagation below the rollout length, at the
cost of a state per chunk; with rollouts of 32 to 256 steps, the whole rollout is the useful horizon.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import gymnasium as gym
import torch
from torch import nn

from rlcli.config import NetworkConfig
from rlcli.envs.layout import ObsLayout
from rlcli.nets.models import ActorCritic, PolicySample, full_precision, layer_init
from rlcli.nets.rnn import cell_sequence, fused_lstm_available, fused_lstm_sequence, gru_cell, lstm_cell


class Memory(nn.Module):
    """``members`` independent LSTM or GRU layers run together (an actor's memory and a critic's): torch's
    parameter shapes and gate order per member, an LSTM's two biases as one. A member's state is
    [envs, state_size], an LSTM's hidden and cell states side by side."""

    def __init__(self, kind: str, in_dim: int, size: int, members: int = 1) -> None:
        super().__init__()
        self.lstm = kind == "lstm"
        self.size, self.members = size, members
        gates = (4 if self.lstm else 3) * size
        self.state_size = 2 * size if self.lstm else size
        # CleanRL's initialisation: orthogonal weights, zero biases
        self.w_ih = nn.Parameter(torch.stack([nn.init.orthogonal_(torch.empty(gates, in_dim)) for _ in range(members)]))
        self.w_hh = nn.Parameter(torch.stack([nn.init.orthogonal_(torch.empty(gates, size)) for _ in range(members)]))
        self.b_ih = nn.Parameter(torch.zeros(members, gates))
        self.b_hh = None if self.lstm else nn.Parameter(torch.zeros(members, gates))

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the first ``m`` members for x [m, envs, features] from the state entering it
        [m, envs, state_size]: (outputs [m, envs, size], next state)."""
        m = x.shape[0]
        with _full_precision(x):
            x = x.to(self.w_ih.dtype)
            gates_x = torch.baddbmm(self.b_ih[:m].unsqueeze(1), x, self.w_ih[:m].transpose(1, 2))
            w_hh_t = self.w_hh[:m].transpose(1, 2)
            if self.lstm:
                h, c = lstm_cell(gates_x, state[..., :self.size], state[..., self.size:], w_hh_t)
                return h, torch.cat([h, c], -1)
            assert self.b_hh is not None  # set for a GRU: an LSTM's two biases are one, b_ih
            h = gru_cell(gates_x, state, w_hh_t, self.b_hh[:m].unsqueeze(1))
            return h, h

    def replay(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Outputs [members, steps, envs, size] for inputs [members, steps, envs, features] from ``state``
        [members, envs, state_size] (the state before the first step), the state set to zero at every
        step where ``starts`` [steps, envs] is true: the outputs that ``step`` gave, step by step (to float32
        rounding where torch's one-kernel LSTM replays them)."""
        with _full_precision(x):
            x = x.to(self.w_ih.dtype)
            if self.lstm and fused_lstm_available(x) and not torch.compiler.is_compiling():
                return fused_lstm_sequence(x, state, starts, self.w_ih, self.w_hh, self.b_ih)
            return cell_sequence(x, state, starts, self.w_ih, self.w_hh, self.b_ih, self.b_hh)


def _full_precision(x: torch.Tensor) -> AbstractContextManager:
    """The memory runs in float32 under bf16 training: its state accumulates over the whole rollout."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.autocast(x.device.type, enabled=False)
    return nullcontext()


class RecurrentActorCritic(ActorCritic):
    """``ActorCritic`` with a memory after each trunk (one, read by both heads, with a shared trunk), run
    as the members of one ``Memory``. Its state [envs, members * S] is the actor's member then the
    critic's; the policy alone needs the actor's, the first ``actor_state_size`` columns."""

    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.Space, cfg: NetworkConfig,
                 layout: ObsLayout | None = None) -> None:
        super().__init__(obs_space, action_space, cfg, layout)
        assert cfg.recurrent is not None
        width, size = self.actor_head.in_features, cfg.recurrent_size
        self.memory = Memory(cfg.recurrent, width, size, members=1 if self.critic_trunk is None else 2)
        self.actor_head = layer_init(nn.Linear(size, self.actor_head.out_features), gain=0.01, ortho=cfg.ortho_init)
        self.critic_head = layer_init(nn.Linear(size, 1), gain=1.0, ortho=cfg.ortho_init)
        self.actor_state_size = self.memory.state_size
        self.state_size = self.memory.members * self.memory.state_size

    def _members(self, state: torch.Tensor) -> torch.Tensor:
        """[envs, m * S] as [m, envs, S]."""
        return state.view(state.shape[0], -1, self.memory.state_size).transpose(0, 1)

    def _step(self, obs: torch.Tensor, state: torch.Tensor, critic: bool
              ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """(actor features, critic features or None, next state, the prepared rows) for one step; without
        the critic, ``state`` and the next state are the actor's alone."""
        x = self._prepare(obs)
        features = self.actor_trunk(self._actor_in(x)).unsqueeze(0)
        if critic and self.critic_trunk is not None:
            features = torch.stack([features[0], self.critic_trunk(self._critic_in(x))])
        out, next_state = self.memory.step(features, self._members(state)[:features.shape[0]])
        next_state = next_state.transpose(0, 1).reshape(state.shape[0], -1)
        return out[0], (out[-1] if critic else None), next_state, x

    def sample(self, obs: torch.Tensor, deterministic: bool = False,
               state: torch.Tensor | None = None) -> PolicySample:
        """Actions, their log-probabilities, the state values (as ``critic_input``: the critic runs here,
        since its memory moves with the step) and the next state."""
        assert state is not None
        actor, critic, next_state, x = self._step(obs, state, critic=True)
        actions, log_probs = self._draw(self._masked(full_precision(self.actor_head, actor), x), deterministic)
        values = full_precision(self.critic_head, critic).squeeze(-1)
        return PolicySample(actions, log_probs, values, next_state)

    def value_of(self, sample: PolicySample) -> torch.Tensor:
        return sample.critic_input

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        assert state is not None
        critic = self._step(obs, state, critic=True)[1]
        return full_precision(self.critic_head, critic).squeeze(-1)

    def replay(self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values), each [steps, envs], of a rollout's [steps, envs] rows from the
        state stored at its first step: what the PPO loss differentiates."""
        steps, envs = starts.shape
        x = self._prepare(obs.flatten(0, 1))
        features = self.actor_trunk(self._actor_in(x)).unsqueeze(0)
        if self.critic_trunk is not None:
            features = torch.stack([features[0], self.critic_trunk(self._critic_in(x))])
        out = self.memory.replay(features.view(features.shape[0], steps, envs, -1), self._members(state), starts)
        actor, critic = out[0].reshape(steps * envs, -1), out[-1].reshape(steps * envs, -1)
        out = self._masked(full_precision(self.actor_head, actor), x)
        log_probs, entropy = self._log_prob_entropy(out, actions.flatten(0, 1))
        values = full_precision(self.critic_head, critic).squeeze(-1)
        return log_probs.view(steps, envs), entropy.view(steps, envs), values.view(steps, envs)

    def actor_step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, masked, or means; the next actor state) for observations as the agent stores them."""
        actor, _, next_state, x = self._step(obs, state, critic=False)
        return self._masked(full_precision(self.actor_head, actor), x), next_state


class RecurrentPolicy(nn.Module):
    """Raw observations and the actor's state -> (env actions, next state): normalisation (frozen), the
    actor and its memory, the action's choice and its bounds. The caller sets a row's state to zero
    where an episode starts (``state_size`` zeros)."""

    continuous_output = "mean, clipped to [low, high]"

    def __init__(self, obs_norm: nn.Module, net: RecurrentActorCritic, deterministic: bool) -> None:
        super().__init__()
        self.obs_norm, self.net, self.deterministic = obs_norm, net, deterministic
        self.pixels = net.pixels
        self.state_size = net.actor_state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, next_state = self.net.actor_step(self.obs_norm(obs), state)
        return self.net.env_actions(self.net.choose(out, self.deterministic)), next_state

    def action_log_probs(self, obs: torch.Tensor, state: torch.Tensor) -> list[torch.Tensor]:
        """Per discrete action dimension, [batch, n] log-probabilities; empty for continuous actions."""
        if self.net.kind == "continuous":
            return []
        out = self.net.actor_step(self.obs_norm(obs), state)[0]
        return [torch.log_softmax(part, dim=-1) for part in out.split(self.net.nvec, dim=-1)]
