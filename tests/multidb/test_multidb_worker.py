"""Multi-database mode end to end: real worker processes, two tenant databases, fake API.

The fake API (tests/multidb/conftest.py) plays the OAuth token endpoint and the
credentials endpoint on 127.0.0.1 and counts the calls; tenants 101 and 202 each
have their own PostgreSQL database with an `item` table.  The queue lives in
the test PostgreSQL (tests/conftest.py `queue`).
"""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

from tests.fixtures.waiting import eventually
from tests.multidb.conftest import (
    OAUTH_PASSWORD,
    TENANT_PASSWORD,
    FakeApi,
    multidb_env,
    tenant_items,
    tenant_sql,
)

WORKER = "tests.workers.multidb_worker"
THREE_ARGS = "tests.workers.multidb_three_args"
PUBSUB = "tests.workers.multidb_pubsub"
WEBHOOK = "nsj_queue_lib.worker_webhook"

# The passwords, and the fake's tokens ("access-token-<n>", "refresh-token-<n>").
SECRETS = (OAUTH_PASSWORD, TENANT_PASSWORD, "access-token-", "refresh-token-")


def insert(queue: Any, tenant: Any, **payload: Any) -> int:
    return queue.insert(json.dumps(payload), tenant=tenant)


def assert_no_secret(queue: Any, *workers: Any) -> None:
    """No password or token in any column of any queue row, nor in the workers' logs."""
    rows_text = json.dumps(queue.rows(), default=str)
    for secret in SECRETS:
        assert secret not in rows_text
        for w in workers:
            assert secret not in w.log(), f"segredo no log de {w.module}"


def wait_token_expired(api: FakeApi, lifetime: float = 2.0) -> None:
    """Until the last token issued is past its lifetime for the worker (expires_in minus
    the provider's 10 s margin), measured from when the fake API answered it."""
    issued_at = api.state.token_requests[-1]["at"]
    eventually(lambda: time.monotonic() >= issued_at + lifetime + 0.1, lifetime + 5,
               interval=0.05, message="token expirado")


def wait_chain_status(queue: Any, first_id: int, status: str, timeout: float = 30.0) -> dict:
    """The first attempt of task `first_id`'s chain whose status is `status` (polls)."""
    return eventually(lambda: next((r for r in queue.chain(first_id) if r["status"] == status),
                                   None),
                      timeout, interval=0.05, message=f"cadeia {first_id} -> {status}")


def parse_info(message: str) -> dict:
    """{'db': ..., 'pid': ..., 'tenant': ...} from the message returned by tenant_info()."""
    m = re.search(r"db=(\S+) pid=(\d+) tenant=(\S+)", message or "")
    assert m, message
    return {"db": m.group(1), "pid": int(m.group(2)), "tenant": m.group(3)}


# -- the normal path ------------------------------------------------------------------


def test_two_tenants_write_into_their_own_databases_with_one_token_and_cached_credentials(
        pg_queue, fake_api: FakeApi, tenants):
    ids = {}
    for i in range(10):
        ids[insert(pg_queue, 101, txt=f"a{i}", efeito=f"a{i}")] = 101
        ids[insert(pg_queue, 202, txt=f"b{i}", efeito=f"b{i}")] = 202
    worker = pg_queue.start_worker(WORKER, **multidb_env(fake_api))
    pg_queue.wait_idle()

    rows = pg_queue.rows()
    assert len(rows) == 20
    assert all(r["status"] == "sucesso" for r in rows), [r["mensagem"] for r in rows]
    # Each task wrote into its own tenant's database, and the write was committed.
    assert sorted(tenant_items(tenants[101])) == sorted(f"a{i}@1" for i in range(10))
    assert sorted(tenant_items(tenants[202])) == sorted(f"b{i}@1" for i in range(10))
    # bd_conn writes committed with the success mark, too.
    assert len(pg_queue.effects()) == 20

    pids: dict = {101: set(), 202: set()}
    for r in rows:
        info = parse_info(r["mensagem"])
        tenant = ids[r["id"]]
        assert info["db"] == tenants[tenant] and info["tenant"] == str(tenant)
        pids[tenant].add(info["pid"])
    # One connection per tenant, reused by all its tasks.
    assert len(pids[101]) == 1 and len(pids[202]) == 1, pids

    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 0)
    assert st.credentials_calls == 2
    assert sorted(r["json"]["tenant"] for r in st.credentials_requests) == [101, 202]
    assert {r["headers"]["Authorization"] for r in st.credentials_requests} == {
        "Bearer access-token-1"}
    assert "Traceback" not in worker.log()
    assert_no_secret(pg_queue, worker)


def test_expired_access_token_is_refreshed(pg_queue, fake_api: FakeApi, tenants):
    # 12 s minus the provider's 10 s safety margin: the access token lasts 2 s.
    fake_api.state.expires_in = 12
    worker = pg_queue.start_worker(WORKER, **multidb_env(fake_api))
    first = insert(pg_queue, 101, txt="antes")
    pg_queue.wait_status(first, "sucesso")
    assert (fake_api.state.password_grants, fake_api.state.refresh_grants) == (1, 0)
    wait_token_expired(fake_api)
    # Tenant 202's credentials are not cached yet: fetching them needs a token again.
    second = insert(pg_queue, 202, txt="depois")
    pg_queue.wait_status(second, "sucesso")

    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 1)
    refresh = st.token_requests[1]["form"]
    assert refresh["grant_type"] == "refresh_token"
    assert refresh["refresh_token"] == "refresh-token-1"
    assert "password" not in refresh
    assert [r["headers"]["Authorization"] for r in st.credentials_requests] == [
        "Bearer access-token-1", "Bearer access-token-2"]
    assert tenant_items(tenants[101]) == ["antes@1"]
    assert tenant_items(tenants[202]) == ["depois@1"]
    assert_no_secret(pg_queue, worker)


def test_expired_refresh_token_falls_back_to_a_password_grant(pg_queue, fake_api: FakeApi,
                                                               tenants):
    fake_api.state.expires_in = 12
    fake_api.state.refresh_expires_in = 12
    worker = pg_queue.start_worker(WORKER, **multidb_env(fake_api))
    first = insert(pg_queue, 101, txt="antes")
    pg_queue.wait_status(first, "sucesso")
    wait_token_expired(fake_api)
    second = insert(pg_queue, 202, txt="depois")
    pg_queue.wait_status(second, "sucesso")

    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (2, 0)
    assert [r["form"]["grant_type"] for r in st.token_requests] == ["password", "password"]
    assert tenant_items(tenants[202]) == ["depois@1"]
    assert_no_secret(pg_queue, worker)


def test_lost_tenant_connection_is_reopened_with_the_cached_credentials(
        pg_queue, fake_api: FakeApi, tenants):
    db = tenants[101]
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=5, **multidb_env(fake_api))
    first = insert(pg_queue, 101, txt="antes")
    old_pid = parse_info(pg_queue.wait_status(first, "sucesso")["mensagem"])["pid"]
    # The tenant database drops the pooled connection between two tasks.
    assert tenant_sql(db, "SELECT pg_terminate_backend(%s)", (old_pid,)) == [(True,)]

    second = insert(pg_queue, 101, txt="depois")
    done = wait_chain_status(pg_queue, second, "sucesso")
    assert parse_info(done["mensagem"])["pid"] != old_pid
    assert tenant_items(db) == ["antes@1", f"depois@{done['tentativa']}"]
    # Reconnected with the cached credentials: no second call to the API.
    assert fake_api.state.credentials_calls == 1
    pg_queue.wait_idle()
    assert_no_secret(pg_queue, worker)


def test_three_argument_execute_still_works_with_the_mode_on(pg_queue, fake_api: FakeApi,
                                                             tenants):
    ids = [pg_queue.insert(f"p{i}", tenant=101) for i in range(3)]
    ids.append(pg_queue.insert("sem tenant", tenant=None))
    worker = pg_queue.start_worker(THREE_ARGS, **multidb_env(fake_api))
    pg_queue.wait_idle()
    for task_id in ids:
        row = pg_queue.row(task_id)
        assert row["status"] == "sucesso", row["mensagem"]
        assert row["mensagem"] == f"tres argumentos {task_id}"
    assert sorted(e["chave"] for e in pg_queue.effects()) == ["p0", "p1", "p2", "sem tenant"]
    # execute cannot receive multi_db_conn: no token, credentials or tenant connection.
    assert fake_api.state.token_calls == 0 and fake_api.state.credentials_calls == 0
    assert "Traceback" not in worker.log()


# -- atomicity ---------------------------------------------------------------------


def test_tenant_writes_of_a_failed_attempt_are_rolled_back(pg_queue, fake_api: FakeApi, tenants):
    retried = insert(pg_queue, 101, txt="instavel", efeito="instavel", fail_until=2)
    doomed = insert(pg_queue, 202, txt="sempre", efeito="sempre", fail=True)
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=2, **multidb_env(fake_api))
    wait_chain_status(pg_queue, retried, "sucesso")
    eventually(lambda: pg_queue.rows("dead AND status = 'sucesso'"), 30,
               message="fila de mortos tratada")
    pg_queue.wait_idle()

    chain = pg_queue.chain(retried)
    assert [(r["tentativa"], r["status"]) for r in chain] == [(1, "falha"), (2, "sucesso")]
    assert "falha programada na tentativa 1" in chain[0]["mensagem"]
    # Only the successful attempt's tenant write remains.
    assert tenant_items(tenants[101]) == ["instavel@2"]
    assert [e["tarefa_id"] for e in pg_queue.effects("chave = 'instavel'")] == [chain[1]["id"]]

    # Every attempt of the doomed task failed: none of its writes remain, only the
    # dead-letter handler's (which also got the tenant connection).
    assert [(r["tentativa"], r["status"]) for r in pg_queue.chain(doomed)] == [
        (1, "falha"), (2, "falha")]
    dead_rows = pg_queue.rows("dead")
    assert len(dead_rows) == 1 and dead_rows[0]["status"] == "sucesso"
    assert dead_rows[0]["live_id"] in {r["id"] for r in pg_queue.chain(doomed)}
    assert tenant_items(tenants[202]) == [f"morta {dead_rows[0]['live_id']}"]
    assert pg_queue.effects("chave = 'sempre'") == []
    assert_no_secret(pg_queue, worker)


def test_tenant_commit_failure_fails_the_task_and_rolls_back_the_queue_writes(
        pg_queue, fake_api: FakeApi, tenants):
    db = tenants[101]
    tenant_sql(db, "CREATE TABLE IF NOT EXISTS item_unico (txt text, CONSTRAINT "
                   "item_unico_txt UNIQUE (txt) DEFERRABLE INITIALLY DEFERRED)")
    tenant_sql(db, "TRUNCATE item_unico")
    # Two equal rows: accepted by the INSERT, refused at the tenant COMMIT, which
    # happens after execute returned, right before the queue's COMMIT.
    bad = insert(pg_queue, 101, txt="junto", unico="x", efeito="junto")
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=1, **multidb_env(fake_api))
    row = pg_queue.wait_status(bad, "falha")
    assert "item_unico_txt" in row["mensagem"], row["mensagem"]
    eventually(lambda: pg_queue.rows("dead AND status = 'sucesso'"), 30, message="morta tratada")
    # The queue transaction (its bd_conn write and the success mark) rolled back too.
    assert pg_queue.effects() == []
    assert tenant_sql(db, "SELECT count(*) FROM item_unico") == [(0,)]
    assert "junto@1" not in tenant_items(db)

    # The tenant connection is still usable afterwards.
    good = insert(pg_queue, 101, txt="depois")
    pg_queue.wait_status(good, "sucesso")
    assert "depois@1" in tenant_items(db)
    pg_queue.wait_idle()
    assert_no_secret(pg_queue, worker)


# -- the credentials API failing ------------------------------------------------------


def test_credentials_api_500_fails_clearly_then_tasks_succeed_when_it_is_back(
        pg_queue, fake_api: FakeApi, tenants):
    fake_api.state.credentials_status = 500
    task = insert(pg_queue, 101, txt="espera")
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=10, LOG_DEBUG="true",
                                   **multidb_env(fake_api))
    failed = wait_chain_status(pg_queue, task, "falha")
    message = failed["mensagem"]
    assert "HTTP 500" in message and "tenant 101" in message, message
    assert tenant_items(tenants[101]) == []

    fake_api.state.credentials_status = None
    done = wait_chain_status(pg_queue, task, "sucesso")
    assert tenant_items(tenants[101]) == [f"espera@{done['tentativa']}"]
    assert fake_api.state.password_grants == 1  # the token stayed cached meanwhile
    assert "HTTP 500" in worker.log() and "tenant 101" in worker.log()
    pg_queue.wait_idle()
    assert_no_secret(pg_queue, worker)


def test_credentials_api_closed_fails_clearly_then_tasks_succeed_when_it_is_back(
        pg_queue, fake_api: FakeApi, tenants):
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=10, LOG_DEBUG="true",
                                   **multidb_env(fake_api))
    warm = insert(pg_queue, 202, txt="aquece")
    pg_queue.wait_status(warm, "sucesso")  # token and tenant 202's credentials cached

    fake_api.stop()
    try:
        task = insert(pg_queue, 101, txt="espera")
        failed = wait_chain_status(pg_queue, task, "falha")
        message = failed["mensagem"]
        assert "tenant 101" in message and "inacessível" in message, message
        # Tenant 202 does not need the API: cached credentials, pooled connection.
        cached = insert(pg_queue, 202, txt="sem api")
        pg_queue.wait_status(cached, "sucesso")
        assert tenant_items(tenants[202]) == ["aquece@1", "sem api@1"]
    finally:
        fake_api.start()  # same port

    done = wait_chain_status(pg_queue, task, "sucesso")
    assert tenant_items(tenants[101]) == [f"espera@{done['tentativa']}"]
    assert done["tentativa"] >= 2
    pg_queue.wait_idle()
    assert_no_secret(pg_queue, worker)


def test_tasks_without_usable_tenant_fail_with_a_clear_message(pg_queue, fake_api: FakeApi,
                                                               tenants):
    unknown = insert(pg_queue, 999, txt="x")
    no_tenant = insert(pg_queue, None, txt="y")
    worker = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY=1, **multidb_env(fake_api))
    assert "HTTP 404 para o tenant 999" in pg_queue.wait_status(unknown, "falha")["mensagem"]
    assert "sem tenant" in pg_queue.wait_status(no_tenant, "falha")["mensagem"]
    pg_queue.wait_idle()
    assert_no_secret(pg_queue, worker)


# -- pub/sub and webhook ----------------------------------------------------------------


def _add_subscriber(queue: Any, sub_id: str, url: Any = None, method: Any = None) -> None:
    queue.sql(f"INSERT INTO {queue.sub_table} (id, processo, url, http_method, ativo) "
              "VALUES (%s, 'proc', %s, %s, true)", (sub_id, url, method))


def _publish(queue: Any, payload: dict, tenant: int) -> int:
    return queue.client().insert_task_pub_sub("teste", "teste", "proc", None,
                                              json.dumps(payload), tenant=tenant)


def test_pubsub_handler_receives_multi_db_conn(pg_queue, fake_api: FakeApi, tenants):
    _add_subscriber(pg_queue, "grava")
    _add_subscriber(pg_queue, "simples")
    pub_a = _publish(pg_queue, {"txt": "pub-a"}, 101)
    pub_b = _publish(pg_queue, {"txt": "pub-b"}, 202)
    worker = pg_queue.start_worker(PUBSUB, **multidb_env(fake_api))
    eventually(lambda: pg_queue.count("subscriber_id IS NOT NULL AND status = 'sucesso'") == 4,
               30, message="4 tarefas de assinantes")
    pg_queue.wait_idle()

    assert all(r["status"] == "sucesso" for r in pg_queue.rows()), pg_queue.rows()
    assert tenant_items(tenants[101]) == ["pub-a@grava"]
    assert tenant_items(tenants[202]) == ["pub-b@grava"]
    for pub, tenant in ((pub_a, 101), (pub_b, 202)):
        [grava] = pg_queue.rows("publication_id = %s AND subscriber_id = 'grava'", (pub,))
        assert parse_info(grava["mensagem"])["db"] == tenants[tenant]
    assert sorted(e["chave"] for e in pg_queue.effects()) == ["simples", "simples"]
    assert_no_secret(pg_queue, worker)


def test_webhook_worker_works_with_the_mode_on(pg_queue, fake_api: FakeApi, tenants, http_endpoint):
    _add_subscriber(pg_queue, "hook", url=http_endpoint.url + "/hook", method="POST")
    pub = _publish(pg_queue, {"pedido": 7}, 101)
    worker = pg_queue.start_worker(WEBHOOK, **multidb_env(fake_api))
    row = eventually(lambda: next(iter(pg_queue.rows(
        "publication_id = %s AND status = 'sucesso'", (pub,))), None), 30, message="webhook")
    pg_queue.wait_idle()
    assert "200" in row["mensagem"] and "/hook" in row["mensagem"]
    [request] = http_endpoint.received("/hook")
    assert request.method == "POST" and json.loads(request.body) == {"pedido": 7}
    assert_no_secret(pg_queue, worker)


# -- configuration ---------------------------------------------------------------------


def test_missing_user_exits_2_naming_the_variable(pg_queue, fake_api: FakeApi):
    env = multidb_env(fake_api)
    del env["MULTI_DATABASE_USER"]
    worker = pg_queue.start_worker(WORKER, **env)
    assert worker.wait_exit(20) == 2
    log = worker.log()
    assert "MULTI_DATABASE_USER" in log, log
    assert OAUTH_PASSWORD not in log
    assert fake_api.state.token_calls == 0 and fake_api.state.credentials_calls == 0


def test_debug_logs_keep_oauth_and_credentials_url_secrets_out(pg_queue, fake_api: FakeApi,
                                                                tenants):
    """LOG_DEBUG=true (and the dependencies' DEBUG too) with secrets in the query strings
    of OAUTH_TOKEN_URL and of the credentials URL: they reach the API, never a log line
    or a row, also when the credentials API is unreachable (the error names its URL)."""
    oauth_q, cred_q = "client_secret=oauth-query-3e9a", "api_key=cred-query-71bd"
    env = multidb_env(fake_api, LOG_DEBUG="true", LOG_DEBUG_DEPENDENCIES="true",
                      OAUTH_TOKEN_URL=f"{fake_api.token_url}?{oauth_q}",
                      MULTI_DATABASE_API_CREDETIALS_URL=f"{fake_api.credentials_url}?{cred_q}")
    ok = insert(pg_queue, 101, txt="debug")
    worker = pg_queue.start_worker(WORKER, **env)
    pg_queue.wait_status(ok, "sucesso")
    assert tenant_items(tenants[101]) == ["debug@1"]
    assert set(fake_api.state.queries) == {oauth_q, cred_q}  # the API got its queries
    worker.stop()
    with socket.socket() as sock:  # a local port where nothing listens
        sock.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env["MULTI_DATABASE_API_CREDETIALS_URL"] = f"{refused}/credentials?{cred_q}"
    bad = insert(pg_queue, 202, txt="nunca")
    second = pg_queue.start_worker(WORKER, QUEUE_MAX_RETRY="1", **env)
    row = pg_queue.wait_status(bad, "falha")
    assert "API de credenciais inacessível" in row["mensagem"], row["mensagem"]
    second.stop()
    for w in (worker, second):
        log = w.log()
        assert " DEBUG " in log and "urllib3" in log
        for secret in ("oauth-query-3e9a", "cred-query-71bd"):
            assert secret not in log, f"{secret} no log de {w.module}"
    rows_text = json.dumps(pg_queue.rows(), default=str)
    assert "oauth-query-3e9a" not in rows_text and "cred-query-71bd" not in rows_text
    assert_no_secret(pg_queue, worker, second)
