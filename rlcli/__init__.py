"""rlcli: a command-line reinforcement-learning toolkit (PPO on gymnasium and envpool)."""

__version__ = "0.1.0"
