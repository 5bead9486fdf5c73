"""How MySQL driver errors are classified: lost connection versus error of one statement."""

from __future__ import annotations

import pymysql
import pytest

from nsj_queue_lib.db.session import TaskConnection, is_connection_error
from nsj_queue_lib.exceptions import DatabaseUnavailable


@pytest.mark.parametrize(("code", "lost"), [
    (2013, True),   # lost connection during query
    (2006, True),   # server has gone away
    (1927, True),   # connection killed (MariaDB)
    (1213, False),  # deadlock
    (1205, False),  # lock wait timeout
    (1644, False),  # SIGNAL
    (1054, False),  # unknown column
])
def test_is_connection_error_for_pymysql_operational_errors(code, lost):
    assert is_connection_error(pymysql.err.OperationalError(code, "x")) is lost


def test_interface_error_is_always_a_lost_connection():
    assert is_connection_error(pymysql.err.InterfaceError(0, ""))


def test_statement_errors_of_library_sql_are_raised_as_is(session):
    with pytest.raises(pymysql.err.OperationalError) as info:
        session.fetch_all("SELECT nope FROM (SELECT 1 AS x) t")
    assert info.value.args[0] == 1054
    assert session.is_alive()


def test_deadlock_is_unavailable_for_the_runtime_but_a_plain_error_for_task_code(
        session, monkeypatch):
    def deadlock(*args, **kwargs):
        raise pymysql.err.OperationalError(1213, "Deadlock found")

    with monkeypatch.context() as patch:
        patch.setattr(pymysql.cursors.Cursor, "execute", deadlock)
        with pytest.raises(DatabaseUnavailable):
            session.fetch_all("SELECT 1")
        with pytest.raises(pymysql.err.OperationalError, match="Deadlock"):
            TaskConnection(session).execute("SELECT 1")
