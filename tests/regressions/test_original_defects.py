"""Regression tests for the critical and high defects of nsj-queue-lib 1.2.2
(docs: original-1.2.2-behaviour.md, section 12): one test per defect, named after
it, each asserting the concrete behaviour that replaced the defect.

Several defects are also covered, in more depth, elsewhere (tests/core,
tests/server, tests/client_server, tests/mysql, tests/chaos); these tests stay
short and point at the defect they guard.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
import uuid

import pytest

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.claim_position import ClaimPosition
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.repository import MESSAGE_MAX, TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    ADMIN_NOTIFY,
    ADMIN_PURGE,
    ADMIN_RETRY,
    admin_lock_key,
    task_lock_key,
)
from nsj_queue_lib.engine.postgres.backend import PostgresBackend
from nsj_queue_lib.engine.socket.backend import SocketBackend
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.maintenance import PurgeService, RetryService
from tests.chaos.proxy import ChaosProxy
from tests.fixtures.processes import wait_ready
from tests.fixtures.queue import Queue, held_payload
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import HOST, TOKEN, RawClient, spawn_lock_holder

ALL_MINUTES = frozenset(range(60))


def _far_minute() -> str:
    """A clock minute ~30 min away: the minute-slot admin jobs do not run in a test."""
    return str((dt.datetime.now().minute + 30) % 60)


def _cs_env(server, notify_port: int = 0, lock_port: int = 0) -> dict:
    return {"CLIENT_SERVER_MODE": "true", "SERVER_HOST": HOST, "SERVER_AUTH_TOKEN": TOKEN,
            "NOTIFY_SERVICE_PORT": str(notify_port or server.notify_port),
            "LOCK_SERVICE_PORT": str(lock_port or server.lock_port),
            "TIMEOUT_SOCKET_MESSAGE": "1", "QUEUE_WAIT_NOTIFY_INTERVAL": "1"}


# -- critical ------------------------------------------------------------------------------
def test_defect_01_lock_keys_do_not_collide_between_task_ids_admin_locks_and_queues(
        pg_queue, pg_server):
    other = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}",
                         fila=f"fila_{uuid.uuid4().hex[:8]}")
    foreign = pg_server.connect()
    try:
        # Keys are (namespace of the queue, id): task 1..3 of a queue, its admin jobs
        # (retry 1, purge 2, notify 3) and task 1 of another queue are all different.
        keys = {task_lock_key(pg_queue.table, i) for i in (1, 2, 3)}
        keys |= {admin_lock_key(pg_queue.table, a) for a in (ADMIN_RETRY, ADMIN_PURGE,
                                                            ADMIN_NOTIFY)}
        keys |= {task_lock_key(other.table, i) for i in (1, 2, 3)}
        assert len(keys) == 9

        # What collided in 1.2.2, held by someone else in the same database: the bare
        # bigint keys 1, 2, 3 (admin locks and task ids of every queue) and the task and
        # admin locks of the other queue.
        with foreign.cursor() as cur:
            for i in (1, 2, 3):
                cur.execute("SELECT pg_advisory_lock(%s)", (i,))
                cur.execute("SELECT pg_advisory_lock(%s, %s)", task_lock_key(other.table, i))
            cur.execute("SELECT pg_advisory_lock(%s, %s)",
                        admin_lock_key(other.table, ADMIN_RETRY))
        ids = [pg_queue.insert({"efeito": f"id{i}"}) for i in range(3)]
        assert ids == [1, 2, 3]
        pg_queue.start_worker()
        for task_id in ids:
            pg_queue.wait_status(task_id, "sucesso")
        settings = pg_queue.settings()
        result = RetryService(settings, PostgresBackend(settings), ALL_MINUTES).run_once()
        assert result.skipped is False  # its admin lock is not the other queue's, nor key 1
    finally:
        foreign.close()
        other.destroy()


def test_defect_02_client_server_locks_are_released_with_their_connection_and_only_by_owner(
        inprocess_socket_server):
    key_a, key_b = task_lock_key("fila_x", 1), task_lock_key("fila_x", 2)
    a = SocketLocker(HOST, inprocess_socket_server.lock_port, TOKEN, 2.0)
    b = SocketLocker(HOST, inprocess_socket_server.lock_port, TOKEN, 2.0)  # same host as `a`
    probe = SocketLocker(HOST, inprocess_socket_server.notify_port, TOKEN, 2.0)
    holder = spawn_lock_holder(inprocess_socket_server.lock_port, task_lock_key("fila_x", 3))
    try:
        assert a.try_lock(key_a) and b.try_lock(key_b)
        assert not probe.unlock(key_b), "quem não é dono não libera o lock"
        assert not probe.try_lock(key_b)
        a.close()  # ends a's session only: its lock goes, b's stays
        assert eventually(lambda: probe.try_lock(key_a), 5, message="lock de a liberado")
        assert not probe.try_lock(key_b) and b.is_held(key_b)
        # A process holding a lock dies (kill -9): the lock goes at once, with its socket.
        assert not probe.try_lock(task_lock_key("fila_x", 3))
        holder.kill()
        holder.wait(10)
        eventually(lambda: probe.try_lock(task_lock_key("fila_x", 3)), 2,
                   message="lock do processo morto liberado")
    finally:
        for locker in (a, b, probe):
            locker.close()
        if holder.poll() is None:
            holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_defect_03_task_longer_than_socket_timeout_keeps_its_lock_and_replies_stay_in_step(
        inprocess_socket_server):
    k1, k2, k3 = (task_lock_key("fila_x", i) for i in (1, 2, 3))
    worker = SocketLocker(HOST, inprocess_socket_server.notify_port, TOKEN, 1.0)
    other = SocketLocker(HOST, inprocess_socket_server.notify_port, TOKEN, 1.0)
    try:
        assert worker.try_lock(k1)
        generation = worker.generation
        silent_until = time.monotonic() + 4.0  # 4x TIMEOUT_SOCKET_MESSAGE without a request
        while time.monotonic() < silent_until:
            assert not other.try_lock(k1), "o lock de uma tarefa longa foi perdido"
            time.sleep(0.1)
        # Every answer belongs to its own request (1.2.2 replayed the last RPC on each
        # timeout, so answers drifted one request behind).
        assert worker.try_lock(k2) is True
        assert worker.unlock(k3) is False  # never held
        assert worker.try_lock(k3) is True
        assert worker.unlock(k1) is True
        assert worker.unlock(k1) is False
        assert worker.held == {k2: 1, k3: 1}
        assert worker.generation == generation, "a sessão caiu durante o silêncio"
        assert other.try_lock(k1) is True

        # On the wire: a client silent after 'hello' gets only heartbeat pings, never an
        # unsolicited reply (and no crash of the server side).
        with RawClient(inprocess_socket_server.notify_port) as raw:
            assert raw.hello(TOKEN)["ok"] is True
            deadline = time.monotonic() + 3.0
            pings = 0
            while time.monotonic() < deadline:
                try:
                    frame = raw.read_frame(0.2)
                except TimeoutError:
                    continue
                assert frame is not None and frame.get("op") == "ping", frame
                raw.send({"id": frame["id"], "ok": True, "result": "pong"})
                pings += 1
            assert pings >= 1
            assert raw.call("try_lock", key=list(k1))["result"] is False  # other holds it
    finally:
        worker.close()
        other.close()


def test_defect_04_frames_coalesced_or_split_are_each_answered_in_order(inprocess_socket_server):
    key = [*task_lock_key("fila_x", 7)]
    with RawClient(inprocess_socket_server.lock_port) as raw:
        assert raw.hello(TOKEN)["ok"] is True
        frames = [{"id": 11, "op": "try_lock", "key": key}, {"id": 12, "op": "ping"},
                  {"id": 13, "op": "unlock", "key": key}]
        raw.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        replies = []
        while len(replies) < 3:
            frame = raw.read_frame(5)
            assert frame is not None
            if frame.get("op") == "ping":
                raw.send({"id": frame["id"], "ok": True, "result": "pong"})
                continue
            replies.append(frame)
        assert [(r["id"], r["ok"], r["result"]) for r in replies] == \
            [(11, True, True), (12, True, "pong"), (13, True, True)]
        # One frame in 1-byte pieces (the terminator split from the rest).
        data = json.dumps({"id": 14, "op": "try_lock", "key": key}).encode() + b"\n"
        for i in range(len(data)):
            raw.send_bytes(data[i:i + 1])
            time.sleep(0.002)
        reply = raw.read_frame(5)
        while reply is not None and reply.get("op") == "ping":
            raw.send({"id": reply["id"], "ok": True, "result": "pong"})
            reply = raw.read_frame(5)
        assert (reply["id"], reply["result"]) == (14, True)


def test_defect_05_lost_connection_during_a_long_task_never_runs_it_twice(pg_queue, tmp_path):
    # PostgreSQL: the task's lock lives on the task's own session, so losing that
    # connection rolls the work back; the task is rescued and runs once more, and the
    # effect of the lost attempt never commits.
    payload, started, release = held_payload(tmp_path, "uma-vez")
    worker = pg_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD=_far_minute())
    task_id = pg_queue.insert(payload)
    eventually(started.exists, message="tarefa iniciada")
    [backend] = pg_queue.sql("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                             "AND state = 'idle in transaction'",
                             (f"nsj_queue_lib:{pg_queue.fila}",))
    pg_queue.sql("SELECT pg_terminate_backend(%s)", (backend["pid"],))
    release.touch()
    chain = eventually(lambda: [r for r in pg_queue.chain(task_id) if r["status"] == "sucesso"]
                       and pg_queue.chain(task_id), 20, message="tarefa resgatada e concluída")
    assert [(r["tentativa"], r["status"]) for r in chain] == [(1, "falha"), (2, "sucesso")]
    assert chain[0]["mensagem"].startswith(WORKER_STOPPED)
    assert [e["chave"] for e in pg_queue.effects()] == ["uma-vez"]
    assert pg_queue.count("reenfileirado AND status = 'sucesso'") == 0
    assert worker.proc.poll() is None


def test_defect_05_client_server_lock_lost_mid_task_is_not_rescued_while_it_runs(
        pg_queue, inprocess_socket_server, tmp_path):
    # Client/server mode: the socket session of the worker is cut while its task runs
    # (the lock goes with it), the database connection stays.  A rescue pass must leave
    # the task alone (its row is held by the task's transaction); it commits once.
    proxy = ChaosProxy((HOST, inprocess_socket_server.notify_port)).start()
    try:
        env = _cs_env(inprocess_socket_server, notify_port=proxy.port)
        worker = pg_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD=_far_minute(), **env)
        payload, started, release = held_payload(tmp_path, "cs-uma-vez")
        task_id = pg_queue.insert(payload)
        eventually(started.exists, 20, message="tarefa iniciada")
        key = task_lock_key(pg_queue.table, task_id)
        assert inprocess_socket_server.locks.holder(key) is not None
        assert proxy.cut() >= 1
        eventually(lambda: inprocess_socket_server.locks.holder(key) is None, 5,
                   message="lock liberado com a conexão")
        settings = pg_queue.settings(**env)
        result = RetryService(settings, SocketBackend(settings), ALL_MINUTES).run_once()
        assert (result.skipped, result.count) == (False, 0)
        assert pg_queue.row(task_id)["status"] == "processando"
        release.touch()
        pg_queue.wait_status(task_id, "sucesso")
        assert pg_queue.count() == 1
        assert [e["chave"] for e in pg_queue.effects()] == ["cs-uma-vez"]
        assert worker.proc.poll() is None
    finally:
        proxy.close()


def test_defect_06_failing_dead_letter_chain_ends_instead_of_looping(pg_queue):
    pg_queue.start_worker(QUEUE_MAX_RETRY="1")
    task_id = pg_queue.insert({"efeito": "x", "fail": True, "fail_dead": True})
    dead = eventually(lambda: [r for r in pg_queue.rows("dead") if r["status"] == "falha"], 20,
                      message="fila de mortos esgotada")
    pg_queue.wait_idle()
    rows = pg_queue.rows()
    # Nothing is waiting, so nothing can run again: the table stops at two rows.
    assert [(r["id"] == task_id, r["dead"], r["status"]) for r in rows] == \
        [(True, False, "falha"), (False, True, "falha")]
    assert dead[0]["live_id"] == task_id
    assert "também na fila de mortos" in dead[0]["mensagem"]
    assert pg_queue.effects() == []


def test_defect_07_over_long_messages_are_truncated_and_the_flow_goes_on(pg_queue):
    pg_queue.start_worker()
    failing = pg_queue.insert({"long_message": 2000})
    long_ok = pg_queue.insert({"efeito": "longo", "return": "y" * 2000})
    after = pg_queue.insert({"efeito": "depois"})
    for task_id in (long_ok, after):
        pg_queue.wait_status(task_id, "sucesso")
    row = pg_queue.wait_status(failing, "falha")
    assert len(row["mensagem"]) <= MESSAGE_MAX
    assert row["mensagem"].startswith("ValueError: xxx")
    assert row["mensagem"].endswith("Tarefa reenfileirada.")
    assert len(pg_queue.chain(failing)) == 2  # its next attempt exists: the failure was recorded
    ok = pg_queue.row(long_ok)
    assert len(ok["mensagem"]) == MESSAGE_MAX and ok["mensagem"].startswith("yyy")
    assert sorted(e["chave"] for e in pg_queue.effects("tipo = 'execute'")) == ["depois", "longo"]


def test_defect_08_purge_keeps_payload_holders_and_tasks_that_did_not_finish(pg_queue):
    old = "clock_timestamp() - interval '90 days'"
    recent = "clock_timestamp() - interval '1 day'"

    def add(status: str, when: str, payload=None, first=None) -> int:
        return pg_queue.value(
            f"INSERT INTO {pg_queue.table} (status, data_hora, payload, id_inicial, tentativa) "
            f"VALUES (%s, {when}, %s, %s, %s) RETURNING id",
            (status, payload, first, 2 if first else 1))

    active = add("falha", old, "PA")
    active_retry = add("agendada", old, first=active)
    never_ran = add("pendente", old, "PP")
    running = add("processando", old, "PR")
    done = add("falha", old, "PB")
    add("sucesso", old, first=done)  # the finished old chain: both rows go
    mixed = add("falha", old, "PC")
    mixed_retry = add("sucesso", recent, first=mixed)

    settings = pg_queue.settings(QUEUE_PURGE_MAX_AGE="60")
    result = PurgeService(settings, PostgresBackend(settings), ALL_MINUTES).run_once()
    assert result.count == 2
    assert [r["id"] for r in pg_queue.rows()] == [active, active_retry, never_ran, running,
                                                  mixed, mixed_retry]


def test_defect_09_dead_letter_of_a_rescued_retry_keeps_the_payload(pg_queue):
    payload = json.dumps({"efeito": "payload-preservado"})
    first = pg_queue.value(f"INSERT INTO {pg_queue.table} (status, payload, tentativa) "
                           "VALUES ('falha', %s, 1) RETURNING id", (payload,))
    retry = pg_queue.value(f"INSERT INTO {pg_queue.table} (status, id_inicial, tentativa) "
                           "VALUES ('processando', %s, 2) RETURNING id", (first,))
    settings = pg_queue.settings(QUEUE_MAX_RETRY="2")
    assert RetryService(settings, PostgresBackend(settings), ALL_MINUTES).run_once().count == 1
    assert pg_queue.row(retry)["status"] == "falha"
    [dead] = pg_queue.rows("dead")
    assert (dead["live_id"], dead["payload"]) == (first, payload)
    pg_queue.start_worker(QUEUE_MAX_RETRY="2")
    pg_queue.wait_status(dead["id"], "sucesso")
    assert [(e["chave"], e["tipo"]) for e in pg_queue.effects()] == [("payload-preservado", "dead")]


# -- high ----------------------------------------------------------------------------------
def test_defect_10_tasks_waiting_at_start_future_tasks_and_missed_notifications_run(pg_queue):
    far = _far_minute()
    waiting = pg_queue.insert({"efeito": "antes-do-worker"})
    # No poll for an hour, admin jobs half an hour away: only the start-up scan runs it.
    pg_queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="3600", QUEUE_MINUTE_RETRY_THREAD=far,
                                QUEUE_MINUTE_NOTIFY_THREAD=far)
    pg_queue.wait_status(waiting, "sucesso", timeout=10)
    # A future task wakes the worker when it is due, not at the next admin minute.
    due = pg_queue.db_now() + dt.timedelta(seconds=2)
    future = pg_queue.insert({"efeito": "futura"}, data_hora=due)
    pg_queue.wait_status(future, "sucesso", timeout=15)
    [effect] = pg_queue.effects("chave = 'futura'")
    assert due <= effect["criado"] < due + dt.timedelta(seconds=5)
    # A task whose notification never came (trigger disabled) is found by the poll.
    pg_queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="1", QUEUE_MINUTE_RETRY_THREAD=far,
                                QUEUE_MINUTE_NOTIFY_THREAD=far)
    pg_queue.sql(f"ALTER TABLE {pg_queue.table} DISABLE TRIGGER USER")
    silent = pg_queue.insert({"efeito": "sem-notify"})
    pg_queue.wait_status(silent, "sucesso", timeout=10)


def test_defect_11_mixed_case_queue_name_is_woken_by_inserts(pg_server):
    q = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}",
                     fila=f"Fila_MiXta_{uuid.uuid4().hex[:6]}")
    try:
        q.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="3600")  # only the NOTIFY wakes it
        task_id = q.insert({"efeito": "maiusculas"})
        q.wait_status(task_id, "sucesso", timeout=10)
        # QUEUE_NAME different from the table name is reported instead of failing silently.
        mismatch = q.start_ready_worker(QUEUE_NAME="OutroCanal")
        eventually(lambda: "difere do nome da tabela" in mismatch.log(), 10,
                   message="aviso de QUEUE_NAME diferente")
    finally:
        q.destroy()


def test_defect_12_sigterm_finishes_the_running_task_then_exits(pg_queue, tmp_path):
    payload, started, release = held_payload(tmp_path, "termina")
    worker = pg_queue.start_ready_worker()
    running = pg_queue.insert(payload)
    eventually(started.exists, message="tarefa iniciada")
    waiting = pg_queue.insert({"efeito": "nao-pega"})
    worker.signal(signal.SIGTERM)
    release.touch()
    assert worker.wait_exit(20) == 0
    assert pg_queue.row(running)["status"] == "sucesso"
    assert pg_queue.row(waiting)["status"] == "pendente"
    assert [e["chave"] for e in pg_queue.effects()] == ["termina"]


def test_defect_12_sigint_exits_an_idle_worker(pg_queue):
    worker = pg_queue.start_ready_worker()
    worker.signal(signal.SIGINT)
    assert worker.wait_exit(20) == 0  # no helper thread keeps the process alive


def test_defect_12_halt_stops_every_worker_of_the_queue(pg_queue):
    workers = [pg_queue.start_worker() for _ in range(2)]
    for w in workers:
        wait_ready(w)
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    assert [w.wait_exit(20) for w in workers] == [0, 0]


def test_defect_13_queue_wait_notify_interval_reads_its_own_variable():
    base = {"DB_HOST": "h", "DB_PORT": "5432", "DB_BASE": "b", "DB_USER": "u", "DB_PASS": "",
            "QUEUE_NAME": "fila", "QUEUE_TABLE": "public.fila"}
    settings = Settings.from_env({**base, "QUEUE_WAIT_NOTIFY_INTERVAL": "7",
                                  "QUEUE_PURGE_LIMIT": "123"}, load_dotenv=False)
    assert (settings.queue_wait_notify_interval, settings.queue_purge_limit) == (7.0, 123)
    settings = Settings.from_env({**base, "QUEUE_PURGE_LIMIT": "5000"}, load_dotenv=False)
    assert settings.queue_wait_notify_interval == 30.0


def test_defect_14_claim_reads_one_row_whatever_the_backlog(pg_queue, pg_server):
    conn = pg_server.connect(autocommit=False)
    try:
        QueueClient(conn, pg_queue.table).insert_tasks(
            [{"payload": {"n": i, "pad": "x" * 200}} for i in range(3000)])
        conn.commit()
    finally:
        conn.close()
    pg_queue.sql(f"ANALYZE {pg_queue.table}")
    claim = Queries(POSTGRES, pg_queue.table)["task_claim_locked"].replace("%(limit)s", "1")
    session = DbSession(pg_server.connect())
    try:
        session.begin()
        plan = session.fetch_value("EXPLAIN (ANALYZE, FORMAT JSON) " + claim,
                                   {"lock_ns": task_lock_key(pg_queue.table, 0)[0], "unlock": None,
                                    "turn_ns": None, "turn_id": None, "hand_id": None,
                                    "keep": False, "due_from": None,
                                    # a session's first claim: from the index start
                                    **ClaimPosition().claim_params()})
        session.rollback()
        session.execute("SELECT pg_advisory_unlock_all()")
    finally:
        session.close()
    nodes, stack = [], [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))
    scanned = max(n["Actual Rows"] for n in nodes if "Scan" in n["Node Type"])
    assert scanned <= 2, [(n["Node Type"], n["Actual Rows"]) for n in nodes]
    assert not any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == pg_queue.fila
                   for n in nodes)


def test_defect_15_client_server_requires_the_token_and_has_no_remote_halt(inprocess_socket_server):
    with RawClient(inprocess_socket_server.lock_port) as raw:
        reply = raw.hello(token=None)
        assert reply["ok"] is False and reply["error"]["code"] == "unauthorized"
        assert raw.closed_by_peer()
    with RawClient(inprocess_socket_server.lock_port) as raw:
        assert raw.hello(TOKEN)["ok"] is True
        for op in ("halt_server", "halt", "close"):
            assert raw.call(op)["error"]["code"] == "unknown_op"
        assert raw.call("ping")["result"] == "pong"
    with RawClient(inprocess_socket_server.notify_port) as raw:  # still serving
        assert raw.hello(TOKEN)["ok"] is True


@pytest.mark.mysql
def test_defect_16_mysql_purge_equivalent_tasks_and_microsecond_times(mariadb_queue):
    q = mariadb_queue
    conn = q.server.connect(q.database, autocommit=False)
    try:
        client = QueueClient(conn, q.table, q.sub_table)
        ids = [client.insert_task("o", "d", "p", "c", {"pedido": 42}) for _ in range(2)]
        conn.commit()
        assert [t["id"] for t in client.list_equivalent_task("o", "d", "p", "c",
                                                             {"pedido": 42})] == ids
    finally:
        conn.close()
    times = [r["data_hora"] for r in q.rows()]
    assert times[0] != times[1] and any(t.microsecond for t in times)
    q.sql(f"UPDATE {q.table} SET status = 'sucesso', "
          "data_hora = UTC_TIMESTAMP(6) - INTERVAL 90 DAY WHERE id = %s", (ids[0],))
    env = q.server.env(q.database)
    env.update({"QUEUE_NAME": q.fila, "QUEUE_TABLE": q.table, "QUEUE_PURGE_MAX_AGE": "60"})
    session = DbSession.open(Settings.from_env(env, load_dotenv=False))
    try:
        assert TaskRepository(session, q.table).task_purge(60, 1000) == 1
    finally:
        session.close()
    assert [r["id"] for r in q.rows()] == [ids[1]]


def _failing_chain(queue) -> tuple:
    """A task scheduled an hour ago (a backlog) with prioridade 77 that always fails,
    QUEUE_MAX_RETRY=2: its two attempts and its dead letter."""
    scheduled = queue.db_now() - dt.timedelta(hours=1)
    task_id = queue.insert({"efeito": "x", "fail": True}, prioridade=77, data_hora=scheduled)
    queue.start_worker(QUEUE_MAX_RETRY="2")
    dead = eventually(lambda: [r for r in queue.rows("dead") if r["status"] == "sucesso"], 20,
                      message="fila de mortos tratada")
    first, second = queue.chain(task_id)
    return first, second, dead[0]


def test_defect_17_audit_columns_keep_the_previous_failure(pg_queue):
    first, second, _ = _failing_chain(pg_queue)
    assert (second["id_anterior"], second["status_anterior"], second["mensagem_anterior"]) == \
        (first["id"], "falha", first["mensagem"])
    assert second["data_hora_anterior"] == first["data_hora"]
    assert first["mensagem"].startswith("RuntimeError: falha programada na tentativa 1")


def test_defect_18_priority_is_kept_by_retries_and_dead_letters(pg_queue):
    first, second, dead = _failing_chain(pg_queue)
    assert (first["prioridade"], second["prioridade"], dead["prioridade"]) == (77, 77, 77)


def test_defect_19_retry_delay_is_measured_from_the_failure_not_from_the_schedule(pg_queue):
    started = pg_queue.db_now()
    first, second, _ = _failing_chain(pg_queue)
    # QUEUE_BASE_INTERVAL_RETRY=0.01 min and tentativa 1: 0.6 s after the failure, although
    # the task was scheduled an hour ago (1.2.2 made it due at once).
    assert second["data_hora"] == first["proxima_tentativa"]
    assert first["proxima_tentativa"] >= started + dt.timedelta(seconds=0.6)
    assert first["proxima_tentativa"] - first["data_hora"] > dt.timedelta(minutes=59)


# -- found by the chaos suite ----------------------------------------------------------------
def test_crash_restart_bare_database_error_is_a_lost_connection_not_a_crash():
    """psycopg2 reports a server that died mid-request (a crash restart) with a bare
    DatabaseError without SQLSTATE; it must mean "connection lost" (reconnect and
    rescue), not an unexpected error that ends the worker process."""
    import psycopg2

    from nsj_queue_lib.db.session import is_connection_error
    from nsj_queue_lib.exceptions import DatabaseUnavailable

    class DeadCursor:
        def execute(self, sql, params=None):
            raise psycopg2.DatabaseError("server closed the connection unexpectedly")

        def close(self):
            pass

    class DeadConnection:
        closed = 0

        def cursor(self):
            return DeadCursor()

    session = DbSession(DeadConnection(), POSTGRES)
    with pytest.raises(DatabaseUnavailable):
        session.fetch_value("SELECT 1")
    assert is_connection_error(psycopg2.DatabaseError("server closed the connection"))
    assert not is_connection_error(psycopg2.IntegrityError("duplicate key"))
    assert not is_connection_error(psycopg2.ProgrammingError("syntax error"))

