"""Training: the loop in named phases (``train``), the env, agent and learner of a config (``agents``),
evaluation, metric sinks, stop hooks, exact resume's random state, ``--nproc`` (``launch``), and the opponents
of turn-based self-play (``selfplay``)."""
