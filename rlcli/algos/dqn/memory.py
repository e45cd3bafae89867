"""A Q network with memory (PQN's recurrent variant, after CleanRL's pqn_atari_envpool_lstm.py): the Q trunk, an
LSTM or GRU (``rlcli.nets.recurrent.Memory``, PPO's), then one linear head; and the greedy policy over it that
evaluation, play and export run, carrying its state as a recurrent PPO policy does."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlcli.algos.dqn.networks import Trunk, q_trunk
from rlcli.nets.models import scaled_pixels
from rlcli.nets.recurrent import Memory


class RecurrentQNetwork(nn.Module):
    """Observations and a state [envs, state_size] -> one value per action and the next state. The state is
    zero where an episode starts; the caller sets it so."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, hidden: tuple[int, ...], activation: str,
                 layer_norm: bool, trunk: Trunk, kind: str, size: int) -> None:
        super().__init__()
        self.trunk, width = q_trunk(obs_shape, trunk, hidden, activation, layer_norm)
        self.pixels = trunk == "cnn"
        self.n_actions = n_actions
        self.memory = Memory(kind, width, size)
        self.head = nn.Linear(size, n_actions)
        self.state_size = self.memory.state_size

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(scaled_pixels(obs) if self.pixels else obs)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """([envs, actions] values, the next state) for one step of every env."""
        out, next_state = self.memory.step(self._features(obs).unsqueeze(0), state.unsqueeze(0))
        return self.head(out[0]), next_state[0]

    def replay(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """[steps, envs, actions] values of a rollout's [steps, envs] rows from ``state``, the state before its
        first step, zeroed where ``starts``: the values ``step`` gave, step by step."""
        steps, envs = starts.shape
        features = self._features(obs.flatten(0, 1)).view(1, steps, envs, -1)
        return self.head(self.memory.replay(features, state.unsqueeze(0), starts)[0])


class RecurrentGreedyPolicy(nn.Module):
    """Raw observations and a state -> (the action of the highest value, the next state): normalisation
    (frozen), then the Q network; the agent's own modules, not copies."""

    continuous_output = ""

    def __init__(self, obs_norm: nn.Module, q: RecurrentQNetwork) -> None:
        super().__init__()
        self.obs_norm, self.q = obs_norm, q
        self.pixels, self.state_size = q.pixels, q.state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, next_state = self.q.step(self.obs_norm(obs.float()), state)
        return values.argmax(-1), next_state

    def action_log_probs(self, obs: torch.Tensor, state: torch.Tensor) -> list[torch.Tensor]:
        """The values as log-softmax: their argmax and the gaps between them, which a near tie is read from."""
        return [F.log_softmax(self.q.step(self.obs_norm(obs.float()), state)[0], dim=-1)]
