"""Algorithm registry: the training loop builds agents by name."""

from rlcli.algos.ppo import PPO

ALGORITHMS = {"ppo": PPO}
