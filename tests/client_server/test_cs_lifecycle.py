"""Client/server mode, the task's life end to end: real server, real workers, on MariaDB
and on PostgreSQL (CLIENT_SERVER_MODE=true): success, retry, dead letter, priority,
schedule, purge and equivalent tasks."""

from __future__ import annotations

import datetime as dt
import time

from nsj_queue_lib.config import parse_minutes
from nsj_queue_lib.coordination.base import ADMIN_PURGE, admin_lock_key
from nsj_queue_lib.coordination.socket.backend import SocketBackend
from nsj_queue_lib.runtime.maintenance import PurgeService
from tests.client_server.cs_helpers import effects_by_key
from tests.helpers import eventually


def test_success_retry_and_dead_letter(csq):
    csq.start_server()
    worker = csq.start_ready_worker(QUEUE_MAX_RETRY="2")
    # The worker waits on the server (PostgreSQL too: no LISTEN in this mode).
    eventually(lambda: csq.server_status()["listeners"] == 1, 5, message="worker no servidor")
    started = time.monotonic()
    ok = csq.insert({"efeito": "ok"})
    retry = csq.insert({"efeito": "retry", "fail_until": 2})
    dead = csq.insert({"efeito": "dead", "fail": True})

    # QUEUE_WAIT_NOTIFY_INTERVAL is 30 s: only the server's wake-up makes this fast.
    csq.wait_status(ok, "sucesso", timeout=8)
    assert time.monotonic() - started < 8
    for task_id in (ok, retry, dead):
        csq.wait_chain_done(task_id)
    csq.wait_idle()

    [ok_row] = csq.chain(ok)
    assert (ok_row["tentativa"], ok_row["status"], ok_row["mensagem"]) == \
        (1, "sucesso", f"ok {ok}")

    r1, r2 = csq.chain(retry)
    assert [(r["tentativa"], r["status"]) for r in (r1, r2)] == [(1, "falha"), (2, "sucesso")]
    assert r1["mensagem"].startswith("RuntimeError: falha programada na tentativa 1")
    assert "reenfileirada" in r1["mensagem"] and r1["reenfileirado"] is True
    assert r2["id_inicial"] == retry and r2["mensagem"] == f"ok {r2['id']}"

    d1, d2 = csq.chain(dead)
    assert [(r["tentativa"], r["status"]) for r in (d1, d2)] == [(1, "falha"), (2, "falha")]
    assert "fila de mortos" in d2["mensagem"]
    [letter] = csq.dead_letters(dead)
    assert letter["status"] == "sucesso"
    assert letter["mensagem"] == f"morta tratada {letter['id']} (original {dead})"

    # The failed attempts' writes rolled back: one committed effect per successful run.
    assert effects_by_key(csq) == {"ok": 1, "retry": 1}
    assert [e["tarefa_id"] for e in csq.effects("chave = 'retry'")] == [r2["id"]]
    assert [(e["tarefa_id"], e["tipo"]) for e in csq.effects("tipo = 'dead'")] == \
        [(letter["id"], "dead")]
    assert {e["pid"] for e in csq.effects()} == {worker.pid}
    assert csq.count() == 6  # ok, retry x2, dead x2, dead letter


def test_priority_then_age(csq):
    csq.start_server()
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)
    low = csq.insert({"efeito": "low"}, prioridade=10)
    new_high = csq.insert({"efeito": "new_high"}, prioridade=90)
    mid = csq.insert({"efeito": "mid"})
    old_high = csq.insert({"efeito": "old_high"}, prioridade=90, data_hora=old)
    csq.start_worker()
    csq.wait_idle(timeout=20)
    order = [e["tarefa_id"] for e in csq.effects()]
    assert order == [old_high, new_high, mid, low]
    assert csq.count("status = 'sucesso'") == 4


def test_scheduled_task_waits_for_its_time(csq):
    csq.start_server()
    csq.start_ready_worker()
    due_at = time.time() + 3.0
    when = dt.datetime.fromtimestamp(due_at, dt.timezone.utc)
    scheduled = csq.insert({"efeito": "agendada"}, data_hora=when)
    now = csq.insert({"efeito": "agora"})
    csq.wait_status(now, "sucesso", timeout=8)
    assert csq.row(scheduled)["status"] == "pendente"

    def done() -> bool:
        return csq.row(scheduled)["status"] == "sucesso"

    while not done():
        assert time.time() < due_at + 5, f"agendada não executou\n{csq.logs()}"
        time.sleep(0.02)
    seen = time.time()
    assert seen >= due_at - 0.05, f"executou {due_at - seen:.2f} s antes da hora"
    assert effects_by_key(csq) == {"agendada": 1, "agora": 1}


def _age(csq, task_id: int, days: int) -> None:
    if csq.is_mysql:
        expr = f"UTC_TIMESTAMP(6) - INTERVAL {days} DAY"
    else:
        expr = f"now() - interval '{days} days'"
    csq.sql(f"UPDATE {csq.qtable} SET data_hora = {expr}, data_hora_inicial = {expr} "
            "WHERE id = %s", (task_id,))


def test_purge_service_uses_the_server_admin_lock(csq):
    csq.start_server()
    worker = csq.start_ready_worker()
    old_done = csq.insert({"efeito": "velha"})
    recent_done = csq.insert({"efeito": "recente"})
    old_retry = csq.insert({"efeito": "velha_com_retry", "fail_until": 2})
    for task_id in (old_done, recent_done, old_retry):
        csq.wait_chain_done(task_id)
    worker.stop()
    _age(csq, old_done, 3)
    for r in csq.chain(old_retry):
        _age(csq, r["id"], 3)
    # An old task still waiting keeps its whole chain.
    waiting = csq.insert({"efeito": "esperando"},
                         data_hora=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))

    settings = csq.settings(QUEUE_PURGE_MAX_AGE="1")
    service = PurgeService(settings, SocketBackend(settings), parse_minutes("*"))
    holder = csq.locker(admin=True)
    key = admin_lock_key(csq.table, ADMIN_PURGE)
    assert holder.try_lock(key)
    result = service.run_once()
    assert result.skipped and result.count == 0
    assert csq.count() == 5
    holder.close()

    result = service.run_once()
    assert not result.skipped and result.count == 3
    remaining = {r["id"] for r in csq.rows()}
    assert remaining == {recent_done, waiting}
    # The admin lock was released: another locker takes it at once.
    assert csq.locker(admin=True).try_lock(key)


def test_list_equivalent_task(csq):
    csq.start_server()
    csq.start_ready_worker()
    payload = {"efeito": "equivalente", "x": 1}
    done = csq.insert(payload, processo="p", chave_externa="ch-1")
    csq.wait_status(done, "sucesso")
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    waiting = csq.insert(payload, processo="p", chave_externa="ch-1", data_hora=later)
    other = csq.insert({"efeito": "outra", "x": 1}, processo="p", chave_externa="ch-1")
    csq.wait_status(other, "sucesso")

    client = csq.client()

    def ids(**kwargs):
        args = {"origem": "teste", "destino": "teste", "processo": "p",
                "chave_externa": "ch-1", "payload": payload, **kwargs}
        return [r["id"] for r in client.list_equivalent_task(
            args.pop("origem"), args.pop("destino"), args.pop("processo"),
            args.pop("chave_externa"), args.pop("payload"), **args)]

    assert ids() == [done, waiting]
    rows = client.list_equivalent_task("teste", "teste", "p", "ch-1", payload)
    assert [r["status"] for r in rows] == ["sucesso", "pendente"]
    assert ids(status=("pendente",)) == [waiting]
    assert ids(status=("falha",)) == []
    assert ids(chave_externa="ch-2") == []
    assert ids(processo="outro") == []
    assert ids(payload={"efeito": "outra", "x": 1}) == [other]
    eventually(lambda: csq.row(waiting)["status"] == "pendente", 1)


def test_server_probe_picks_up_tasks_without_producer_notify(csq):
    """CHECK_TASKS_INTERVAL at its 15 s default and no notify_server: the server's
    QUEUE_POLL_INTERVAL probe (0.1 s) wakes the idle worker."""
    csq.start_server(CHECK_TASKS_INTERVAL="15")
    worker = csq.start_ready_worker(CHECK_TASKS_INTERVAL="15")
    eventually(lambda: csq.server_status()["listeners"] == 1, 5, message="worker no servidor")
    delays = []
    for i in range(10):
        time.sleep(0.15 + 0.013 * i)  # an idle worker, a producer at a random moment
        task_id = csq.insert({"efeito": f"p{i}"})
        row = csq.wait_status(task_id, "sucesso", timeout=5)
        [effect] = csq.effects("tarefa_id = %s", (task_id,))
        started = row["data_hora"]
        if started.tzinfo is None and effect["criado"].tzinfo is not None:
            started = started.replace(tzinfo=dt.timezone.utc)
        delays.append((effect["criado"] - started).total_seconds())
    delays.sort()
    assert delays[len(delays) // 2] <= 0.2, delays  # 0.1 s probe, room for a shared CPU
    assert worker.proc.poll() is None
