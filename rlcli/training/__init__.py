"""Training: the loop in named phases (``train``), the env, agent and learner of a config (``agents``),
evaluation, metric sinks, stop hooks, exact resume's random state, and ``--nproc`` (``launch``)."""
