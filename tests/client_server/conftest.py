"""Fixtures of the client/server acceptance tests: a queue on MariaDB or on PostgreSQL,
served by the real socket server, with workers as real processes.

MariaDB comes from NSJQ_TEST_MYSQL_* (default 127.0.0.1:3306, root).  When it does
not answer, its tests are skipped on a developer machine and FAIL when `CI` is set.
"""

from __future__ import annotations

import pytest

from tests.client_server.cs_helpers import CsQueue
from tests.mysql_server import MySqlServer, require_mysql

DATABASES = [pytest.param("mariadb", marks=pytest.mark.mysql, id="mariadb"),
             pytest.param("postgres", id="postgres")]


@pytest.fixture(scope="session")
def cs_mysql_server() -> MySqlServer:
    server = require_mysql()
    return server


def _make_queue(request, kind: str, tmp_path) -> CsQueue:
    server = (request.getfixturevalue("cs_mysql_server") if kind == "mariadb"
              else request.getfixturevalue("pg_server"))
    return CsQueue.create(kind, server, tmp_path)


@pytest.fixture(params=DATABASES)
def csq(request, tmp_path):
    """A fresh queue on each database, in client/server mode (server not started)."""
    q = _make_queue(request, request.param, tmp_path)
    yield q
    q.destroy()


@pytest.fixture
def mariadb_csq(cs_mysql_server, tmp_path):
    """A fresh queue on MariaDB only (the database that needs this mode)."""
    q = CsQueue.create("mariadb", cs_mysql_server, tmp_path)
    yield q
    q.destroy()


def pytest_collection_modifyitems(config, items):
    """Mark the MariaDB-only tests with `mysql` (select with -m mysql / not mysql)."""
    for item in items:
        if "mariadb_csq" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mysql)
