"""Deep Q-learning and the Rainbow components: ``config`` (hyperparameters, search space, thread plan),
``targets`` (the maths, pure functions), ``networks`` (the Q network, noisy layers, the greedy policy) and
``agent``."""

from rlcli.algos.dqn.agent import DQN
from rlcli.algos.dqn.config import SEARCH_SPACE, DQNConfig, thread_plan
from rlcli.algos.dqn.networks import GreedyPolicy, NoisyLinear, QNetwork
from rlcli.algos.dqn.targets import (
    categorical_targets,
    linear_epsilon,
    next_actions,
    quantile_huber_loss,
    quantile_levels,
    quantile_targets,
    td_targets,
)

__all__ = ["DQN", "SEARCH_SPACE", "DQNConfig", "GreedyPolicy", "NoisyLinear", "QNetwork", "categorical_targets",
           "linear_epsilon", "next_actions", "quantile_huber_loss", "quantile_levels", "quantile_targets", "td_targets",
           "thread_plan"]
