"""DQN's networks: the Q network (an MLP or Nature CNN trunk, then one head or dueling value and advantage
heads, each action's value a number, a distribution over atoms or a set of quantiles), its noisy linear layers,
and the greedy policy that evaluation, play and export run."""

from __future__ import annotations

import math
from typing import Literal

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlcli.algos.dqn.targets import quantile_levels
from rlcli.errors import UsageError
from rlcli.nets.models import ACTIVATIONS, scaled_pixels

Trunk = Literal["mlp", "cnn"]
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride): Mnih et al. 2015


def check_q_spaces(algo: str, obs_space: gym.Space, action_space: gym.Space) -> None:
    """A UsageError unless a Q network of ``algo`` can act here: Discrete actions, flat vector observations
    or stacked frames."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise UsageError(f"{algo} needs Discrete actions; this environment's are {action_space}. Use --algo ppo, "
                         "or --algo sac for continuous actions")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) not in (1, 3):
        raise UsageError(f"{algo} takes flat vector observations or stacked frames; this environment's are "
                         f"{obs_space}")


def check_trunk(algo: str, trunk: Trunk, obs_shape: tuple[int, ...]) -> None:
    """A UsageError unless ``trunk`` reads observations of this shape: the MLP flat vectors, the CNN frames."""
    if trunk == "mlp" and len(obs_shape) == 3:
        raise UsageError(f"{algo}'s mlp trunk takes flat vectors; this environment's observations are frames "
                         f"{obs_shape}: add -p trunk=cnn (the atari group has it)")
    if trunk == "cnn" and len(obs_shape) != 3:
        raise UsageError(f"{algo}'s cnn trunk takes stacked frames [C, H, W]; this environment's observations "
                         f"are {obs_shape}: drop -p trunk=cnn")


def q_trunk(obs_shape: tuple[int, ...], trunk: Trunk, hidden: tuple[int, ...], activation: str,
            layer_norm: bool) -> tuple[nn.Sequential, int]:
    """The Q network's body and its width: an MLP over flat observations, or the Nature CNN over uint8 frames
    scaled to [0, 1] (three convolutions, then one dense layer of ``hidden[-1]`` units, ReLU throughout).
    ``layer_norm``: each layer normalised before its activation (PQN's networks, the CNN's too)."""
    def normed(shape: tuple[int, ...] | int) -> list[nn.Module]:
        return [nn.LayerNorm(shape)] if layer_norm else []

    layers: list[nn.Module] = []
    if trunk == "mlp":
        width = int(math.prod(obs_shape))
        for units in hidden:
            layers += [nn.Linear(width, units), *normed(units), ACTIVATIONS[activation]()]
            width = units
        return nn.Sequential(*layers), width
    x = torch.zeros(1, *obs_shape)
    for channels, kernel, stride in NATURE_CONVS:
        conv = nn.Conv2d(x.shape[1], channels, kernel, stride=stride)
        with torch.no_grad():
            x = conv(x)
        layers += [conv, *normed(tuple(x.shape[1:])), nn.ReLU()]
    layers += [nn.Flatten(), nn.Linear(x[0].numel(), hidden[-1]), *normed(hidden[-1]), nn.ReLU()]
    return nn.Sequential(*layers), hidden[-1]


class NoisyLinear(nn.Module):
    """A linear layer whose weights are mu + sigma * epsilon, epsilon factorised Gaussian noise (the outer
    product of f(x) = sign(x) sqrt(|x|) of one normal draw per input and per output), drawn by
    ``reset_noise``; without ``noise`` the layer is its means alone (Fortunato et al. 2018, section 3.2)."""

    def __init__(self, in_features: int, out_features: int, std_init: float) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), std_init * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), std_init * bound))
        self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features))
        self.register_buffer("bias_epsilon", torch.zeros(out_features))

    def reset_noise(self) -> None:
        device = self.weight_mu.device
        noise_in = _signed_sqrt(torch.randn(self.in_features, device=device))
        noise_out = _signed_sqrt(torch.randn(self.out_features, device=device))
        self.weight_epsilon.copy_(torch.outer(noise_out, noise_in))
        self.bias_epsilon.copy_(noise_out)

    def forward(self, x: torch.Tensor, noise: bool = False) -> torch.Tensor:
        if not noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        return F.linear(x, self.weight_mu + self.weight_sigma * self.weight_epsilon,
                        self.bias_mu + self.bias_sigma * self.bias_epsilon)


def _signed_sqrt(x: torch.Tensor) -> torch.Tensor:
    return x.sign() * x.abs().sqrt()


class QNetwork(nn.Module):
    """Observations -> one value per action: an MLP, then one linear head, or dueling value and advantage
    heads combined as V + A - mean(A). With ``atoms`` > 1 each action's head gives the logits of a return
    distribution on ``support`` (the dueling combination on the logits, as Rainbow does), and its value is
    that distribution's mean; with ``quantiles`` > 1 it gives that many quantiles of the return (combined the
    same way), and its value is their mean. ``noisy``: the heads are ``NoisyLinear``; ``layer_norm``: each
    hidden layer is normalised before its activation (PQN's network); ``trunk``: see ``q_trunk``."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, hidden: tuple[int, ...], activation: str,
                 dueling: bool, atoms: int = 1, v_min: float = -10.0, v_max: float = 10.0, noisy: bool = False,
                 noisy_std: float = 0.5, layer_norm: bool = False, trunk: Trunk = "mlp", quantiles: int = 1) -> None:
        super().__init__()
        assert atoms == 1 or quantiles == 1, "atoms (C51) or quantiles (QR-DQN), not both"
        self.trunk, width = q_trunk(obs_shape, trunk, hidden, activation, layer_norm)
        self.pixels = trunk == "cnn"
        self.n_actions, self.atoms, self.quantiles, self.dueling = n_actions, atoms, quantiles, dueling
        self.outputs = max(atoms, quantiles)  # per action
        layer = (lambda n_in, n_out: NoisyLinear(n_in, n_out, noisy_std)) if noisy else nn.Linear
        self.advantage = layer(width, n_actions * self.outputs)
        self.value = layer(width, self.outputs) if dueling else None
        if atoms > 1:
            self.register_buffer("support", torch.linspace(v_min, v_max, atoms))
        if quantiles > 1:  # not saved: the count gives them again
            self.register_buffer("levels", quantile_levels(quantiles), persistent=False)

    def heads(self, obs: torch.Tensor, noise: bool = False) -> torch.Tensor:
        """[B, actions] values, or [B, actions, atoms] logits of each action's return distribution, or [B,
        actions, quantiles] its quantiles."""
        features = self.trunk(scaled_pixels(obs) if self.pixels else obs)
        advantage = _head(self.advantage, features, noise)
        if self.outputs > 1:
            advantage = advantage.unflatten(-1, (self.n_actions, self.outputs))
        if self.value is None:
            return advantage
        value = _head(self.value, features, noise)
        if self.outputs > 1:
            return value.unsqueeze(-2) + advantage - advantage.mean(-2, keepdim=True)
        return value + advantage - advantage.mean(-1, keepdim=True)

    def forward(self, obs: torch.Tensor, noise: bool = False) -> torch.Tensor:
        """[B, actions]: each action's value (a distribution's mean where there are atoms or quantiles)."""
        out = self.heads(obs, noise)
        if self.atoms > 1:
            return (out.softmax(-1) * self.support).sum(-1)
        return out.mean(-1) if self.quantiles > 1 else out

    def reset_noise(self) -> None:
        for module in (self.advantage, self.value):
            if isinstance(module, NoisyLinear):
                module.reset_noise()


def _head(layer: nn.Module, features: torch.Tensor, noise: bool) -> torch.Tensor:
    return layer(features, noise) if isinstance(layer, NoisyLinear) else layer(features)


class ActionMask(nn.Module):
    """An action mask read from its columns of the raw observation (1: allowed); without columns, nothing is
    masked. Masked values are set to the lowest float, not -inf, and a row with nothing allowed (a game's last
    state) is all zeros: it bootstraps zero, truncated as well as terminated."""

    def __init__(self, columns: list[int]) -> None:
        super().__init__()
        self.register_buffer("columns", torch.tensor(columns, dtype=torch.long) if columns else None,
                             persistent=False)  # not saved: the env's layout gives it again

    def allowed(self, obs: torch.Tensor) -> torch.Tensor | None:
        return None if self.columns is None else obs.index_select(-1, self.columns) > 0.5

    def forward(self, values: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``values`` [B, actions] with the masked ones at the lowest float (zeros where none is allowed)."""
        allowed = self.allowed(obs)
        if allowed is None:
            return values
        none = ~allowed.any(-1, keepdim=True)
        return values.masked_fill(~allowed, torch.finfo(values.dtype).min).masked_fill(none, 0.0)

    def uniform(self, obs: torch.Tensor, n_actions: int) -> torch.Tensor:
        """[B]: an allowed action of each row, uniformly."""
        allowed = self.allowed(obs)
        if allowed is None:
            return torch.randint(0, n_actions, obs.shape[:1], device=obs.device)
        return torch.multinomial(allowed.float() + 1e-12 * (~allowed.any(-1, keepdim=True)).float(), 1).squeeze(-1)


class GreedyPolicy(nn.Module):
    """Raw observations -> the action of the highest value: normalisation (frozen), then the Q network (its
    mean weights, where they are noisy); the agent's own modules, not copies."""

    continuous_output = ""

    def __init__(self, obs_norm: nn.Module, q: QNetwork, mask: ActionMask | None = None) -> None:
        super().__init__()
        self.obs_norm, self.q, self.mask = obs_norm, q, mask or ActionMask([])
        self.pixels = q.pixels  # export: uint8 frames in, scaled inside

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.float()
        return self.mask(self.q(self.obs_norm(obs)), obs).argmax(-1)

    def action_log_probs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """The allowed actions' values as log-softmax (a masked one at the lowest float's): their argmax and the
        gaps between them, which a near tie is read from."""
        obs = obs.float()
        return [F.log_softmax(self.mask(self.q(self.obs_norm(obs)), obs), dim=-1)]
