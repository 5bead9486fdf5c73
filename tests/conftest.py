"""Suite-wide hooks; the fixtures live in the plugin modules of tests/fixtures/ (one per
kind: database, queue, HTTP endpoint, tiers; worker and server processes and waiting are
plain helpers there; the map of names is tests/fixtures/__init__.py's docstring).

Suite-wide rules enforced here:
* one set of variables: PostgreSQL from DB_* (as .ci/run exports), MariaDB from
  NSJQ_TEST_MYSQL_*; NSJQ_TEST_LOG_DIR for the workers' logs;
* every test that uses MariaDB carries the `mysql` marker (added here for the
  MariaDB fixtures; `tests.fixtures.database.require_mysql` fails an unmarked test);
* with CI set, a skipped test fails the run (a CI that tested nothing is red), except a
  contract test whose backend lacks a capability (`Queue.require`);
* a test that starts a process or a server of ours carries the `process` marker, which
  `make check` leaves out (tests/fixtures/tiers.py adds it and fails an unmarked one).
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.queue", "tests.fixtures.http",
                  "tests.fixtures.legacy", "tests.fixtures.tiers", "tests.fixtures.pgbouncer",
                  "pytester"]

# Variables the library reads: tests never inherit them from the developer's shell
# (worker subprocesses get exactly what each test passes).
_LIB_PREFIXES = ("QUEUE_", "MULTI_DATABASE", "CLIENT_SERVER_MODE", "SERVER_", "GRAFANA_URL",
                 "LOG_DEBUG", "NOTIFY_SERVICE_PORT", "LOCK_SERVICE_PORT", "OAUTH_TOKEN_URL")


# Fixtures that give a MariaDB: a test using any of them is a `mysql` test.
MYSQL_FIXTURES = frozenset({"mysql_server", "mariadb_queue", "mariadb_socket_queue", "mysql_db"})

_skipped: list = []


def pytest_collection_modifyitems(config, items):
    for item in items:
        if MYSQL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.mysql)


def pytest_runtest_setup(item):
    from tests.fixtures import database  # a plugin: imported by pytest, assertions rewritten

    database.CURRENT_TEST = item


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail") and not _capability_skip(report):
        _skipped.append(report.nodeid)


def _capability_skip(report) -> bool:
    """A contract test skipped because its backend lacks a capability (Queue.require):
    not a missing component, so not a CI failure."""
    from tests.fixtures.queue import CAPABILITY_SKIP

    longrepr = report.longrepr
    return isinstance(longrepr, tuple) and CAPABILITY_SKIP in str(longrepr[-1])


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI") and _skipped and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("CI") and _skipped:
        terminalreporter.write_line(
            f"CI definido: {len(_skipped)} teste(s) pulado(s), o que reprova a execução: "
            + ", ".join(_skipped[:20]), red=True)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(_LIB_PREFIXES):
            monkeypatch.delenv(name, raising=False)

