"""A statement whose answer is awaited in Python (DbSession.fetch_one_interruptible, the
idle turn's GET_LOCK: with mysqlclient sent, polled and read in three steps) on a real
MariaDB, with the driver of NSJQ_TEST_MYSQL_DRIVER: the same rows as fetch_one."""

from __future__ import annotations

import os
import time

import pytest

from nsj_queue_lib.db.session import DbSession

pytestmark = pytest.mark.mysql

ROW_SQL = ("SELECT %(s)s AS s, %(n)s AS n, CAST('2026-01-02 03:04:05' AS DATETIME) AS d, "
           "NULL AS z, 7 AS i, 'it''s 100%%' AS q")


def test_an_awaited_statement_gives_the_rows_fetch_one_gives(session):
    params = {"s": "a'b\\c", "n": 1.5}
    row = session.fetch_one_interruptible(ROW_SQL, params)
    assert row == session.fetch_one(ROW_SQL, params)
    assert row["s"] == "a'b\\c" and row["q"] == "it's 100%" and row["z"] is None
    assert session.fetch_one_interruptible("SELECT 1 AS um FROM DUAL WHERE 1 = 0") is None
    assert session.fetch_value("SELECT 2") == 2  # the connection is in step afterwards


def test_an_awaited_get_lock_waits_in_the_server(session, settings, mariadb_queue):
    other = mariadb_queue.server.connect()
    try:
        with other.cursor() as cur:
            cur.execute("SELECT GET_LOCK('nsjq_robust_espera', 0)")
        started = time.monotonic()
        row = session.fetch_one_interruptible(
            "SELECT GET_LOCK(%(n)s, %(w)s) AS got", {"n": "nsjq_robust_espera", "w": 0.4})
        assert row == {"got": 0} and time.monotonic() - started >= 0.35
        with other.cursor() as cur:
            cur.execute("SELECT RELEASE_LOCK('nsjq_robust_espera')")
        assert session.fetch_one_interruptible(
            "SELECT GET_LOCK(%(n)s, %(w)s) AS got", {"n": "nsjq_robust_espera", "w": 0.4}) \
            == {"got": 1}
    finally:
        other.close()


def test_an_awaited_statement_on_a_descriptor_above_1023(settings):
    """select() refuses descriptors above 1023 (FD_SETSIZE); a worker with many open files
    or sockets (webhooks with QUEUE_CONCURRENCY) has its connection there."""
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.dup(0))
        session = DbSession.open(settings)
        try:
            conn = session.conn
            fd = conn.fileno() if hasattr(conn, "fileno") else conn._sock.fileno()  # pymysql
            assert fd > 1023, fd
            assert session.fetch_one_interruptible("SELECT GET_LOCK(%(n)s, 0) AS got",
                                                   {"n": "nsjq_robust_fd"}) == {"got": 1}
        finally:
            session.close()
    finally:
        for fd in held:
            os.close(fd)
