"""Fixtures of the MySQL native mode tests: a queue on MariaDB, no socket server."""

from __future__ import annotations

import pytest

from tests.client_server.cs_helpers import CsQueue
from tests.mysql_server import MySqlServer, require_mysql


@pytest.fixture(scope="session")
def native_mysql_server() -> MySqlServer:
    return require_mysql()


@pytest.fixture
def nq(native_mysql_server, tmp_path):
    """A fresh queue on MariaDB, served by workers in MySQL native mode."""
    q = CsQueue.create("mariadb", native_mysql_server, tmp_path)
    q.native = True
    yield q
    q.destroy()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "nq" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mysql)
