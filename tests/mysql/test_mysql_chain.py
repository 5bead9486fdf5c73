"""COMMIT AND CHAIN on a real MariaDB session: the chained transaction is trusted only
when the server reports it open, and statements outside it run in autocommit.  On the
driver of NSJQ_TEST_MYSQL_DRIVER (pymysql or mysqlclient)."""

from __future__ import annotations

from typing import Any

import pymysql

from nsj_queue_lib.db import mysql_driver
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


def _mysqlclient_ignoring_and_chain() -> Any:
    """The same over mysqlclient (MySQLdb sends every statement through `query`)."""
    import MySQLdb.connections

    class MySQLdbIgnoresAndChain(MySQLdb.connections.Connection):
        def query(self, sql: Any) -> Any:
            if sql == b"COMMIT AND CHAIN":
                sql = b"COMMIT"
            return super().query(sql)

    return MySQLdbIgnoresAndChain


def _session(mariadb_queue, ignores_and_chain: bool = False) -> DbSession:
    srv = mariadb_queue.server
    kwargs = {"host": srv.host, "port": srv.port, "user": srv.user, "password": srv.password,
              "database": mariadb_queue.database, "autocommit": True, "charset": "utf8mb4"}
    if srv.driver == "mysqlclient":
        import MySQLdb.connections

        klass = (_mysqlclient_ignoring_and_chain() if ignores_and_chain
                 else MySQLdb.connections.Connection)
    else:
        klass = IgnoresAndChain if ignores_and_chain else pymysql.connections.Connection
    return DbSession(klass(**kwargs), dialect_for_driver("MYSQL"))


def _in_trans(session: DbSession) -> bool:
    status = mysql_driver.server_status(session.conn)
    assert status is not None  # both drivers tell (mysqlclient over MariaDB Connector/C)
    return bool(status & IN_TRANS)


def _insert(session: DbSession, mariadb_queue, key: str) -> None:
    session.execute(f"INSERT INTO {mariadb_queue.qeffects} (tarefa_id, chave, tipo) "
                    "VALUES (1, %(k)s, 'execute')", {"k": key})


def _keys(mariadb_queue) -> list:
    return sorted(e["chave"] for e in mariadb_queue.effects())


def test_a_chained_commit_opens_the_next_transaction_on_the_server(mariadb_queue):
    session = _session(mariadb_queue)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        assert _in_trans(session)
        session.begin()  # takes the chained transaction: no BEGIN
        _insert(session, mariadb_queue, "desfeito")
        session.rollback()
        session.begin()
        _insert(session, mariadb_queue, "gravado")
        session.commit()  # plain COMMIT: no transaction left open
        assert not _in_trans(session)
    finally:
        session.close()
    assert _keys(mariadb_queue) == ["gravado"]


def test_a_chain_the_server_ignores_is_followed_by_a_begin(mariadb_queue):
    # Fails without the server-status check: begin() sent no BEGIN, the INSERT ran in
    # autocommit and survived the rollback.
    session = _session(mariadb_queue, ignores_and_chain=True)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        assert not _in_trans(session)
        session.begin()
        _insert(session, mariadb_queue, "desfeito")
        session.rollback()
    finally:
        session.close()
    assert _keys(mariadb_queue) == []


def test_a_statement_between_a_chained_commit_and_begin_runs_in_autocommit(mariadb_queue):
    # `_end_chained`: the chained (empty) transaction is committed before the statement,
    # so its effect is durable even if the next transaction rolls back.
    session = _session(mariadb_queue)
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        _insert(session, mariadb_queue, "autocommit")
        assert not _in_trans(session)
        assert _keys(mariadb_queue) == ["autocommit"]  # visible to another session: committed
        session.begin()
        _insert(session, mariadb_queue, "desfeito")
        session.rollback()
    finally:
        session.close()
    assert _keys(mariadb_queue) == ["autocommit"]


def test_the_library_connects_with_the_driver_under_test(session, mariadb_queue):
    """DB_MYSQL_DRIVER (from NSJQ_TEST_MYSQL_DRIVER) picks the queue's driver: the suite
    run with mysqlclient really runs on it."""
    module = type(session.conn).__module__.split(".")[0]
    assert module == {"pymysql": "pymysql", "mysqlclient": "MySQLdb"}[mariadb_queue.server.driver]


class HidesStatus:
    """A real pymysql connection whose status flags the library cannot read (as with
    mysqlclient built on Oracle's libmysqlclient); `real` is the connection itself."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        if name in ("server_status", "_get_native_connection"):
            raise AttributeError(name)
        return getattr(self.real, name)


def test_without_the_servers_status_the_commit_is_plain_and_begin_follows(mariadb_queue):
    # Fails if chain_commit() sends AND CHAIN anyway: the server keeps a transaction open.
    srv = mariadb_queue.server
    real = pymysql.connections.Connection(
        host=srv.host, port=srv.port, user=srv.user, password=srv.password,
        database=mariadb_queue.database, autocommit=True, charset="utf8mb4")
    session = DbSession(HidesStatus(real), dialect_for_driver("MYSQL"))
    try:
        session.begin()
        session.chain_commit()
        session.commit()
        assert not real.server_status & IN_TRANS  # plain COMMIT
        session.begin()  # sends BEGIN
        assert real.server_status & IN_TRANS
        _insert(session, mariadb_queue, "desfeito")
        session.rollback()
    finally:
        session.close()
    assert _keys(mariadb_queue) == []
