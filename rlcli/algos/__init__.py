"""Algorithm registry: the training loop builds agents by name. Every agent is an ``nn.Module``
whose ``state_dict`` is its whole model (weights and normalisation statistics), with ``optimizers()``,
``extra_state()``/``load_extra_state()`` for resuming and ``predict(obs, deterministic)`` for acting."""

from rlcli.algos.ppo import PPO
from rlcli.algos.sac import SAC

Agent = PPO | SAC
ALGORITHMS: dict[str, type[PPO] | type[SAC]] = {"ppo": PPO, "sac": SAC}
