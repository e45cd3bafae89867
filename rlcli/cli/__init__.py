"""The ``rlcli`` command line: a Typer app whose commands live one per file in this package.

This is the one place where known errors become a one-line message and exit code 2; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from rlcli.errors import UsageError

try:  # recent typer ships its own copy of click; older ones use click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors  # type: ignore[no-redef]


class _Commands(TyperGroup):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Click's own usage errors (a bad option value, a missing argument) as one line, exit 2."""
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except getattr(click_errors, "NoArgsIsHelpError", ()) as e:
            typer.echo(e.ctx.get_help() if e.ctx else str(e))
            sys.exit(0)
        except click_errors.UsageError as e:
            if os.environ.get("RLCLI_DEBUG"):
                raise
            typer.echo(f"error: {e.format_message()}", err=True)
            sys.exit(2)
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(130)
        if isinstance(code, int) and code:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as e:
            if os.environ.get("RLCLI_DEBUG"):
                raise
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(cls=_Commands, no_args_is_help=True, add_completion=False,
                  help="Train, evaluate and watch reinforcement-learning agents (PPO, SAC).",
                  pretty_exceptions_enable=False)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False
          ) -> None:
    if debug:
        os.environ["RLCLI_DEBUG"] = "1"
    # gymnasium warns about float64 bounds cast to float32 on every MuJoCo env; not the user's concern
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")


from rlcli.cli import benchmark, evaluate, export, play, publish, pull, train, tune, zoo  # noqa: E402  (commands register themselves on app)

__all__ = ["app", "benchmark", "evaluate", "export", "play", "publish", "pull", "train", "tune", "zoo"]


def main() -> None:
    app()
