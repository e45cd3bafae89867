"""The session runs scripts/bench_peers.py's smoke run beside the other tests (tests/bench_smoke.py):
it starts once the tests are collected, and the tests that read its report run last."""

import bench_smoke

BENCH_TESTS = "test_bench_peers.py::"


def pytest_collection_modifyitems(session, config, items):
    bench = [item for item in items if BENCH_TESTS in item.nodeid]
    if bench:
        items[:] = [item for item in items if BENCH_TESTS not in item.nodeid] + bench
        if not config.option.collectonly:
            bench_smoke.start()


def pytest_sessionfinish(session, exitstatus):
    bench_smoke.stop()
