"""A live fleet upgrading pod by pod: real 1.2.2 workers and producers beside 2.x ones on
one queue, SIGKILL of one worker of each kind mid-run; every committed side effect exactly
once.  Follows docs/howto/migrar-1.2.2.md (schema upgrade with 1.2.2 running, then 2.x
workers with no compatibility variable: the upgraded queue is in mixed-fleet mode, and
that alone keeps them safe)."""

from __future__ import annotations

import time

from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.queue_client import QueueClient
from tests.compat.mixed import LEGACY_PLAIN, LEGACY_PUBSUB
from tests.fixtures.waiting import eventually

TOTAL = 2000


def _value(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()[0]


def _insert_v2(conn, fleet, kind, first, count, prefix):
    producer = fleet_conn = None
    try:
        import psycopg2

        fleet_conn = psycopg2.connect(**{"host": conn.info.host, "port": conn.info.port,
                                         "dbname": conn.info.dbname, "user": conn.info.user})
        producer = QueueClient(fleet_conn, f"{fleet.schema}.{fleet.fila}",
                               f"{fleet.schema}.{fleet.fila}_subscriber")
        insert = producer.insert_task if kind == "plain" else producer.insert_task_pub_sub
        for i in range(first, first + count):
            insert("teste", "teste", "proc", None, f"{prefix}{i:05d}")
        fleet_conn.commit()
    finally:
        if fleet_conn is not None:
            fleet_conn.close()


def _wait_done(conn, fleet, expected_keys, deadline):
    s, f = fleet.schema, fleet.fila

    def done():
        keys = _value(conn, f"SELECT count(DISTINCT chave) FROM {s}.efeitos")
        active = _value(conn, f"SELECT count(*) FROM {s}.{f} WHERE status IN "
                              "('pendente', 'agendada', 'processando')")
        return keys >= expected_keys and active == 0

    try:
        eventually(done, deadline, interval=0.5, message="fila mista concluída")
    except AssertionError:
        print(fleet.logs())
        raise


def _assert_exactly_once(conn, fleet, expected_keys):
    s = fleet.schema
    dups = _value(conn, f"SELECT count(*) FROM (SELECT chave FROM {s}.efeitos GROUP BY chave "
                        "HAVING count(*) > 1) d")
    keys = _value(conn, f"SELECT count(DISTINCT chave) FROM {s}.efeitos")
    assert (keys, dups) == (expected_keys, 0), fleet.logs()
    kinds = _value(conn, f"SELECT array_agg(DISTINCT tipo ORDER BY tipo) FROM {s}.efeitos")
    assert kinds == ["v1", "v2"]  # both versions did work
    dead = _value(conn, f"SELECT count(*) FROM {s}.{fleet.fila} WHERE dead")
    assert dead == 0


def test_plain_queue_mixed_fleet_with_sigkill_runs_every_task_once(legacy_queue):
    conn, fleet = legacy_queue
    v1 = [fleet.start_legacy(LEGACY_PLAIN, f"plain{i}") for i in range(2)]
    fleet.produce_legacy("plain", 0, 300, "k")
    # Step 1 of the procedure: upgrade the schema while 1.2.2 works on the queue.
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    assert schema.verify(conn, POSTGRES, fleet.schema, fleet.fila).ok
    # Step 2: 2.x workers join (no QUEUE_COMPAT_1_2_2: the queue's mode decides).
    v2 = [fleet.start_v2("tests.compat.worker_v2", f"plain{i}") for i in range(2)]
    fleet.produce_legacy("plain", 300, 850, "k")
    _insert_v2(conn, fleet, "plain", 1150, 850, "k")
    eventually(lambda: _value(conn, f"SELECT count(*) FROM {fleet.schema}.efeitos") > 700,
               60, interval=0.2, message="metade")
    for group in (v1, v2):
        group[0].kill9()
    fleet.start_legacy(LEGACY_PLAIN, "plain-restart")
    fleet.start_v2("tests.compat.worker_v2", "plain-restart")
    started = time.monotonic()
    _wait_done(conn, fleet, TOTAL, 150)
    _assert_exactly_once(conn, fleet, TOTAL)
    rescued = _value(conn, f"SELECT count(*) FROM {fleet.schema}.{fleet.fila} "
                           "WHERE status IN ('falha', 'falha_processando')")
    print(f"mistura concluída {time.monotonic() - started:.1f} s após os SIGKILL; "
          f"{rescued} tentativa(s) interrompida(s) e resgatada(s)")


def test_batch_mode_mixed_fleet_with_sigkill_runs_every_task_once(legacy_queue):
    """QUEUE_BATCH_SIZE=10 beside 1.2.2 (the upgraded queue's mixed-fleet mode): locks, rescue
    and the SIGKILL of a worker of each version mid-run keep every effect exactly once."""
    conn, fleet = legacy_queue
    s, f = fleet.schema, fleet.fila
    # Which transaction wrote each effect: 2.x effects sharing one show batches.
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {s}.efeitos ADD COLUMN tx bigint DEFAULT txid_current()")
    total = 1200
    v1 = [fleet.start_legacy(LEGACY_PLAIN, f"lote-v1-{i}") for i in range(2)]
    fleet.produce_legacy("plain", 0, 200, "b")
    schema.upgrade(conn, POSTGRES, s, f)
    v2 = [fleet.start_v2("tests.compat.worker_v2", f"lote{i}", QUEUE_BATCH_SIZE="10")
          for i in range(2)]
    fleet.produce_legacy("plain", 200, 500, "b")
    _insert_v2(conn, fleet, "plain", 700, 500, "b")
    eventually(lambda: _value(conn, f"SELECT count(*) FROM {s}.efeitos WHERE tipo = 'v2'")
               > 150, 60, interval=0.1, message="2.x em lotes")
    for group in (v1, v2):
        group[0].kill9()
    fleet.start_legacy(LEGACY_PLAIN, "lote-v1-restart")
    fleet.start_v2("tests.compat.worker_v2", "lote-restart", QUEUE_BATCH_SIZE="10")
    _wait_done(conn, fleet, total, 150)
    _assert_exactly_once(conn, fleet, total)
    biggest = _value(conn, f"SELECT max(n) FROM (SELECT count(*) AS n FROM {s}.efeitos "
                           "WHERE tipo = 'v2' GROUP BY tx) b")
    assert 1 < biggest <= 10, biggest
    done = _value(conn, f"SELECT count(*) FROM {s}.{f} WHERE status = 'sucesso'")
    assert done >= total


def test_pubsub_queue_mixed_fleet_with_sigkill_runs_every_delivery_once(legacy_queue):
    conn, fleet = legacy_queue
    s, f = fleet.schema, fleet.fila
    with conn.cursor() as cur:
        for sub in ("s1", "s2", "s3"):
            cur.execute(f"INSERT INTO {s}.{f}_subscriber (id, processo, ativo) "
                        "VALUES (%s, 'proc', true)", (sub,))
    v1 = [fleet.start_legacy(LEGACY_PUBSUB, f"pubsub{i}") for i in range(2)]
    fleet.produce_legacy("pubsub", 0, 60, "p")
    schema.upgrade(conn, POSTGRES, s, f)
    v2 = [fleet.start_v2("tests.compat.worker_v2", f"pubsub{i}", TEST_KIND="pubsub")
          for i in range(2)]
    fleet.produce_legacy("pubsub", 60, 120, "p")
    _insert_v2(conn, fleet, "pubsub", 180, 120, "p")
    eventually(lambda: _value(conn, f"SELECT count(*) FROM {s}.efeitos") > 250, 60,
               interval=0.2, message="metade")
    for group in (v1, v2):
        group[0].kill9()
    fleet.start_legacy(LEGACY_PUBSUB, "pubsub-restart")
    fleet.start_v2("tests.compat.worker_v2", "pubsub-restart", TEST_KIND="pubsub")
    _wait_done(conn, fleet, 300 * 3, 150)
    _assert_exactly_once(conn, fleet, 300 * 3)


def test_worker_with_compat_off_beside_1_2_2_warns_loudly(legacy_queue):
    conn, fleet = legacy_queue
    fleet.start_legacy(LEGACY_PLAIN, "sinal")
    fleet.produce_legacy("plain", 0, 3, "w")
    eventually(lambda: _value(conn, f"SELECT count(*) FROM {fleet.schema}.efeitos") == 3, 30,
               message="1.2.2 executou")
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    unsafe = fleet.start_v2("tests.compat.worker_v2", "sem-compat", QUEUE_COMPAT_1_2_2="false")
    eventually(lambda: "INSEGURO: QUEUE_COMPAT_1_2_2=false" in unsafe.log(), 30,
               message="aviso de configuração insegura")
    assert "conexão(ões) de outro programa com" in unsafe.log()
    safe = fleet.start_v2("tests.compat.worker_v2", "com-compat")  # the queue's mode
    eventually(lambda: "Modo de frota mista com a 1.2.2 ativo" in safe.log(), 30,
               message="modo de frota mista")
    assert "INSEGURO" not in safe.log()


def test_webhook_queue_mixed_fleet_delivers_each_publication_once(legacy_queue):
    """1.2.2's and 2.x's webhook workers on one queue: every publication reaches every
    webhook subscriber exactly once (counted at a local HTTP server)."""
    from tests.fixtures.http import RecordingServer

    conn, fleet = legacy_queue
    s, f = fleet.schema, fleet.fila
    http = RecordingServer().start()
    try:
        with conn.cursor() as cur:
            for sub in ("w1", "w2"):
                cur.execute(f"INSERT INTO {s}.{f}_subscriber (id, processo, url, http_method, "
                            "ativo) VALUES (%s, 'proc', %s, 'POST', true)",
                            (sub, f"{http.url}/{sub}"))
        fleet.start_legacy_module("nsj_queue_lib.worker_webhook", "webhook")
        fleet.produce_legacy("pubsub", 0, 40, "h")
        schema.upgrade(conn, POSTGRES, s, f)
        fleet.start_v2("nsj_queue_lib.worker_webhook", "webhook")
        fleet.produce_legacy("pubsub", 40, 40, "h")
        _insert_v2(conn, fleet, "pubsub", 80, 40, "h")

        def delivered():
            return len(http.received())

        try:
            eventually(lambda: delivered() >= 240 and _value(
                conn, f"SELECT count(*) FROM {s}.{f} WHERE status IN "
                      "('pendente', 'agendada', 'processando')") == 0, 120, interval=0.5,
                message="webhooks entregues")
        except AssertionError:
            print(fleet.logs())
            raise
        seen: dict = {}
        for req in http.received():
            key = (req.path, req.body.decode())
            seen[key] = seen.get(key, 0) + 1
        expected = {(f"/{sub}", f"h{i:05d}") for sub in ("w1", "w2") for i in range(120)}
        assert set(seen) == expected, fleet.logs()
        assert [k for k, n in seen.items() if n > 1] == []
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {s}.{f} WHERE status <> 'sucesso'")
            assert cur.fetchone()[0] == 0
            # Both versions delivered (1.2.2 words its success message its own way).
            cur.execute(f"SELECT count(*) FILTER (WHERE mensagem LIKE %(v1)s), "
                        f"count(*) FILTER (WHERE mensagem NOT LIKE %(v1)s) "
                        f"FROM {s}.{f} WHERE subscriber_id IS NOT NULL",
                        {"v1": "Webhook disparado com sucesso na URL%"})
            by_v1, by_v2 = cur.fetchone()
            assert by_v1 > 0 and by_v2 > 0, (by_v1, by_v2)
    finally:
        http.close()


def test_client_server_worker_beside_native_1_2_2_workers_warns_loudly(legacy_queue):
    """A 2.x worker in client/server mode cannot hold 1.2.2's keys: beside 1.2.2 workers
    of the PostgreSQL mode it says so at start."""
    conn, fleet = legacy_queue
    fleet.start_legacy(LEGACY_PLAIN, "nativo")
    fleet.produce_legacy("plain", 0, 2, "c")
    eventually(lambda: _value(conn, f"SELECT count(*) FROM {fleet.schema}.efeitos") == 2, 30,
               message="1.2.2 executou")
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    worker = fleet.start_v2("tests.compat.worker_v2", "cs", CLIENT_SERVER_MODE="true",
                            SERVER_HOST="127.0.0.1", NOTIFY_SERVICE_PORT="1",
                            LOCK_SERVICE_PORT="2")
    eventually(lambda: "INSEGURO: CLIENT_SERVER_MODE=true" in worker.log(), 30,
               message="aviso de modo cliente/servidor ao lado da 1.2.2")
