"""envpool, imported without its JAX interface."""

from __future__ import annotations

import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def import_envpool() -> ModuleType:
    """The envpool module. Importing it loads JAX (1.0-1.3 s of every process's start here) for its pools'
    ``xla()``, which rlcli never calls. Where JAX is not loaded yet it is hidden for the import, and envpool
    takes its own path for a missing JAX (its pools' ``xla()`` then raises); JAX stays importable after."""
    if (module := sys.modules.get("envpool")) is not None:
        return module
    with _LOCK:
        hide = "jax" not in sys.modules
        if hide:
            sys.modules["jax"] = None  # type: ignore[assignment]  # an import of it raises ImportError
        try:
            import envpool
        finally:
            if hide and sys.modules.get("jax", 0) is None:
                del sys.modules["jax"]
    return envpool
