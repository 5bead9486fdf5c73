"""Shared fixtures: a real PostgreSQL, a fresh queue per test, worker subprocesses."""

from __future__ import annotations

import os
import uuid

import pytest

from tests import pg
from tests.helpers import Queue

# Variables the library reads: tests never inherit them from the developer's shell
# (worker subprocesses get exactly what each test passes).
_LIB_PREFIXES = ("QUEUE_", "MULTI_DATABASE", "CLIENT_SERVER_MODE", "SERVER_", "GRAFANA_URL",
                 "LOG_DEBUG", "NOTIFY_SERVICE_PORT", "LOCK_SERVICE_PORT", "OAUTH_TOKEN_URL")


@pytest.fixture(scope="session")
def pg_server():
    """The PostgreSQL of the DB_* variables or an embedded one (never skipped)."""
    server = pg.acquire()
    yield server
    if server.embedded is not None:
        server.release()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(_LIB_PREFIXES):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def queue(pg_server):
    """A fresh schema with a queue made by db_gen, and a side-effect table."""
    q = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}",
                     fila=f"fila_{uuid.uuid4().hex[:8]}")
    yield q
    q.destroy()
