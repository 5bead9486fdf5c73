"""Fixtures of the MySQL dialect tests: a real MariaDB/MySQL, a fresh database per test."""

from __future__ import annotations

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from tests.mysql_server import MyQueue, MySqlServer, require_mysql


@pytest.fixture(scope="session")
def mysql_server() -> MySqlServer:
    server = require_mysql()
    return server


@pytest.fixture
def myqueue(mysql_server):
    q = MyQueue.create(mysql_server)
    yield q
    q.destroy()


def make_settings(q: MyQueue, **extra: str) -> Settings:
    env = q.server.env(q.database)
    env.update({"QUEUE_NAME": q.fila, "QUEUE_TABLE": q.table,
                "QUEUE_SUBSCRIBER_TABLE": q.sub_table, "QUEUE_MAX_RETRY": "3",
                "QUEUE_BASE_INTERVAL_RETRY": "0"})
    env.update(extra)
    return Settings.from_env(env, load_dotenv=False)


@pytest.fixture
def settings(myqueue) -> Settings:
    return make_settings(myqueue)


@pytest.fixture
def session(settings):
    """A library session (pymysql, autocommit, time_zone +00:00) on the test database."""
    s = DbSession.open(settings)
    yield s
    s.close()


@pytest.fixture
def repo(session, settings) -> TaskRepository:
    return TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)


def pytest_collection_modifyitems(config, items):
    """Mark the tests that need the server with `mysql` (select with -m mysql / not mysql)."""
    for item in items:
        if "mysql_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mysql)
