"""Errors the command line turns into one clean line and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: the message names what was wrong and what would be right."""


class CheckpointError(UsageError):
    """A run directory or checkpoint file that cannot be read as an rlcli run."""


class StorageError(Exception):
    """A file could not be written (a full disk, a permission); the message names the file and the cause."""
