"""Hyperparameter tuning with Optuna: search spaces (``space``), studies and their workers (``study``),
what a study leaves behind (``results``, ``plots``). Imports nothing heavy, so that worker processes
can cap their thread pools before torch loads."""
