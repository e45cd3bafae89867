"""The user's own modules (``--env-module``, the module of ``--stop-when``), imported from the working
directory too; what goes wrong while they load is one line naming them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from rlcli.errors import UsageError


def import_user_module(name: str, option: str) -> Any:
    """The user's module ``name`` (importable from the current directory too); a UsageError naming the option,
    the module and what went wrong where it cannot be found or fails while it is imported."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # a user's own file beside the run is the common case
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and name.startswith(e.name):
            raise UsageError(f"{option}: no module named '{name}' here or on the Python path") from None
        raise UsageError(f"{option}: importing module '{name}' failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # the user's code: a syntax error, or anything it raises while importing
        raise UsageError(f"{option}: importing module '{name}' failed: {type(e).__name__}: {e} "
                         "(--debug shows where)") from e
