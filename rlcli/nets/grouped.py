"""A policy of its own for each group of alike agents, as one network of the PPO agent.

Where a multi-agent env's agents differ in their spaces (``ObsLayout.groups``: speakers and listeners,
adversaries and good agents), every row carries its group as a one-hot, its observation in its group's
columns and its group's action mask over the Discrete space the rows share. Each group has an
``ActorCritic`` of its own reading only its group's columns (with the state and agent id where present);
this module routes each batch's rows to their group's network and puts the results back in row order, so
the rollout, GAE and the PPO update stay the single-policy ones.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from rlcli.config import NetworkConfig
from rlcli.envs.layout import GROUP_KEY, PRIVILEGED_KEY, ObsLayout, n_actions
from rlcli.errors import UsageError
from rlcli.nets.models import MASKED_LOGIT, ActorCritic, PolicySample


class GroupedActorCritic(nn.Module):
    """``ActorCritic``'s interface over one ``ActorCritic`` per agent group (Discrete actions)."""

    kind = "discrete"
    pixels = False

    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.Space, cfg: NetworkConfig,
                 layout: ObsLayout) -> None:
        super().__init__()
        if cfg.actor_keys is not None or cfg.critic_keys is not None or cfg.trunk != "mlp":
            raise UsageError("agents of different spaces each get an MLP policy reading their own observation "
                             "(and the state, for the critic): drop network.actor_keys, critic_keys and trunk")
        self.layout, self.nvec = layout, [n_actions(action_space)]
        self.mask_columns = None  # each group's network masks its own logits
        extra = [key for key in ("agent_id",) if key in layout.keys]
        critic_extra = [key for key in (PRIVILEGED_KEY,) if key in layout.keys]
        self.groups = nn.ModuleList()
        for group in layout.groups:
            net_cfg = cfg.model_copy(update={"actor_keys": (group.obs_key, *extra),
                                             "critic_keys": (group.obs_key, *critic_extra, *extra)})
            self.groups.append(ActorCritic(obs_space, gym.spaces.Discrete(group.actions), net_cfg,
                                           layout.group_view(group)))
        self.register_buffer("group_columns", torch.tensor(layout.columns([GROUP_KEY])), persistent=False)

    def _rows(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """Each group's row indices in ``obs``."""
        group = obs.index_select(1, self.group_columns).argmax(1)
        return [(group == g).nonzero().squeeze(1) for g in range(len(self.groups))]

    def _scatter(self, parts: list[tuple[torch.Tensor, torch.Tensor]], rows: int,
                 fill: float = 0.0) -> torch.Tensor:
        """Per-group results (row indices, values) put back in row order."""
        first = parts[0][1]
        out = first.new_full((rows, *first.shape[1:]), fill)
        for index, values in parts:
            out.index_copy_(0, index, values)
        return out

    def sample(self, obs: torch.Tensor, deterministic: bool = False) -> PolicySample:
        rows = self._rows(obs)
        samples = [(index, net.sample(obs.index_select(0, index), deterministic))
                   for index, net in zip(rows, self.groups, strict=True)]
        actions = self._scatter([(i, s.actions) for i, s in samples], len(obs))
        log_probs = self._scatter([(i, s.log_probs) for i, s in samples], len(obs))
        return PolicySample(actions, log_probs, obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._scatter([(index, net.value(obs.index_select(0, index)))
                              for index, net in zip(self._rows(obs), self.groups, strict=True)], len(obs))

    def value_of(self, sample: PolicySample) -> torch.Tensor:
        return self.value(sample.critic_input)

    def actor_output(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits over the shared action space; actions beyond a group's own are at ``MASKED_LOGIT``."""
        width = self.nvec[0]
        parts = []
        for index, net in zip(self._rows(obs), self.groups, strict=True):
            logits = net.actor_output(obs.index_select(0, index))
            parts.append((index, nn.functional.pad(logits, (0, width - logits.shape[1]), value=MASKED_LOGIT)))
        return self._scatter(parts, len(obs), MASKED_LOGIT)

    def policy_actions(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self.choose(self.actor_output(obs), deterministic)

    def choose(self, out: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Actions [rows, 1] from the shared logits: their argmax, or a Gumbel-max draw as ActorCritic's."""
        if deterministic:
            return out.argmax(-1, keepdim=True)
        logp = nn.functional.log_softmax(out, dim=-1)
        return (logp - torch.log(-torch.log(torch.rand_like(logp)))).argmax(-1, keepdim=True)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values) of given actions, each row under its group's network."""
        parts = [(index, net.evaluate(obs.index_select(0, index), actions.index_select(0, index)))
                 for index, net in zip(self._rows(obs), self.groups, strict=True)]
        log_probs, entropy, values = (self._scatter([(i, out[k]) for i, out in parts], len(obs)) for k in range(3))
        return log_probs, entropy, values

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions.squeeze(-1)
