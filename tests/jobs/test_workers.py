"""The shared supervisor of tune's and benchmark's processes, on tiny Python jobs: thread caps, one
attempt's output, jobs at once, a job that cannot start, and Ctrl-C escalating on a job that ignores it."""

import signal
import sys

import pytest

from rlcli.jobs import workers

SHOW_CAPS = ("import os; print(*(os.environ[name] for name in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', "
             "'PYTHONUNBUFFERED')))")


def python(name, code, **kwargs):
    return workers.Job(name, (sys.executable, "-c", code), 1, **kwargs)


def test_jobs_run_capped_at_once_and_hand_back_this_attempts_output(tmp_path):
    log = tmp_path / "logs" / "caps.log"
    log.parent.mkdir()
    log.write_text("an earlier attempt\n")
    jobs = [workers.Job("caps", (sys.executable, "-c", SHOW_CAPS), 3, log, header="=== attempt 2\n"),
            python("sleep-a", "import time; time.sleep(0.5)"), python("sleep-b", "import time; time.sleep(0.5)"),
            workers.Job("missing", (str(tmp_path / "no-such-program"),), 1),
            python("fails", "print('working'); raise SystemExit('error: it broke')")]
    live, most = set(), [0]

    def started(job, pid):
        live.add(job.name)
        most[0] = max(most[0], len(live))

    ended = workers.supervise(jobs, 2, on_start=started, on_end=lambda end: live.discard(end.job.name))
    by_name = {end.job.name: end for end in ended}
    assert set(by_name) == {job.name for job in jobs} and most[0] == 2
    assert by_name["caps"].returncode == 0 and by_name["caps"].output == "3 3 1\n"
    assert log.read_text() == "an earlier attempt\n=== attempt 2\n3 3 1\n"
    assert by_name["missing"].returncode is None and by_name["missing"].error.startswith("FileNotFoundError")
    assert by_name["fails"].returncode == 1 and by_name["fails"].last_line == "error: it broke"
    assert by_name["sleep-a"].seconds >= 0.5


def test_a_stop_sends_sigint_then_escalates_to_sigterm(tmp_path):
    """A job that ignores SIGINT is sent SIGTERM after ``patience_s``; one that hears it stops with it."""
    stubborn = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); "
                "time.sleep(60)")
    polite = ("import sys, time; print('ready', flush=True)\n"
              "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    sys.exit(130)")
    logs = [tmp_path / "stubborn.log", tmp_path / "polite.log"]
    jobs = [python("stubborn", stubborn, log=logs[0]), python("polite", polite, log=logs[1])]
    sent = []

    def tick():  # a Ctrl-C once both jobs are ready to hear it
        if all(log.is_file() and log.read_text() == "ready\n" for log in logs):
            raise KeyboardInterrupt

    with pytest.raises(workers.Stopped) as stopped:
        workers.supervise(jobs, 2, on_tick=tick, tick_s=0.1, on_stop=lambda sig, n: sent.append((sig, n)),
                          patience_s=2.0)
    by_name = {end.job.name: end for end in stopped.value.ended}
    assert by_name["polite"].returncode == 130 and by_name["polite"].stopping
    assert by_name["stubborn"].returncode == -signal.SIGTERM
    assert sent == [(signal.SIGINT, 2), (signal.SIGTERM, 1)]
    assert workers.last_line("a\n\n  b  \n\n") == "b" and workers.last_line(" \n") is None
