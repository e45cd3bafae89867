"""The folders a command writes its output into: made where missing, never one holding someone else's files."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rlcli.errors import UsageError


def writable_folder(folder: Path, option: str = "--out") -> None:
    """Makes ``folder`` where it is missing; a UsageError naming ``option`` where it cannot be made or written in
    (a file on the way, a folder this user cannot write in)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {folder} ({e.strerror}); choose another place with {option}") from None
    if not os.access(folder, os.W_OK):  # e.g. a zoo agent inside an installed package
        raise UsageError(f"cannot write in {folder}; choose another place with {option}")


def check_own_folder(folder: Path, option: str, own: Iterable[str], what: str) -> None:
    """A UsageError naming ``option`` where ``folder`` is a file, or a folder that holds anything but
    ``what``'s own files (``own``: a name any of which marks it as one): an empty or missing one is fine, and
    so are hidden files."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise UsageError(f"{option} {folder} is a file; choose a new path or an empty folder")
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))  # .DS_Store, .gitkeep
    if names and not set(names) & set(own):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UsageError(f"{option} {folder} holds files that are not {what} ({shown}); choose a new path "
                         "or an empty folder")
