"""The ``rlcli`` entry point: the command runs with the garbage collector on, its start-up objects frozen."""

from __future__ import annotations

import gc

import pytest

import rlcli.__main__ as entry
import rlcli.cli


def test_the_command_runs_with_the_collector_on_and_the_loaded_modules_frozen(monkeypatch: pytest.MonkeyPatch):
    seen: list[tuple[bool, int]] = []
    monkeypatch.setattr(rlcli.cli, "main", lambda: seen.append((gc.isenabled(), gc.get_freeze_count())))
    try:
        entry.main()
    finally:
        gc.unfreeze()
    assert len(seen) == 1
    enabled, frozen = seen[0]
    assert enabled
    assert frozen > 0


def test_the_collector_is_on_again_when_loading_the_command_line_fails(monkeypatch: pytest.MonkeyPatch):
    import builtins

    real_import = builtins.__import__

    def failing(name, *args, **kwargs):
        if name == "rlcli.cli":
            raise ImportError("broken install")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", failing)
    try:
        with pytest.raises(ImportError, match="broken install"):
            entry.main()
    finally:
        gc.unfreeze()
    assert gc.isenabled()
