"""Hyperparameter tuning with Optuna: search spaces (``space``), what a study is (``spec``) and the checks that
make one (``plan``), where it is kept (``storage``), a trial's training runs (``objective``), the study and its
workers (``study``, ``worker``: a worker process's entry point), what a study leaves behind (``results``,
``plots``). Imports nothing heavy, so that ``rlcli tune`` can check its input before torch loads."""
