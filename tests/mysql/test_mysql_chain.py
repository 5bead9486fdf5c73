"""COMMIT AND CHAIN on a real MariaDB session: the chained transaction is trusted only
when the server reports it open, and statements outside it run in autocommit."""

from __future__ import annotations

from typing import Any

import pymysql

from nsj_queue_lib.db.dialect import dialect_for_driver
from nsj_queue_lib.db.session import DbSession

IN_TRANS = pymysql.constants.SERVER_STATUS.SERVER_STATUS_IN_TRANS


class IgnoresAndChain(pymysql.connections.Connection):
    """A real pymysql connection that sends COMMIT for COMMIT AND CHAIN: the server
    then opens no transaction, as SingleStore (which ignores AND CHAIN) does."""

    def query(self, sql: Any, unbuffered: bool = False) -> int:
        if sql == "COMMIT AND CHAIN":
            sql = "COMMIT"
        return super().query(sql, unbuffered)


def _session(myqueue, conn_class: Any = pymysql.connections.Connection) -> DbSession:
    srv = myqueue.server
    conn = conn_class(host=srv.host, port=srv.port, user=srv.user, password=srv.password,
                      database=myqueue.database, autocommit=True, charset="utf8mb4")
    return DbSession(conn, dialect_for_driver("MYSQL"))


def _insert(session: DbSession, myqueue, key: str) -> None:
    session.execute(f"INSERT INTO {myqueue.qeffects} (tarefa_id, chave, tipo) "
                    "VALUES (1, %(k)s, 'execute')", {"k": key})


def _keys(myqueue) -> list:
    return sorted(e["chave"] for e in myqueue.effects())


def test_a_chained_commit_opens_the_next_transaction_on_the_server(myqueue):
    session = _session(myqueue)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        assert session.conn.server_status & IN_TRANS
        session.begin()  # takes the chained transaction: no BEGIN
        _insert(session, myqueue, "desfeito")
        session.rollback()
        session.begin()
        _insert(session, myqueue, "gravado")
        session.commit()  # plain COMMIT: no transaction left open
        assert not session.conn.server_status & IN_TRANS
    finally:
        session.close()
    assert _keys(myqueue) == ["gravado"]


def test_a_chain_the_server_ignores_is_followed_by_a_begin(myqueue):
    # Fails without the server-status check: begin() sent no BEGIN, the INSERT ran in
    # autocommit and survived the rollback.
    session = _session(myqueue, IgnoresAndChain)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        assert not session.conn.server_status & IN_TRANS
        session.begin()
        _insert(session, myqueue, "desfeito")
        session.rollback()
    finally:
        session.close()
    assert _keys(myqueue) == []


def test_a_statement_between_a_chained_commit_and_begin_runs_in_autocommit(myqueue):
    # `_end_chained`: the chained (empty) transaction is committed before the statement,
    # so its effect is durable even if the next transaction rolls back.
    session = _session(myqueue)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        _insert(session, myqueue, "autocommit")
        assert not session.conn.server_status & IN_TRANS
        assert _keys(myqueue) == ["autocommit"]  # visible to another session: committed
        session.begin()
        _insert(session, myqueue, "desfeito")
        session.rollback()
    finally:
        session.close()
    assert _keys(myqueue) == ["autocommit"]
