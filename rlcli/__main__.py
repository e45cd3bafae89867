"""The ``rlcli`` command, and ``python -m rlcli``."""

import gc


def main() -> None:
    """Loads the command line, then runs it. Loading creates some 400k objects that live as long as the process
    (the modules of torch, envpool and rlcli); the collector's passes over them while they load made each
    command start 0.5-0.7 s later and freed almost nothing, so it is off until they are in and leaves them
    out of its passes after (``gc.freeze``)."""
    gc.disable()
    try:
        from rlcli.cli import main as run
    finally:
        gc.freeze()
        gc.enable()
    run()


if __name__ == "__main__":
    main()
