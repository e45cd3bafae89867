"""User stop conditions given as ``module:function`` (``--stop-when``).

The function receives the ``TrainState`` after every training iteration and returns True to stop; the
run then evaluates, saves and ends as if it had reached its step budget.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcli.errors import UsageError


def load_stop_hook(spec: str) -> Callable[[Any], bool]:
    """The callable named by ``module:function`` (a dotted module path, importable from the current
    directory too, and an attribute path within it)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--stop-when takes module:function (e.g. mystop:reached), got '{spec}'")
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # a user's own file beside the run is the common case
        sys.path.append(cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"--stop-when '{spec}': cannot import module '{module_name}' ({e})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UsageError(f"--stop-when '{spec}': module '{module_name}' has no attribute '{attr}'")
        target = getattr(target, part)
    if not callable(target):
        raise UsageError(f"--stop-when '{spec}': '{attr}' is a {type(target).__name__}, not a function")
    return target
