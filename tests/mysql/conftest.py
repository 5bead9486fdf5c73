"""Fixtures of the MySQL dialect tests: settings, a session and a repository on the
queue of `mariadb_queue` (tests/fixtures/queue.py)."""

from __future__ import annotations

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from tests.fixtures.queue import Queue


def make_settings(q: Queue, **extra: str) -> Settings:
    env = q.server.env(q.database)
    env.update({"QUEUE_NAME": q.fila, "QUEUE_TABLE": q.table,
                "QUEUE_SUBSCRIBER_TABLE": q.sub_table, "QUEUE_MAX_RETRY": "3",
                "QUEUE_BASE_INTERVAL_RETRY": "0"})
    env.update(extra)
    return Settings.from_env(env, load_dotenv=False)


@pytest.fixture
def settings(mariadb_queue) -> Settings:
    return make_settings(mariadb_queue)


@pytest.fixture
def session(settings):
    """A library session (pymysql, autocommit, time_zone +00:00) on the test database."""
    s = DbSession.open(settings)
    yield s
    s.close()


@pytest.fixture
def repo(session, settings) -> TaskRepository:
    return TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)

