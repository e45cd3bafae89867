"""The Typer app every command registers on, and the one place where known errors become a one-line
message: bad input exits 2, a write that failed exits 1. ``--debug`` shows the traceback instead; it
travels in the click context's ``meta``, which every subcommand's context shares."""

from __future__ import annotations

import sys
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from rlcli.algos import REGISTRY
from rlcli.errors import StorageError, UsageError

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
            if e.ctx is not None and debugging(e.ctx):
                raise
            typer.echo(f"error: {e.format_message()}", err=True)
            sys.exit(2)
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(130)
        if isinstance(code, int) and code:
            sys.exit(code)
        return code

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        """The command line as given, kept for a command that starts itself again (``train --nproc``)."""
        ctx = super().make_context(info_name, list(args), parent=parent, **extra)
        ctx.meta[ARGV] = list(args)
        return ctx

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (UsageError, StorageError) as e:
            if debugging(ctx):
                raise
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2 if isinstance(e, UsageError) else 1) from None


DEBUG = "rlcli.debug"
ARGV = "rlcli.argv"  # the command line's arguments after the program's name


def debugging(ctx: Any) -> bool:
    """Whether ``--debug`` was given to this invocation."""
    return bool(ctx.meta.get(DEBUG))


app = typer.Typer(cls=_Commands, no_args_is_help=True, add_completion=False,
                  help=f"Train, evaluate and watch reinforcement-learning agents ({', '.join(REGISTRY).upper()}).",
                  pretty_exceptions_enable=False)


@app.callback()
def _root(ctx: typer.Context,
          debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False) -> None:
    ctx.meta[DEBUG] = debug
    # gymnasium warns about float64 bounds cast to float32 on every MuJoCo env; not the user's concern
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
