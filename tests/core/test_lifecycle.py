"""A task's life with worker subprocesses: commit, success, retries, dead letters,
priorities, scheduling, purge, wake-ups, kill -9 rescue, fan-out and webhook.  The
tests taking `lq` run on every backend (PostgreSQL; MySQL native on MariaDB; the socket
server on PostgreSQL and on MariaDB, tests/fixtures/queue.py), so a backend never has
its own copy; those taking `queue` check what only PostgreSQL has (its trigger, a
producer's transaction on it)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import statistics
import time
import uuid

from nsj_queue_lib.config import parse_minutes
from nsj_queue_lib.coordination.backend import make_backend
from nsj_queue_lib.coordination.base import ADMIN_PURGE, admin_lock_key
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.maintenance import PurgeService
from tests.fixtures.queue import Queue, effects_by_key
from tests.fixtures.waiting import eventually

TAREFA_KEYS = sorted([
    "id", "id_inicial", "data_hora_inicial", "data_hora", "origem", "destino", "processo",
    "chave_externa", "proxima_tentativa", "tentativa", "status", "mensagem", "id_anterior",
    "data_hora_anterior", "status_anterior", "mensagem_anterior", "tenant",
    "grupo_empresarial", "payload", "payload_hash", "pub_sub", "publication_id",
    "subscriber_id", "dead", "live_id", "prioridade",
])


def _seconds(delta: dt.timedelta) -> float:
    return delta.total_seconds()


def test_rolled_back_producer_transaction_never_runs(queue, pg_server):
    queue.start_ready_worker()
    conn = pg_server.connect(autocommit=False)
    try:
        client = queue.client(conn)
        lost_id = client.insert_task("teste", "teste", "teste", "rb", {"efeito": "rolled_back"})
        conn.rollback()
        control_id = client.insert_task("teste", "teste", "teste", "ok", {"efeito": "control"})
        conn.commit()
    finally:
        conn.close()

    queue.wait_status(control_id, "sucesso")
    queue.wait_idle()
    assert queue.count(f"id = {lost_id}") == 0
    assert [r["id"] for r in queue.rows()] == [control_id]
    assert [(e["tarefa_id"], e["chave"]) for e in queue.effects()] == [(control_id, "control")]


def test_success_commits_effect_with_status_and_passes_26_keys(lq):
    payload = json.dumps({"efeito": "s", "report": True})
    task_id = lq.insert(payload, processo="proc", chave_externa="ch-1", tenant=7,
                           grupo_empresarial="GE")
    lq.start_worker()
    row = lq.wait_status(task_id, "sucesso")

    assert row["mensagem"] == f"ok {task_id}"
    assert row["tentativa"] == 1
    assert lq.count() == 1  # no retry row
    effects = lq.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(task_id, "execute"),
                                                              (task_id, "report")]
    report = json.loads(effects[1]["chave"])
    assert report["keys"] == TAREFA_KEYS
    assert len(report["keys"]) == 26
    assert report["payload_type"] == "str"
    assert report["payload"] == payload


def test_retry_chain_columns(lq):
    # 0.02 min = 1.2 s per tentativa: attempt 2 after 1.2 s, attempt 3 after 2.4 s.
    lq.start_ready_worker(QUEUE_BASE_INTERVAL_RETRY="0.02", QUEUE_MAX_RETRY="5")
    payload = json.dumps({"efeito": "r", "fail_until": 3, "report": True})
    first = lq.insert(payload, prioridade=70)
    eventually(lambda: any(r["status"] == "sucesso" for r in lq.chain(first)), timeout=30,
               message="chain succeeds")
    r1, r2, r3 = lq.chain(first)

    assert [r["tentativa"] for r in (r1, r2, r3)] == [1, 2, 3]
    assert [r["status"] for r in (r1, r2, r3)] == ["falha", "falha", "sucesso"]
    assert r1["id_inicial"] is None
    for prev, cur in ((r1, r2), (r2, r3)):
        assert prev["reenfileirado"] is True
        assert prev["mensagem"].startswith(
            f"RuntimeError: falha programada na tentativa {prev['tentativa']}")
        assert prev["mensagem"].endswith("Tarefa reenfileirada.")
        assert cur["id_inicial"] == first
        assert cur["id_anterior"] == prev["id"]
        assert cur["data_hora_anterior"] == prev["data_hora"]
        assert cur["status_anterior"] == "falha"
        assert cur["mensagem_anterior"] == prev["mensagem"]
        assert cur["data_hora"] == prev["proxima_tentativa"]
        assert cur["data_hora_inicial"] == r1["data_hora_inicial"]
        assert cur["prioridade"] == 70
        assert cur["payload"] is None
        assert cur["payload_hash"] == r1["payload_hash"]
    # proxima_tentativa = failure time + tentativa x 1.2 s (the run starts at data_hora).
    gap1 = _seconds(r1["proxima_tentativa"] - r1["data_hora"])
    gap2 = _seconds(r2["proxima_tentativa"] - r2["data_hora"])
    assert 1.2 <= gap1 < 2.0, gap1
    assert 2.4 <= gap2 < 3.2, gap2
    assert r3["proxima_tentativa"] is None
    assert r3["mensagem"] == f"ok {r3['id']}"

    # Only the successful attempt's writes were committed, and it received the payload
    # of the first attempt although its own row stores none.
    effects = lq.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(r3["id"], "execute"),
                                                              (r3["id"], "report")]
    report = json.loads(effects[1]["chave"])
    assert report["payload"] == payload
    assert report["tentativa"] == 3
    assert report["id_inicial"] == first


def test_dead_letter_after_max_retry(lq):
    payload = json.dumps({"efeito": "d", "fail": True})
    first = lq.insert(payload, prioridade=80, chave_externa="k-dead", tenant=3)
    lq.start_worker(QUEUE_MAX_RETRY="2")
    dead = eventually(lambda: next((r for r in lq.rows("dead") if r["status"] == "sucesso"),
                                   None), message="dead letter handled")
    lq.wait_idle()

    live = lq.chain(first)
    assert [(r["tentativa"], r["status"]) for r in live] == [(1, "falha"), (2, "falha")]
    assert live[1]["estouro_tentativas"] is True
    assert live[1]["reenfileirado"] is False
    assert "Máximo de tentativas" in live[1]["mensagem"]
    assert dead["live_id"] == first
    assert dead["dead"] is True
    assert dead["tentativa"] == 1
    assert dead["payload"] == payload
    assert dead["prioridade"] == 80
    assert dead["chave_externa"] == "k-dead"
    assert dead["tenant"] == 3
    assert dead["mensagem"] == f"morta tratada {dead['id']} (original {first})"
    assert lq.count() == 3
    assert [(e["tarefa_id"], e["tipo"], e["chave"]) for e in lq.effects()] == [
        (dead["id"], "dead", "d")]


def test_failing_dead_chain_ends_without_second_dead_chain(lq):
    first = lq.insert({"fail": True, "fail_dead": True})
    lq.start_worker(QUEUE_MAX_RETRY="2")
    eventually(lambda: lq.count("dead AND tentativa = 2 AND status = 'falha'") == 1,
               message="dead chain exhausted")
    lq.wait_idle()
    # The last dead attempt is marked 'falha' in the same transaction that would insert
    # another dead row, so the count is final here.
    rows = lq.rows()
    assert [(r["dead"], r["tentativa"], r["status"]) for r in rows] == [
        (False, 1, "falha"), (False, 2, "falha"), (True, 1, "falha"), (True, 2, "falha")]
    assert rows[2]["live_id"] == first
    assert rows[3]["id_inicial"] == rows[2]["id"]
    assert rows[3]["estouro_tentativas"] is True
    assert "fila de mortos" in rows[3]["mensagem"]
    assert lq.count("dead") == 2
    assert lq.effects() == []  # every execute_dead rolled back


def test_priority_then_age_order(lq):
    prios = [10, 90, 50, 90, 30, 50]
    ids = [lq.insert({"efeito": f"p{i}"}, prioridade=p) for i, p in enumerate(prios)]
    # Inserted last but due a minute ago: first among its priority.
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)
    old_high = lq.insert({"efeito": "old_high"}, prioridade=90, data_hora=old)
    lq.start_worker()
    lq.wait_idle()
    expected = [old_high] + [i for _, i in sorted(zip(prios, ids), key=lambda t: (-t[0], t[1]))]
    assert [e["tarefa_id"] for e in lq.effects()] == expected
    assert lq.count("status = 'sucesso'") == len(ids) + 1


def test_tasks_inserted_before_worker_starts_are_run(lq):
    ids = [lq.insert({"efeito": f"pre{i}"}) for i in range(3)]
    lq.start_worker()
    for task_id in ids:
        lq.wait_status(task_id, "sucesso")
    assert sorted(e["tarefa_id"] for e in lq.effects()) == ids


def test_scheduled_task_runs_when_due_not_before(lq):
    lq.start_ready_worker()
    due = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)
    scheduled = lq.insert({"efeito": "agendada"}, data_hora=due)
    now = lq.insert({"efeito": "agora"})
    lq.wait_status(now, "sucesso", timeout=8)
    assert lq.row(scheduled)["status"] == "pendente"
    row = lq.wait_status(scheduled, "sucesso", timeout=10)
    # Both clocks are the database's (timestamptz on PostgreSQL, UTC DATETIME on MariaDB).
    [effect] = lq.effects("tarefa_id = %s", (scheduled,))
    late = _seconds(effect["criado"] - row["data_hora"])
    assert 0 <= late <= 1.5, late
    assert effects_by_key(lq) == {"agendada": 1, "agora": 1}


def test_idle_worker_picks_up_new_tasks_without_producer_notify(lq):
    """QUEUE_WAIT_NOTIFY_INTERVAL 30 s and CHECK_TASKS_INTERVAL at its 15 s default: the
    wake-up comes from PostgreSQL's trigger, MySQL native's probe, or the socket
    server's probe (QUEUE_POLL_INTERVAL, 0.1 s); the producer never notifies."""
    worker = lq.start_ready_worker()
    if lq.mode == "cs":
        eventually(lambda: lq.server_status()["listeners"] == 1, 5, message="worker no servidor")
    delays = []
    for i in range(10):
        time.sleep(0.13 + 0.011 * i)  # an idle worker, a producer at a random moment
        task_id = lq.insert({"efeito": f"p{i}"})
        row = lq.wait_status(task_id, "sucesso", timeout=5)
        [effect] = lq.effects("tarefa_id = %s", (task_id,))
        delays.append(_seconds(effect["criado"] - row["data_hora"]))
    assert statistics.median(delays) <= 0.2, delays  # 0.1 s probe, room for a shared CPU
    assert {e["pid"] for e in lq.effects()} == {worker.pid}
    assert worker.proc.poll() is None


def _age(q: Queue, task_id: int, days: int) -> None:
    expr = (f"UTC_TIMESTAMP(6) - INTERVAL {days} DAY" if q.is_mysql
            else f"now() - interval '{days} days'")
    q.sql(f"UPDATE {q.qtable} SET data_hora = {expr}, data_hora_inicial = {expr} "
          "WHERE id = %s", (task_id,))


def test_purge_takes_the_admin_lock_and_keeps_waiting_chains(lq):
    worker = lq.start_ready_worker()
    old_done = lq.insert({"efeito": "velha"})
    recent_done = lq.insert({"efeito": "recente"})
    old_retry = lq.insert({"efeito": "velha_com_retry", "fail_until": 2})
    for task_id in (old_done, recent_done, old_retry):
        lq.wait_chain_done(task_id)
    worker.stop()
    _age(lq, old_done, 3)
    for r in lq.chain(old_retry):
        _age(lq, r["id"], 3)
    # An old task still waiting keeps its whole chain.
    waiting = lq.insert({"efeito": "esperando"},
                        data_hora=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))

    settings = lq.settings(QUEUE_PURGE_MAX_AGE="1")
    backend = make_backend(settings)
    service = PurgeService(settings, backend, parse_minutes("*"))
    key = admin_lock_key(lq.table, ADMIN_PURGE)
    holder_session = DbSession.open(settings)
    holder = backend.admin_locker(holder_session)
    try:  # another session (socket client) holds the purge's admin lock: skipped
        assert holder.try_lock(key)
        result = service.run_once()
        assert result.skipped and result.count == 0
        assert lq.count() == 5
    finally:  # no unlock: the lock ends with its session (or socket connection)
        holder.close()
        holder_session.close()

    result = eventually(lambda: (lambda r: None if r.skipped else r)(service.run_once()), 5,
                        interval=0.02, message="lock administrativo liberado")
    assert result.count == 3
    assert {r["id"] for r in lq.rows()} == {recent_done, waiting}


def test_lost_notification_is_picked_up_by_periodic_poll(queue):
    queue.sql(f'ALTER TABLE "{queue.schema}"."{queue.fila}" DISABLE TRIGGER ALL')
    queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="1")
    started = time.monotonic()
    task_id = queue.insert({"efeito": "lost"})
    queue.wait_status(task_id, "sucesso", timeout=5)
    assert time.monotonic() - started < 5
    assert len(queue.effects()) == 1


def test_mixed_case_queue_name_wakes_worker_on_insert(pg_server):
    q = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}", fila="FilaX")
    try:
        # A 60 s poll: only the trigger's notification can run the task in time.
        # Quoted names keep their case (unquoted ones fold to lower case, as in SQL).
        q.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="60")
        assert q.env()["QUEUE_TABLE"] == f'{q.schema}."FilaX"'
        task_id = q.insert({"efeito": "case"})
        q.wait_status(task_id, "sucesso", timeout=5)
        assert [e["chave"] for e in q.effects()] == ["case"]
    finally:
        q.destroy()


def test_payload_hash_and_json_of_dict_payload(dbq):
    task_id = dbq.client().insert_task("o", "d", "p", "c", {"a": 1, "b": "ç"})
    row = dbq.row(task_id)
    assert json.loads(row["payload"]) == {"a": 1, "b": "ç"}
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest()


def test_kill9_mid_task_frees_its_lock_and_the_next_worker_rescues_it(lq, tmp_path):
    victim = lq.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    started, release = tmp_path / "started", tmp_path / "release"
    first = lq.insert({"efeito": "resgatada", "started_file": str(started),
                       "wait_file": str(release)})
    eventually(started.exists, 10, message="tarefa iniciada")
    assert lq.row(first)["status"] == "processando"
    probe = lq.probe_locker()
    key = lq.task_key(first)
    assert probe.try_lock(key) is False  # the worker holds it

    killed_at = time.monotonic()
    victim.kill9()
    # The dead session's lock (advisory, named, or the socket client's) ends with its
    # connection: the database or the server sees the socket close.
    eventually(lambda: probe.try_lock(key), 5, interval=0.01, message="lock liberado")
    if lq.mode == "cs":  # not by the heartbeat (2 x TIMEOUT_SOCKET_MESSAGE = 4 s)
        assert time.monotonic() - killed_at < 1.5
    assert probe.unlock(key) is True
    assert lq.row(first)["status"] == "processando"  # nobody ran cleanup
    assert lq.effects() == []  # the killed attempt's writes were rolled back

    release.write_text("ok")
    rescuer = lq.start_worker()  # the runtime runs a rescue pass when it connects
    lq.wait_chain_done(first)
    lq.wait_idle()
    old, retry = lq.chain(first)
    assert [(r["tentativa"], r["status"]) for r in (old, retry)] == [(1, "falha"), (2, "sucesso")]
    assert old["mensagem"].startswith(WORKER_STOPPED)
    assert old["reenfileirado"] is True and "reenfileirada" in old["mensagem"]
    assert (retry["id_anterior"], retry["status_anterior"], retry["mensagem_anterior"]) == \
        (first, "falha", old["mensagem"])
    [effect] = lq.effects()
    assert (effect["tarefa_id"], effect["chave"], effect["pid"]) == \
        (retry["id"], "resgatada", rescuer.pid)
    assert lq.count() == 2


def _subscriber_rows(q: Queue, pub_id: int, where: str = "TRUE") -> list:
    return q.rows(f"publication_id = %s AND ({where})", (pub_id,))


def test_fanout_one_failing_subscriber_ends_in_its_dead_handler(lq):
    for sid in ("a", "b", "c"):
        lq.add_subscriber(sid)
    lq.add_subscriber("d", ativo=False)
    lq.add_subscriber("e", processo="outro")
    lq.start_ready_worker("tests.workers.pubsub_scripted")
    payload = {"fail": ["b"], "n": 1}
    pub_id = lq.publish(payload, prioridade=70)

    publication = lq.wait_status(pub_id, "sucesso", timeout=10)
    assert publication["mensagem"] == "Publicado para 3 assinante(s), com sucesso!"
    eventually(lambda: _subscriber_rows(lq, pub_id, "dead AND status = 'sucesso'"), 20,
               message="morta de b tratada")
    lq.wait_idle()

    # b's failing attempts rolled back their writes with the task transaction.
    assert effects_by_key(lq) == {"a": 1, "c": 1}
    assert effects_by_key(lq, "dead") == {"b": 1}
    rows = _subscriber_rows(lq, pub_id)
    live = {(r["subscriber_id"], r["tentativa"]): r["status"] for r in rows if not r["dead"]}
    assert live == {("a", 1): "sucesso", ("c", 1): "sucesso", ("b", 1): "falha",
                    ("b", 2): "falha", ("b", 3): "falha"}
    b_first = next(r for r in rows if (r["subscriber_id"], r["tentativa"]) == ("b", 1)
                   and not r["dead"])
    assert "falha programada do assinante b" in b_first["mensagem"]
    [dead] = [r for r in rows if r["dead"]]
    assert (dead["subscriber_id"], dead["status"], dead["live_id"]) == ("b", "sucesso",
                                                                        b_first["id"])
    assert dead["mensagem"].startswith("morta b tratada")
    assert all(r["prioridade"] == 70 for r in rows)
    for r in rows:
        assert json.loads(r["payload"] or publication["payload"]) == payload


WEBHOOK = "nsj_queue_lib.worker_webhook"
SECRET = "token-do-assinante-3f9a"


def test_webhook_delivery_with_retry(lq, http_server):
    http_server.script("/instavel", [500, 200], body=None)
    lq.add_subscriber("hook", url=http_server.url + "/hook", method="POST",
                      headers={"X-Token": SECRET})
    lq.add_subscriber("instavel", url=http_server.url + "/instavel", method="post")
    worker = lq.start_ready_worker(WEBHOOK)
    pub_id = lq.publish({"pedido": 7, "itens": [1, 2]})

    eventually(lambda: len(_subscriber_rows(lq, pub_id, "status = 'sucesso'")) == 2, 20,
               message="webhooks entregues")
    lq.wait_idle()
    assert lq.row(pub_id)["mensagem"] == "Publicado para 2 assinante(s), com sucesso!"
    rows = _subscriber_rows(lq, pub_id)
    unstable = [r for r in rows if r["subscriber_id"] == "instavel"]
    assert [(r["tentativa"], r["status"]) for r in unstable] == [(1, "falha"), (2, "sucesso")]
    assert "HTTP 500" in unstable[0]["mensagem"]
    assert "resposta 500 de /instavel" in unstable[0]["mensagem"]
    assert "reenfileirada" in unstable[0]["mensagem"]
    assert "Status Resposta: 200" in unstable[1]["mensagem"]
    [hook_row] = [r for r in rows if r["subscriber_id"] == "hook"]
    assert hook_row["status"] == "sucesso" and "200" in hook_row["mensagem"]
    assert not any(r["dead"] for r in rows)

    text = lq.row(pub_id)["payload"]
    [hook] = http_server.received("/hook")
    assert hook.method == "POST" and hook.body == text.encode()
    assert hook.headers["x-token"] == SECRET
    assert hook.headers["content-type"] == "application/json"
    assert [r.method for r in http_server.received("/instavel")] == ["POST", "POST"]
    assert SECRET not in worker.log()
