"""TenantConnections against the real PostgreSQL and MariaDB of the suite."""

from __future__ import annotations

import logging
import socket
import uuid
from typing import Any, Iterator

import psycopg2
import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.multidb import (
    CredentialsClient,
    MultiDatabaseError,
    TenantConnections,
    TokenProvider,
)
from tests.fixtures.database import MySqlServer, require_mysql

from .conftest import (
    OAUTH_PASSWORD,
    TENANT_PASSWORD,
    FakeApi,
    FakeClock,
    pg_connect,
    pg_credentials,
)

logger = logging.getLogger(__name__)


@pytest.fixture
def creds_client(settings: Settings, clock: FakeClock) -> Iterator[CredentialsClient]:
    tokens = TokenProvider(settings, http_timeout=5.0, clock=clock)
    client = CredentialsClient(settings, tokens, http_timeout=5.0, clock=clock)
    yield client
    client.close()
    tokens.close()


@pytest.fixture
def pool(creds_client: CredentialsClient, clock: FakeClock) -> Iterator[TenantConnections]:
    p = TenantConnections(creds_client, idle_timeout=300, connect_timeout=3,
                          check_after_idle=30, clock=clock)
    yield p
    p.close_all()


@pytest.fixture
def tenants(fake_api: FakeApi, tenant_dbs: dict[int, str]) -> dict[int, str]:
    for tenant, db in tenant_dbs.items():
        fake_api.set_tenant(tenant, pg_credentials(db))
    return tenant_dbs


def _pid(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def _count(db: str) -> int:
    conn = pg_connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM item")
            return cur.fetchone()[0]
    finally:
        conn.close()


def _terminate(pg_admin: Any, pid: int) -> None:
    with pg_admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert cur.fetchone()[0] is True


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connects_to_the_tenant_database_with_autocommit_off(
        pool: TenantConnections, tenants: dict[int, str]) -> None:
    conn = pool.acquire(101)
    assert conn.autocommit is False
    with conn.cursor() as cur:
        cur.execute("SELECT current_database()")
        assert cur.fetchone()[0] == tenants[101]
        cur.execute("INSERT INTO item (txt) VALUES ('rolled back')")
    pool.release(101, conn, ok=False)
    assert _count(tenants[101]) == 0

    conn = pool.acquire(101)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO item (txt) VALUES ('kept')")
    assert _count(tenants[101]) == 0  # not visible before the commit
    conn.commit()
    pool.release(101, conn, ok=True)
    assert _count(tenants[101]) == 1

    # release never commits: uncommitted work of an "ok" task is rolled back.
    conn = pool.acquire(101)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO item (txt) VALUES ('forgotten')")
    pool.release(101, conn, ok=True)
    assert _count(tenants[101]) == 1

    conn = pool.acquire(202)
    with conn.cursor() as cur:
        cur.execute("SELECT current_database()")
        assert cur.fetchone()[0] == tenants[202]
    pool.release(202, conn, ok=True)


def test_one_connection_reused_per_tenant(pool: TenantConnections, tenants: dict[int, str],
                                          fake_api: FakeApi, clock: FakeClock) -> None:
    seen: dict[int, set[int]] = {101: set(), 202: set()}
    for _ in range(5):
        for tenant in (101, 202):
            conn = pool.acquire(tenant)
            seen[tenant].add(_pid(conn))
            conn.commit()
            pool.release(tenant, conn, ok=True)
            clock.advance(5)
    assert all(len(pids) == 1 for pids in seen.values())
    assert seen[101] != seen[202]
    assert fake_api.state.credentials_calls == 2
    assert fake_api.state.token_calls == 1
    assert pool.stats() == {"idle": 2, "in_use": 0}


def test_concurrent_use_of_one_tenant_gets_distinct_connections(
        pool: TenantConnections, tenants: dict[int, str]) -> None:
    first = pool.acquire(101)
    second = pool.acquire(101)
    assert first is not second and _pid(first) != _pid(second)
    assert pool.stats() == {"idle": 0, "in_use": 2}
    pool.release(101, first, ok=True)
    pool.release(101, second, ok=True)
    assert second.closed  # only one idle connection is kept per tenant
    assert pool.acquire(101) is first


def test_reconnects_after_terminate_when_idle(pool: TenantConnections, tenants: dict[int, str],
                                              pg_admin: Any, clock: FakeClock,
                                              fake_api: FakeApi) -> None:
    conn = pool.acquire(101)
    pid = _pid(conn)
    conn.commit()
    pool.release(101, conn, ok=True)
    _terminate(pg_admin, pid)
    clock.advance(31)  # idle longer than check_after_idle: SELECT 1 before reuse
    new = pool.acquire(101)
    assert new is not conn and conn.closed
    assert _pid(new) != pid
    with new.cursor() as cur:
        cur.execute("INSERT INTO item (txt) VALUES ('after reconnect')")
    new.commit()
    pool.release(101, new, ok=True)
    assert _count(tenants[101]) == 1
    assert fake_api.state.credentials_calls == 1  # cached credentials were fine


def test_reconnects_after_terminate_during_a_task(pool: TenantConnections,
                                                  tenants: dict[int, str],
                                                  pg_admin: Any) -> None:
    conn = pool.acquire(202)
    pid = _pid(conn)
    conn.commit()
    pool.release(202, conn, ok=True)
    # Reused at once (no check), then killed while "the task" runs.
    conn = pool.acquire(202)
    _terminate(pg_admin, pid)
    with pytest.raises(psycopg2.OperationalError):
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
    pool.release(202, conn, ok=False)
    assert pool.stats() == {"idle": 0, "in_use": 0}  # dropped, not pooled
    new = pool.acquire(202)
    assert _pid(new) != pid
    pool.release(202, new, ok=True)


def test_failed_task_connection_is_checked_before_reuse(
        pool: TenantConnections, tenants: dict[int, str], pg_admin: Any) -> None:
    conn = pool.acquire(101)
    pid = _pid(conn)
    pool.release(101, conn, ok=False)  # rollback works: pooled but flagged
    assert pool.stats()["idle"] == 1
    _terminate(pg_admin, pid)
    new = pool.acquire(101)  # SELECT 1 fails -> reconnect
    assert new is not conn and _pid(new) != pid
    pool.release(101, new, ok=True)


def test_connection_in_failed_transaction_is_rolled_back(
        pool: TenantConnections, tenants: dict[int, str]) -> None:
    conn = pool.acquire(101)
    with pytest.raises(psycopg2.Error):
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM no_such_table")
    pool.release(101, conn, ok=False)
    again = pool.acquire(101)
    assert again is conn
    with again.cursor() as cur:
        cur.execute("SELECT 1")
    pool.release(101, again, ok=True)


def test_close_idle_and_close_all(pool: TenantConnections, tenants: dict[int, str],
                                  clock: FakeClock) -> None:
    a = pool.acquire(101)
    pool.release(101, a, ok=True)
    clock.advance(200)
    b = pool.acquire(202)
    pool.release(202, b, ok=True)
    clock.advance(100)  # a idle for 300 s, b for 100 s
    assert pool.close_idle() == 1
    assert a.closed and not b.closed
    c = pool.acquire(101)
    assert c is not a
    pool.close_all()
    assert b.closed and not c.closed  # in use: closed on release
    pool.release(101, c, ok=True)
    assert c.closed
    assert pool.stats() == {"idle": 0, "in_use": 0}
    d = pool.acquire(202)  # still usable after close_all
    pool.release(202, d, ok=True)


def test_connect_failure_is_a_multidatabase_error(pool: TenantConnections, fake_api: FakeApi,
                                                  local_pg: None,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port = _closed_port()
    fake_api.set_tenant(303, pg_credentials("erp_303", port=port))
    with pytest.raises(MultiDatabaseError) as info:
        pool.acquire(303)
    text = str(info.value)
    assert "tenant 303" in text and f"127.0.0.1:{port}" in text and "erp_303" in text
    assert info.value.tenant == 303
    assert TENANT_PASSWORD not in text
    assert TENANT_PASSWORD not in caplog.text and OAUTH_PASSWORD not in caplog.text
    # The cached credentials were suspect: fetched again once (unchanged -> no retry).
    assert fake_api.state.credentials_calls == 2
    assert pool.stats() == {"idle": 0, "in_use": 0}


def test_stale_credentials_are_fetched_again(pool: TenantConnections, fake_api: FakeApi,
                                             tenant_dbs: dict[int, str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    db = tenant_dbs[101]
    # First answer: a role that does not exist (what a rotated account looks
    # like under trust auth); after invalidation the API answers the right one.
    fake_api.set_tenant(101, pg_credentials(db, user="nsjq_no_such_role"), pg_credentials(db))
    conn = pool.acquire(101)
    with conn.cursor() as cur:
        cur.execute("SELECT current_user")
        assert cur.fetchone()[0] == "postgres"
    pool.release(101, conn, ok=True)
    assert fake_api.state.credentials_calls == 2
    assert "nsjq_no_such_role" in caplog.text  # the first failure was logged
    assert TENANT_PASSWORD not in caplog.text


def test_credentials_api_down_is_a_multidatabase_error(pool: TenantConnections,
                                                       fake_api: FakeApi,
                                                       tenants: dict[int, str]) -> None:
    fake_api.state.credentials_status = 500
    with pytest.raises(MultiDatabaseError, match=r"HTTP 500 para o tenant 101"):
        pool.acquire(101)
    fake_api.state.credentials_status = None
    conn = pool.acquire(101)
    pool.release(101, conn, ok=True)


def test_context_manager(pool: TenantConnections, tenants: dict[int, str]) -> None:
    with pytest.raises(RuntimeError):
        with pool.connection(101) as conn:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO item (txt) VALUES ('x')")
            raise RuntimeError("task failed")
    assert _count(tenants[101]) == 0
    with pool.connection(101) as conn:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO item (txt) VALUES ('y')")
        conn.commit()
    assert _count(tenants[101]) == 1


def test_foreign_connection_is_closed(pool: TenantConnections, tenants: dict[int, str]) -> None:
    foreign = pg_connect(tenants[101])
    pool.release(101, foreign, ok=True)
    assert foreign.closed
    assert pool.stats() == {"idle": 0, "in_use": 0}


def test_unknown_driver(creds_client: CredentialsClient) -> None:
    from nsj_queue_lib.exceptions import ConfigError

    with pytest.raises(ConfigError):
        TenantConnections(creds_client, driver="ORACLE")
    assert TenantConnections(creds_client, driver="single_store").driver == "MYSQL"


# -- MySQL / MariaDB (pymysql) ----------------------------------------------

@pytest.fixture
def mysql_server() -> MySqlServer:
    """The suite's MariaDB (NSJQ_TEST_MYSQL_*); fails under CI when it does not answer."""
    return require_mysql()


@pytest.fixture
def mysql_db(mysql_server: MySqlServer) -> Iterator[str]:
    admin = mysql_server.connect()
    name = f"nsjq_mdb_{uuid.uuid4().hex[:10]}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"CREATE TABLE `{name}`.item (id int AUTO_INCREMENT PRIMARY KEY, "
                    "txt varchar(50) NOT NULL) ENGINE=InnoDB")
    try:
        yield name
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.mark.mysql
def test_mysql_driver(creds_client: CredentialsClient, fake_api: FakeApi, mysql_db: str,
                      mysql_server: MySqlServer, clock: FakeClock) -> None:
    my = mysql_server
    fake_api.set_tenant(9, {"hostname": my.host, "port": my.port, "db_name": mysql_db,
                            "user": my.user, "password": my.password})
    pool = TenantConnections(creds_client, driver="MYSQL", clock=clock)
    try:
        conn = pool.acquire(9)
        assert conn.get_autocommit() is False
        with conn.cursor() as cur:
            cur.execute("INSERT INTO item (txt) VALUES ('rolled back')")
        pool.release(9, conn, ok=False)
        conn2 = pool.acquire(9)
        assert conn2 is conn
        with conn2.cursor() as cur:
            cur.execute("SELECT count(*) FROM item")
            assert cur.fetchone()[0] == 0
            cur.execute("INSERT INTO item (txt) VALUES ('kept')")
        conn2.commit()
        pool.release(9, conn2, ok=True)
        conn2.close()  # a closed connection is detected and replaced
        conn3 = pool.acquire(9)
        assert conn3 is not conn2
        with conn3.cursor() as cur:
            cur.execute("SELECT count(*) FROM item")
            assert cur.fetchone()[0] == 1
        pool.release(9, conn3, ok=True)
    finally:
        pool.close_all()
