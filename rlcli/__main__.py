"""The ``rlcli`` command, and ``python -m rlcli``."""

import gc


def main() -> None:
    """Loads the command line, then runs it. Loading creates some 400k objects that live as long as the process
    (the modules of torch, envpool and rlcli); the collector's full passes over them while they load took
    0.3-0.4 s of each command and freed almost nothing, so it is off until they are in and leaves them out of
    its passes after (``gc.freeze``)."""
    gc.disable()
    try:
        from rlcli.cli import main as run
    finally:
        gc.freeze()
        gc.enable()
    run()


if __name__ == "__main__":
    main()
