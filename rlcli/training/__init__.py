"""Training: the loop in named phases (``train``), learners, the only code that steps envs while training
(``learners``), rollout and replay storage (``buffers``), evaluation, the agent and env of a config
(``agents``), optimiser, compiling, threads, metric sinks, stop hooks, exact resume's random state, and a
run's processes (``world``, ``launch``)."""
