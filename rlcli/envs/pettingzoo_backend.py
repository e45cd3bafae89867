"""The PettingZoo backend: turn-based games as the learner's turns, simultaneous-move envs as agent rows."""

from __future__ import annotations

from typing import Any

from rlcli.config import MultiAgentConfig
from rlcli.envs.base import VecEnv, creation_error
from rlcli.envs.parallel import ParallelVecEnv
from rlcli.envs.pettingzoo_ids import is_turn_based, pettingzoo_module
from rlcli.envs.turns import TurnVecEnv
from rlcli.errors import UsageError


def make_pettingzoo_env(env_id: str, num_envs: int, seed: int, kwargs: dict[str, Any],
                        cfg: MultiAgentConfig | None, render_mode: str | None) -> VecEnv:
    """``num_envs`` copies of the PettingZoo environment ``env_id``; what its own code raises while it is
    made is a UsageError naming it."""
    module = pettingzoo_module(env_id)
    kind = TurnVecEnv if is_turn_based(env_id) else ParallelVecEnv
    try:
        return kind(env_id, module, num_envs, seed, kwargs, cfg or MultiAgentConfig(), render_mode)
    except UsageError:
        raise
    except Exception as e:
        raise creation_error(env_id, e) from e
