"""Contract, a worker's life, with worker processes on every backend (`each_backend_queue`):
success with the 26 keys, several workers exactly once, kill -9 rescue, purge and its admin
lock, SIGTERM, HALT (running workers stop, later ones not) and pause/resume."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.config import parse_minutes
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import ADMIN_PURGE, admin_lock_key
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.maintenance import PurgeService
from tests.fixtures.processes import wait_all_ready
from tests.fixtures.queue import Queue, effects_by_key, held_payload
from tests.fixtures.waiting import eventually, holds

TAREFA_KEYS = sorted([
    "id", "id_inicial", "data_hora_inicial", "data_hora", "origem", "destino", "processo",
    "chave_externa", "proxima_tentativa", "tentativa", "status", "mensagem", "id_anterior",
    "data_hora_anterior", "status_anterior", "mensagem_anterior", "tenant",
    "grupo_empresarial", "payload", "payload_hash", "pub_sub", "publication_id",
    "subscriber_id", "dead", "live_id", "prioridade",
])


def test_success_commits_effect_with_status_and_passes_26_keys(each_backend_queue):
    payload = json.dumps({"efeito": "s", "report": True})
    task_id = each_backend_queue.insert(payload, processo="proc", chave_externa="ch-1", tenant=7,
                           grupo_empresarial="GE")
    each_backend_queue.start_worker()
    row = each_backend_queue.wait_status(task_id, "sucesso")

    assert row["mensagem"] == f"ok {task_id}"
    assert row["tentativa"] == 1
    assert each_backend_queue.count() == 1  # no retry row
    effects = each_backend_queue.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(task_id, "execute"),
                                                              (task_id, "report")]
    report = json.loads(effects[1]["chave"])
    assert report["keys"] == TAREFA_KEYS
    assert len(report["keys"]) == 26
    assert report["payload_type"] == "str"
    assert report["payload"] == payload


def test_three_workers_run_300_tasks_exactly_once(each_backend_queue):
    workers = [each_backend_queue.start_worker() for _ in range(3)]
    wait_all_ready(workers)
    keys = [f"e{i}" for i in range(300)]
    ids = each_backend_queue.insert_many([{"efeito": k, "sleep": 0.003} for k in keys])
    assert len(ids) == 300
    each_backend_queue.wait_idle(timeout=60)

    effects = each_backend_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)
    assert effects_by_key(each_backend_queue) == {k: 1 for k in keys}
    assert each_backend_queue.count("status = 'sucesso' AND tentativa = 1") == 300
    assert each_backend_queue.count() == 300  # no retry, no dead letter
    assert len({e["pid"] for e in effects}) >= 2, "only one worker took tasks"
    assert all(w.proc.poll() is None for w in workers)


def test_kill9_mid_task_frees_its_lock_and_the_next_worker_rescues_it(each_backend_queue, tmp_path):
    victim = each_backend_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    started, release = tmp_path / "started", tmp_path / "release"
    first = each_backend_queue.insert({"efeito": "resgatada", "started_file": str(started),
                                       "wait_file": str(release)})
    eventually(started.exists, 10, message="tarefa iniciada")
    assert each_backend_queue.row(first)["status"] == "processando"
    q = each_backend_queue
    if q.capabilities.leases:  # the worker's lease in the row, until it stops renewing it
        assert q.row(first)["lease_dono"] and q.row(first)["lease_ate"] > q.db_now()
        victim.kill9()
        lease = q.settings().queue_lease_seconds
        eventually(lambda: q.row(first)["lease_ate"] < q.db_now(), lease + 2, interval=0.1,
                   message="concessão vencida")
    else:
        probe = each_backend_queue.probe_locker()
        key = each_backend_queue.task_key(first)
        assert probe.try_lock(key) is False  # the worker holds it

        killed_at = time.monotonic()
        victim.kill9()
        # The dead session's lock (advisory, named, or the socket client's) ends with its
        # connection: the database or the server sees the socket close.
        eventually(lambda: probe.try_lock(key), 5, interval=0.01, message="lock liberado")
        if each_backend_queue.mode == "cs":  # not by the heartbeat (2 x TIMEOUT_SOCKET_MESSAGE)
            assert time.monotonic() - killed_at < 1.5
        assert probe.unlock(key) is True
    assert each_backend_queue.row(first)["status"] == "processando"  # nobody ran cleanup
    assert each_backend_queue.effects() == []  # the killed attempt's writes were rolled back

    release.write_text("ok")
    rescuer = each_backend_queue.start_worker()  # the runtime runs a rescue pass when it connects
    each_backend_queue.wait_chain_done(first)
    each_backend_queue.wait_idle()
    old, retry = each_backend_queue.chain(first)
    assert [(r["tentativa"], r["status"]) for r in (old, retry)] == [(1, "falha"), (2, "sucesso")]
    assert old["mensagem"].startswith(WORKER_STOPPED)
    assert old["reenfileirado"] is True and "reenfileirada" in old["mensagem"]
    assert (retry["id_anterior"], retry["status_anterior"], retry["mensagem_anterior"]) == \
        (first, "falha", old["mensagem"])
    [effect] = each_backend_queue.effects()
    assert (effect["tarefa_id"], effect["chave"], effect["pid"]) == \
        (retry["id"], "resgatada", rescuer.pid)
    assert each_backend_queue.count() == 2


def _age(q: Queue, task_id: int, days: int) -> None:
    expr = (f"UTC_TIMESTAMP(6) - INTERVAL {days} DAY" if q.is_mysql
            else f"now() - interval '{days} days'")
    q.sql(f"UPDATE {q.qtable} SET data_hora = {expr}, data_hora_inicial = {expr} "
          "WHERE id = %s", (task_id,))


def test_purge_takes_the_admin_lock_and_keeps_waiting_chains(each_backend_queue):
    worker = each_backend_queue.start_ready_worker()
    old_done = each_backend_queue.insert({"efeito": "velha"})
    recent_done = each_backend_queue.insert({"efeito": "recente"})
    old_retry = each_backend_queue.insert({"efeito": "velha_com_retry", "fail_until": 2})
    for task_id in (old_done, recent_done, old_retry):
        each_backend_queue.wait_chain_done(task_id)
    worker.stop()
    _age(each_backend_queue, old_done, 3)
    for r in each_backend_queue.chain(old_retry):
        _age(each_backend_queue, r["id"], 3)
    # An old task still waiting keeps its whole chain.
    waiting = each_backend_queue.insert(
        {"efeito": "esperando"},
        data_hora=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))

    settings = each_backend_queue.settings(QUEUE_PURGE_MAX_AGE="1")
    backend = make_backend(settings)
    service = PurgeService(settings, backend, parse_minutes("*"))
    key = admin_lock_key(each_backend_queue.table, ADMIN_PURGE)
    holder_session = DbSession.open(settings)
    holder = backend.admin_locker(holder_session)
    try:  # another session (socket client) holds the purge's admin lock: skipped
        assert holder.try_lock(key)
        result = service.run_once()
        assert result.skipped and result.count == 0
        assert each_backend_queue.count() == 5
    finally:  # no unlock: the lock ends with its session (or socket connection)
        holder.close()
        holder_session.close()

    result = eventually(lambda: (lambda r: None if r.skipped else r)(service.run_once()), 5,
                        interval=0.02, message="lock administrativo liberado")
    assert result.count == 3
    assert {r["id"] for r in each_backend_queue.rows()} == {recent_done, waiting}


def test_sigterm_finishes_running_task_and_takes_no_other(each_backend_queue, tmp_path):
    payload, started, release = held_payload(tmp_path, "term")
    first = each_backend_queue.insert(payload)
    w = each_backend_queue.start_worker()
    eventually(started.exists, message="task started")
    second = each_backend_queue.insert({"efeito": "second"})

    w.signal(signal.SIGTERM)
    eventually(lambda: "SIGTERM recebido" in w.log(), message="SIGTERM handled")
    assert w.proc.poll() is None  # still finishing the task
    release.touch()
    assert w.wait_exit(20) == 0

    assert each_backend_queue.row(first)["status"] == "sucesso"
    assert each_backend_queue.row(second)["status"] == "pendente"
    assert [(e["tarefa_id"], e["chave"]) for e in each_backend_queue.effects()] == [(first, "term")]
    if each_backend_queue.mode == "cs":  # the worker left the server holding nothing
        eventually(lambda: each_backend_queue.server_status()["locks"] == 0, 5,
                   message="locks liberados")


def test_halt_finishes_running_task_and_spares_later_workers(each_backend_queue, tmp_path):
    payload, started, release = held_payload(tmp_path, "halt")
    first = each_backend_queue.insert(payload)
    w = each_backend_queue.start_ready_worker()
    eventually(started.exists, message="task started")
    with QueueAdmin.from_settings(each_backend_queue.settings()) as admin:
        admin.halt(por="teste")
    release.touch()
    assert w.wait_exit(20) == 0
    assert "HALT recebido no canal" in w.log()
    assert each_backend_queue.row(first)["status"] == "sucesso"
    later = each_backend_queue.insert({"efeito": "after"})
    assert each_backend_queue.row(later)["status"] == "pendente"
    assert [(e["tarefa_id"], e["chave"]) for e in each_backend_queue.effects()] == [(first, "halt")]

    # A worker started after the HALT is not stopped by it (on MySQL native the
    # request stays in the control table).
    w2 = each_backend_queue.start_ready_worker()
    each_backend_queue.wait_status(later, "sucesso")
    assert w2.proc.poll() is None
    assert "HALT" not in w2.log()


def test_halt_stops_every_thread_of_a_concurrent_worker(each_backend_queue):
    w = each_backend_queue.start_ready_worker(QUEUE_CONCURRENCY="3")
    ids = each_backend_queue.insert_many([{"efeito": f"c{i}"} for i in range(6)])
    for task_id in ids:
        each_backend_queue.wait_status(task_id, "sucesso")
    with QueueAdmin.from_settings(each_backend_queue.settings()) as admin:
        admin.halt()
    assert w.wait_exit(20) == 0, w.log()
    assert "HALT recebido no canal" in w.log()
    later = each_backend_queue.insert({"efeito": "after"})
    assert each_backend_queue.row(later)["status"] == "pendente"
    assert sorted(e["tarefa_id"] for e in each_backend_queue.effects()) == sorted(ids)


def test_pause_stops_claims_of_a_running_worker_and_resume_restarts_them(each_backend_queue):
    worker = each_backend_queue.start_ready_worker()
    before = each_backend_queue.insert({"efeito": "antes"})
    each_backend_queue.wait_status(before, "sucesso")
    with QueueAdmin.from_settings(each_backend_queue.settings()) as admin:
        admin.pause(motivo="manutenção", por="contrato")
        assert admin.is_paused()
        # The worker reads the pause at most a second late, when a task wakes it: keep
        # inserting until it says it is paused.
        inserted = []

        def paused() -> bool:
            inserted.append(each_backend_queue.insert({"efeito": f"p{len(inserted)}"}))
            return "pausada (manutenção)" in worker.log()

        eventually(paused, 10, interval=0.2, message="worker pausado")
        eventually(lambda: each_backend_queue.count("status = 'processando'") == 0, 5,
                   message="tarefa em curso concluída")
        done = each_backend_queue.count("status = 'sucesso'")
        holds(lambda: each_backend_queue.count("status IN ('processando', 'sucesso')") == done, 1.5,
              interval=0.1, message="nada é pego com a fila pausada")
        waiting = [i for i in inserted if each_backend_queue.row(i)["status"] == "pendente"]
        assert waiting and each_backend_queue.count("status = 'pendente'") == len(waiting)

        admin.resume(por="contrato")
        assert not admin.is_paused()
    for task_id in waiting:
        each_backend_queue.wait_status(task_id, "sucesso", timeout=10)
    eventually(lambda: "retomada" in worker.log(), 5, message="worker retomado")
    assert (sorted(e["tarefa_id"] for e in each_backend_queue.effects())
            == sorted([before, *inserted]))
    assert each_backend_queue.count() == len(inserted) + 1  # each once, no retry
    assert worker.proc.poll() is None


def test_concurrency_runs_tasks_at_once_in_one_process(each_backend_queue):
    """QUEUE_CONCURRENCY=3: three task threads of one worker run three slow tasks at once."""
    ids = each_backend_queue.insert_many([{"efeito": f"c{i}", "sleep": 1.0} for i in range(6)])
    worker = each_backend_queue.start_ready_worker(QUEUE_CONCURRENCY="3")
    eventually(lambda: each_backend_queue.count("status = 'processando'") >= 3, 15,
               message="3 tasks running at once")
    each_backend_queue.wait_idle()
    effects = each_backend_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)  # once each
    assert {e["pid"] for e in effects} == {worker.pid}
    assert each_backend_queue.count("status = 'sucesso' AND tentativa = 1") == 6
    assert each_backend_queue.count() == 6
    assert worker.proc.poll() is None


@pytest.mark.parametrize("stop", ["sigterm", "halt"])
def test_a_stop_with_concurrency_finishes_every_running_task_and_takes_no_other(
        each_backend_queue, tmp_path, stop):
    release = tmp_path / "release"
    started = [tmp_path / f"started{i}" for i in range(3)]
    ids = each_backend_queue.insert_many([{"efeito": f"r{i}", "started_file": str(started[i]),
                                           "wait_file": str(release)} for i in range(3)])
    worker = each_backend_queue.start_worker(QUEUE_CONCURRENCY="3")
    eventually(lambda: all(f.exists() for f in started), 30, message="3 tasks running")
    waiting = each_backend_queue.insert({"efeito": "espera"})
    if stop == "sigterm":
        worker.signal(signal.SIGTERM)
        eventually(lambda: "SIGTERM recebido" in worker.log(), 15, message="SIGTERM lido")
    else:
        with QueueAdmin.from_settings(each_backend_queue.settings()) as admin:
            admin.halt(por="contrato")
        # MySQL native's HALT is a control row read every 0.5 s: a task ending before it
        # is read may let its thread take the next task (documented), so wait for it.
        eventually(lambda: "HALT recebido" in worker.log(), 15, message="HALT lido")
    release.touch()
    assert worker.wait_exit(30) == 0, worker.log()
    assert [each_backend_queue.row(i)["status"] for i in ids] == ["sucesso"] * 3
    assert sorted(e["tarefa_id"] for e in each_backend_queue.effects()) == sorted(ids)  # once each
    # Claimed ahead with a success, perhaps, but handed back when the threads stopped.
    assert each_backend_queue.row(waiting)["status"] == "pendente", worker.log()
    assert each_backend_queue.count() == 4  # no failed attempt, no retry
    probe = each_backend_queue.probe_locker()  # and no lock of it left behind
    key = each_backend_queue.task_key(waiting)
    assert probe.try_lock(key) and probe.unlock(key)
