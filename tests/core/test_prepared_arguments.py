"""DbSession's prepared statements on PostgreSQL: the EXECUTE text it sends is the very text
psycopg2 makes of the same arguments (ints, None and bools are written in by the session,
other values adapted by psycopg2)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import ClassVar, List

import psycopg2.extensions

from nsj_queue_lib.db.session import DbSession


class _Recording(psycopg2.extensions.cursor):
    sent: ClassVar[List[bytes]] = []

    def execute(self, query, vars=None):
        result = super().execute(query, vars)
        _Recording.sent.append(self.query)
        return result


VALUES = [0, 1, -5, 2**70, -2**70, True, False, None, "it's 100%", 1.5, Decimal("-2.5"),
          dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc), dt.date(2024, 1, 2),
          [1, 2], -0]


def test_execute_text_is_what_psycopg2_makes_of_the_arguments(pg_server):
    conn = pg_server.connect()
    conn.cursor_factory = _Recording
    try:
        session = DbSession(conn)
        keys = [f"v{i}" for i in range(len(VALUES))]
        sql = ("SET LOCAL statement_timeout = 0;\nSELECT "
               + ", ".join(f"%({k})s::text AS {k}" for k in keys))
        params = dict(zip(keys, VALUES))
        for _ in range(2):  # the PREPARE, then the statement already prepared
            _Recording.sent.clear()
            row = session.fetch_one_prepared("nsjq_test_args", sql, params)
            with conn.cursor() as cur:
                expected = cur.mogrify(
                    "SET LOCAL statement_timeout = 0; EXECUTE nsjq_test_args("
                    + ", ".join(["%s"] * len(keys)) + ")", tuple(VALUES))
            assert _Recording.sent[-1] == expected
            assert row["v2"] == "-5" and row["v7"] is None and row["v5"] == "true"
        assert session.execute_prepared("nsjq_test_none", "SELECT 1", {}) == 1
    finally:
        conn.close()


def test_stored_message_follows_the_connection_encoding(pg_server):
    """The repository keeps the last message it made storable; a change of the
    connection's encoding (psycopg2's `encoding`) is still seen."""
    from nsj_queue_lib.db.repository import TaskRepository

    conn = pg_server.connect()
    try:
        repo = TaskRepository(DbSession(conn), "public.nsjq_unused")
        text = "ação ✓"
        assert repo._message(text) == text
        assert repo._message(text) == text
        conn.set_client_encoding("LATIN1")
        assert repo._message(text) == "a\\xe7\\xe3o \\u2713"
        assert repo._message("x\x00y") == "xy"
    finally:
        conn.close()
