"""How MySQL driver errors are classified: lost connection versus error of one statement."""

from __future__ import annotations

import threading

import pymysql
import pytest

from nsj_queue_lib.db.session import DbSession, is_connection_error
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


def test_a_real_deadlock_is_an_error_of_the_statement_not_a_lost_connection(settings):
    """Two sessions lock two rows in opposite order: MariaDB kills one statement (1213).
    That session stays usable, so the error is raised as is (a task failure), not as
    DatabaseUnavailable (which would make the worker reconnect)."""
    a, b = DbSession.open(settings), DbSession.open(settings)
    try:
        a.execute("CREATE TABLE dl (id INT PRIMARY KEY, v INT)")
        a.execute("INSERT INTO dl VALUES (1, 0), (2, 0)")
        a.begin()
        b.begin()
        a.execute("UPDATE dl SET v = 1 WHERE id = 1")
        b.execute("UPDATE dl SET v = 1 WHERE id = 2")
        errors: list = []

        def a_second_row() -> None:
            try:
                a.execute("UPDATE dl SET v = 2 WHERE id = 2")
            except Exception as exc:  # the victim may be either session
                errors.append(exc)

        blocked = threading.Thread(target=a_second_row)
        blocked.start()
        # Whichever statement comes second closes the cycle: one of them is the victim.
        try:
            b.execute("UPDATE dl SET v = 2 WHERE id = 1")
        except Exception as exc:
            errors.append(exc)
        blocked.join(30)
        assert len(errors) == 1, errors
        assert isinstance(errors[0], pymysql.err.OperationalError)
        assert not isinstance(errors[0], DatabaseUnavailable)
        assert errors[0].args[0] == 1213
        a.rollback()
        b.rollback()
        assert a.is_alive() and b.is_alive()
    finally:
        a.close()
        b.close()
