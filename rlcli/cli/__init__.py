"""The ``rlcli`` command line: one file per command in this package, each registering itself on the app
of ``rlcli.cli.app``."""

from __future__ import annotations

from rlcli.cli import benchmark, evaluate, export, hyperparams, play, publish, pull, train, tune, zoo
from rlcli.cli.app import app

__all__ = ["app", "benchmark", "evaluate", "export", "hyperparams", "play", "publish", "pull", "train", "tune",
           "zoo"]


def main() -> None:
    app()
