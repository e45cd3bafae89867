"""User stop conditions given as ``module:function`` (``--stop-when``).

The function receives the ``TrainState`` after every training iteration and returns True to stop; the
run then evaluates, saves and ends as if it had reached its step budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcli.envs.modules import import_user_module
from rlcli.errors import UsageError


def load_stop_hook(spec: str) -> Callable[[Any], bool]:
    """The callable named by ``module:function`` (a dotted module path, importable from the current
    directory too, and an attribute path within it). What it raises while training is reported as the
    hook's, in one line."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--stop-when takes module:function (e.g. mystop:reached), got '{spec}'")
    target: Any = import_user_module(module_name, f"--stop-when '{spec}'")
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UsageError(f"--stop-when '{spec}': module '{module_name}' has no attribute '{attr}'")
        target = getattr(target, part)
    if not callable(target):
        raise UsageError(f"--stop-when '{spec}': '{attr}' is a {type(target).__name__}, not a function")
    hook = target

    def stop_hook(state: Any) -> bool:
        try:
            return bool(hook(state))
        except Exception as e:
            raise UsageError(f"--stop-when '{spec}' raised {type(e).__name__}: {e}; the last checkpoint stays "
                             "(fix it, then --resume)") from e
    return stop_hook
