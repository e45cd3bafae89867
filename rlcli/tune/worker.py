"""A tuning worker process: ``python -m rlcli.tune.worker INDEX`` with the study's TuneSpec as a line of JSON
on stdin, started by ``rlcli.tune.study.run`` through the shared supervisor (``rlcli.jobs.workers``), which
writes its output into ``STUDY_DIR/workers/worker-INDEX.log``.

It runs trials until the study holds its target. Ctrl-C reaches it only as the one SIGINT the supervisor
passes on (it runs in a session of its own): its running trial is recorded as interrupted. It interrupts
itself the same way when the supervising process ends without stopping it (killed, hung up on).
"""

from __future__ import annotations

import os
import sys

from rlcli.jobs import workers


def main(argv: list[str]) -> int:
    """The worker's exit code: 0 when it ran its trials or was interrupted, 2 on a UsageError."""
    worker = int(argv[0])
    try:
        workers.interrupt_once()
        spec_json = sys.stdin.readline()
        print(f"worker {worker} started (process {os.getpid()})")
        workers.interrupt_when_parent_ends()
        # imported here, where a Ctrl-C passed on while they load is the worker's interrupt like any other
        from rlcli.errors import UsageError
        from rlcli.tune.spec import TuneSpec
        from rlcli.tune.study import NOTE, run_worker

        try:
            ran = run_worker(TuneSpec.model_validate_json(spec_json), worker, note=lambda line: print(f"{NOTE}{line}"))
        except UsageError as e:
            print(f"error: {e}")
            return 2
        print(f"worker {worker} ran trials {ran}")
    except KeyboardInterrupt:
        print(f"worker {worker} interrupted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
