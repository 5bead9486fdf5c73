"""COMMIT AND CHAIN only where the server has it: PostgreSQL >= 12 (the library supports
9.5 on; client/server mode chains the next task's transaction on every database)."""

from __future__ import annotations

import psycopg2

from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.session import DbSession, postgres_chains


def test_commit_and_chain_needs_postgresql_12():
    # Before the fix DbSession.chain_commit chained on any PostgreSQL: on 10 and 11 the
    # COMMIT AND CHAIN of every task with a next task claimed ahead was a syntax error.
    assert not postgres_chains(90600)
    assert not postgres_chains(110022)
    assert postgres_chains(120000) and postgres_chains(150010)


def test_a_chained_commit_on_this_postgresql_opens_the_next_transaction(pg_server):
    conn = pg_server.connect()
    try:
        conn.autocommit = True
        session = DbSession(conn, POSTGRES)
        assert postgres_chains(conn.server_version)  # (PostgreSQL 15 here)
        session.begin()
        session.execute("SELECT 1")
        session.chain_commit()
        session.commit()
        assert (conn.info.transaction_status
                == psycopg2.extensions.TRANSACTION_STATUS_INTRANS)  # opened by AND CHAIN
        session.begin()  # sends nothing: already open
        session.commit()
        assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
    finally:
        conn.close()
