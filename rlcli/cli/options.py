"""Option types shared by several commands."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from rlcli.algos import DEFAULT, REGISTRY
from rlcli.config import MAX_SEED


class Backend(str, Enum):
    auto = "auto"
    envpool = "envpool"
    gymnasium = "gymnasium"
    torch = "torch"
    playground = "playground"
    mjlab = "mjlab"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


AlgoName = Annotated[Optional[str], typer.Option(
    "--algo", "-a", metavar="ALGO", show_default=False,
    help=f"Algorithm: {', '.join(REGISTRY)} \\[default: {DEFAULT}].")]
Run = Annotated[str, typer.Argument(help="A run directory, the name of an agent in zoo/, or hf://USER/NAME.",
                                    show_default=False)]
Episodes = Annotated[int, typer.Option("--episodes", "-n", min=1, help="Episodes to run.")]
Deterministic = Annotated[bool, typer.Option("--deterministic/--stochastic",
                                             help="Take the policy's mode, or sample from it.")]
Best = Annotated[bool, typer.Option("--best", help="Use the best evaluated model, not the last.")]
Seed = Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed of the evaluation environments.")]
