"""How MySQL driver errors are classified: lost connection versus error of one statement."""

from __future__ import annotations

import os
import re
import threading

import pymysql
import pytest

from nsj_queue_lib.db import mysql_driver
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
def test_is_connection_error_for_the_drivers_operational_errors(code, lost):
    assert is_connection_error(_errors().OperationalError(code, "x")) is lost


def test_interface_error_is_always_a_lost_connection():
    assert is_connection_error(_errors().InterfaceError(0, ""))


def _errors():
    """The exception namespace of the driver under test (NSJQ_TEST_MYSQL_DRIVER)."""
    if os.environ.get("NSJQ_TEST_MYSQL_DRIVER") == "mysqlclient":
        return mysql_driver.mysqlclient_module()
    return pymysql.err


def test_statement_errors_of_library_sql_are_raised_as_is(session):
    with pytest.raises(mysql_driver.error_classes("OperationalError")) as info:
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
        assert isinstance(errors[0], mysql_driver.error_classes("OperationalError"))
        assert not isinstance(errors[0], DatabaseUnavailable)
        assert errors[0].args[0] == 1213
        a.rollback()
        b.rollback()
        assert a.is_alive() and b.is_alive()
    finally:
        a.close()
        b.close()


def test_a_killed_connection_is_database_unavailable_on_the_next_statement(session, mariadb_queue):
    """The server ends the session (KILL): the driver's error (2006 / 2013 / 1927, by
    driver and timing) becomes DatabaseUnavailable, whichever driver is under test."""
    thread_id = session.fetch_value("SELECT CONNECTION_ID()")
    other = mariadb_queue.server.connect()
    try:
        with other.cursor() as cur:
            cur.execute(f"KILL CONNECTION {int(thread_id)}")
    finally:
        other.close()
    with pytest.raises(DatabaseUnavailable):
        session.fetch_value("SELECT 1")
    assert not session.is_alive()


def test_a_refused_password_is_database_refused_with_the_mysql_code(mariadb_queue):
    """The driver under test's refusal (1045) becomes DatabaseRefused, not a retry loop."""
    from nsj_queue_lib.exceptions import DatabaseRefused
    from tests.mysql.conftest import make_settings

    settings = make_settings(mariadb_queue, DB_USER="nsjq_nobody", DB_PASS="errada")
    with pytest.raises(DatabaseRefused) as info:
        DbSession.open(settings)
    # 1045; MariaDB answers 1698 for an unknown user instead once accounts with host '%'
    # exist (the refusal the library maps the same way).
    assert re.search(r"\[MySQL (1045|1698)\]", str(info.value)), str(info.value)
    assert "nsjq_nobody" in str(info.value)
