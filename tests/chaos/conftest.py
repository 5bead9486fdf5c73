"""Fixtures of the chaos suite: its own embedded PostgreSQL (restartable without
disturbing anyone), the shared MariaDB, a fresh queue per scenario, the report.

Markers: every test here is `chaos` (deselect with -m "not chaos"); the one that
restarts the shared MariaDB is also `restarts_shared_db`.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos import report
from tests.chaos.harness import ChaosQueue, MyTarget, N, PgTarget
from tests.fixtures.database import require_mysql


def pytest_configure(config):
    config.addinivalue_line("markers", "chaos: chaos/fault-injection scenarios (tests/chaos)")
    config.addinivalue_line(
        "markers", "restarts_shared_db: restarts a database other test sessions use "
                   "(deselect with -m 'not restarts_shared_db')")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/chaos/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not report.ROWS:
        return
    terminalreporter.section(f"chaos: reliability table (N={N})")
    for line in report.render(report.ROWS).splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(also written to {report.report_path()})")


@pytest.fixture(scope="session")
def chaos_pg():
    """An embedded PostgreSQL for the chaos suite only: it is restarted, its backends
    terminated and its xmin pinned without touching the database of other tests."""
    from nsj_queue_lib.cli.devdb import start_embedded

    dev = start_embedded()
    try:
        dev.connect().close()
        yield PgTarget(dev)
    finally:
        dev.release()


@pytest.fixture(scope="session")
def chaos_mysql():
    server = require_mysql()
    return MyTarget(server)


@pytest.fixture(scope="session")
def chaos_bouncer(chaos_pg):
    """PgBouncer in transaction pooling (4 server connections) in front of `chaos_pg`: it
    stays up while that server restarts (tests/fixtures/pgbouncer.py)."""
    from tests.fixtures.pgbouncer import PgBouncer

    bouncer = PgBouncer(chaos_pg.dev).start()
    yield bouncer
    bouncer.close()


@pytest.fixture
def make_queue(request):
    """make_queue("postgres" | "mariadb", "db" | "cs" | "pooled") -> a fresh ChaosQueue
    (destroyed after); "pooled": PostgreSQL, the workers through PgBouncer in transaction
    pooling (DB_POOL_MODE=transaction), the producer and the audit direct."""
    made = []

    def make(kind: str, mode: str) -> ChaosQueue:
        target = request.getfixturevalue("chaos_pg" if kind == "postgres" else "chaos_mysql")
        q = ChaosQueue(target, "db" if mode == "pooled" else mode, request.node.name).create()
        if mode == "pooled":
            bouncer = request.getfixturevalue("chaos_bouncer")
            q.worker_overrides.update({**bouncer.env(), "QUEUE_LEASE_SECONDS": "3"})
        made.append(q)
        return q

    yield make
    for q in made:
        q.destroy()
