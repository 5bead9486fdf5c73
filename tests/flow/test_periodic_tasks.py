"""Periodic tasks with real workers on every backend (PostgreSQL, MySQL native, socket
server over each): exactly one task per slot whatever the number of workers and their
restarts, a slot's task runs within about a second of its time, removal takes effect
within a second; catch-up after downtime, pause, and the CLI."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.exceptions import NotFoundException
from tests.fixtures.processes import run_python, wait_ready
from tests.fixtures.waiting import eventually, holds

UTC = dt.timezone.utc


def _utc(value):
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _slot_tasks(q, nome="tick"):
    return q.rows("chave_externa = %s AND NOT dead AND status <> 'cancelada'",
                  (f"agenda:{nome}",))


def test_one_task_per_slot_with_several_workers_and_restarts(each_backend_queue):
    lq = each_backend_queue
    workers = [lq.start_worker() for _ in range(3)]
    for w in workers:
        wait_ready(w)
    admin = QueueAdmin(lq.conn, lq.table)
    admin.add_schedule("tick", "teste", every="1s", payload={"efeito": "tick"}, por="teste")
    eventually(lambda: len(_slot_tasks(lq)) >= 3, 20, message="primeiros horários")
    workers[0].kill9()  # a worker dies and another one starts
    wait_ready(lq.start_worker())
    workers[1].stop()
    eventually(lambda: len(_slot_tasks(lq)) >= 8, 30, message="horários depois dos reinícios")
    admin.remove_schedule("tick")
    removed_at = lq.db_now()
    with pytest.raises(NotFoundException):
        admin.remove_schedule("tick")
    # Every slot task runs, except at most the one the killed worker held (its rescue is
    # the rescue job's, at its minutes).
    eventually(lambda: sum(t["status"] != "sucesso" for t in _slot_tasks(lq)) <= 1
               and all(t["status"] in ("sucesso", "processando") for t in _slot_tasks(lq)),
               30, message="tarefas dos horários executadas")
    tasks = [t for t in _slot_tasks(lq) if t["id_inicial"] is None]  # (not a retry)
    done = {t["id"] for t in _slot_tasks(lq) if t["status"] == "sucesso"}
    slots = [_utc(t["data_hora"]) for t in tasks]
    assert len(slots) == len(set(slots)), "um horário com duas tarefas"
    assert all(s.microsecond == 0 for s in slots)
    # Removed within about a second: no task for a slot after that.
    count = len(_slot_tasks(lq))
    holds(lambda: len(_slot_tasks(lq)) == count, 2.0, interval=0.2,
          message="nada depois da remoção")
    assert max(slots) <= _utc(removed_at) + dt.timedelta(seconds=1.5)
    # Each task started within about a second of its slot (its effect's time; the
    # median, as 2 cores are shared with other test runs).
    slot_of = {t["id"]: _utc(t["data_hora"]) for t in tasks}
    delays = sorted((_utc(e["criado"]) - slot_of[e["tarefa_id"]]).total_seconds()
                    for e in lq.effects("chave = 'tick'") if e["tarefa_id"] in done
                    and e["tarefa_id"] in slot_of)
    assert len(delays) >= len(tasks) - 1
    assert delays[len(delays) // 2] < 1.0, delays


def test_catch_up_after_downtime_and_pause(each_db_queue):
    dbq = each_db_queue
    admin = QueueAdmin(dbq.conn, dbq.table)
    admin.add_schedule("horaria", "teste", every="1h", payload={"return": "h"})
    admin.add_schedule("tres", "teste", every="1h", payload={"return": "3"}, catch_up=3)
    # `schedule add` took each first slot (the next hour): its task waits for it.
    first = {r["nome"]: r for r in admin.list_schedules()}
    for r in first.values():
        assert _utc(dbq.row(r["ultima_tarefa"])["data_hora"]) == r["ultimo_slot"]
        assert r["proximo"] == r["ultimo_slot"] + dt.timedelta(hours=1)
    # Five hours of downtime: as if the first slot ran long ago and five more passed.
    dbq.sql(f"UPDATE {dbq.qtable} SET status = 'cancelada'")
    table = dbq.qtable.replace(dbq.quote(dbq.fila), dbq.quote(dbq.fila + "_agenda"))
    interval = "INTERVAL 6 HOUR" if dbq.is_mysql else "interval '6 hours'"
    dbq.sql(f"UPDATE {table} SET proximo = proximo - {interval}")
    admin.add_schedule("vizinha", "teste", every="1h")  # (writes the control row's hint)
    dbq.sql(f"UPDATE {dbq.qtable} SET status = 'cancelada'")
    before = {r["nome"]: _utc(r["proximo"]) for r in admin.list_schedules()}
    admin.remove_schedule("vizinha")
    admin.pause(por="teste")
    dbq.start_ready_worker()
    holds(lambda: not _slot_tasks(dbq, "horaria") and not _slot_tasks(dbq, "tres"), 2.0,
          interval=0.2, message="fila pausada: nenhum horário")
    admin.resume(por="teste")
    eventually(lambda: len(_slot_tasks(dbq, "horaria")) == 1
               and len(_slot_tasks(dbq, "tres")) == 3, 20, message="recuperação")
    holds(lambda: dbq.count("status <> 'cancelada'") == 4, 1.5, interval=0.2,
          message="só a recuperação")
    hour = dt.timedelta(hours=1)
    last = before["horaria"] + 4 * hour  # the most recent missed slot
    assert [_utc(t["data_hora"]) for t in _slot_tasks(dbq, "horaria")] == [last]
    assert [_utc(t["data_hora"]) for t in _slot_tasks(dbq, "tres")] == [
        last - 2 * hour, last - hour, last]
    rows = {r["nome"]: r for r in admin.list_schedules()}
    assert rows["horaria"]["proximo"] == last + hour and rows["horaria"]["ultimo_slot"] == last
    assert rows["tres"]["ultima_tarefa"] == _slot_tasks(dbq, "tres")[-1]["id"]
    for t in _slot_tasks(dbq, "horaria") + _slot_tasks(dbq, "tres"):
        dbq.wait_status(t["id"], "sucesso")
        assert t["processo"] == "teste" and t["origem"] == "nsj-queue agenda"


def _cli(q, *args, pre=""):
    code = (f"import sys; {pre}from nsj_queue_lib.cli import console_main; "
            f"sys.argv = ['nsj-queue'] + {list(args)!r}; sys.exit(console_main())")
    return run_python(["-c", code], env=q.env(), timeout=60)


def test_schedule_cli(each_db_queue):
    dbq = each_db_queue
    res = _cli(dbq, "schedule", "add", "relatorio", "--cron", "*/5 8-18 * * 1-5",
               "--tz", "America/Sao_Paulo", "--processo", "relatorios", "--payload",
               '{"tipo": "diario"}')
    assert res.returncode == 0, res.stderr
    assert "Agendamento relatorio gravado (cron '*/5 8-18 * * 1-5' (America/Sao_Paulo)" \
        in res.stdout
    res = _cli(dbq, "schedule", "add", "limpeza", "--every", "30s", "--processo", "limpar",
               "--catch-up", "2")
    assert res.returncode == 0, res.stderr
    res = _cli(dbq, "schedule", "list", "--json")
    rows = {r["nome"]: r for r in json.loads(res.stdout)}
    assert rows["limpeza"]["regra"] == "a cada 30s" and rows["limpeza"]["recuperar"] == 2
    assert json.loads(rows["relatorio"]["payload"]) == {"tipo": "diario"}
    nxt = dt.datetime.fromisoformat(rows["limpeza"]["proximo"])
    assert nxt.second in (0, 30) and nxt > _utc(dbq.db_now())
    res = _cli(dbq, "schedule", "list")
    assert "limpeza" in res.stdout and "PRÓXIMO" in res.stdout
    assert _cli(dbq, "schedule", "remove", "limpeza").returncode == 0
    res = _cli(dbq, "schedule", "remove", "limpeza")
    assert res.returncode == 1 and "não existe" in res.stderr
    res = _cli(dbq, "schedule", "add", "x", "--every", "10d", "--processo", "p")
    assert res.returncode == 2 and "intervalo inválido" in res.stderr
    res = _cli(dbq, "schedule", "add", "x", "--cron", "* * * * *", "--processo", "p",
               pre="sys.modules['cronsim'] = None; ")
    assert res.returncode == 1 and "nsj-queue-lib[cron]" in res.stderr
    assert [r["nome"] for r in QueueAdmin(dbq.conn, dbq.table).list_schedules()] == [
        "relatorio"]


def test_batch_mode_and_concurrency_workers_run_schedules_and_status_shows_them(each_db_queue):
    dbq = each_db_queue
    dbq.start_ready_worker(QUEUE_BATCH_SIZE="5")
    dbq.start_ready_worker(QUEUE_CONCURRENCY="3")
    dbq.start_ready_worker(QUEUE_SCHEDULES="false")
    admin = QueueAdmin(dbq.conn, dbq.table)
    admin.add_schedule("tick", "teste", every="1s", payload={"return": "t"})
    eventually(lambda: sum(t["status"] == "sucesso" for t in _slot_tasks(dbq)) >= 3, 30,
               message="horários executados")
    slots = [t["data_hora"] for t in _slot_tasks(dbq)]
    assert len(slots) == len(set(slots))
    res = run_python(["-m", "nsj_queue_lib", "status"], env=dbq.env(), timeout=60)
    assert "Tarefas periódicas:         1" in res.stdout, res.stdout + res.stderr
    assert "tick: a cada 1s, processo teste; próximo" in res.stdout
    from nsj_queue_lib.observability.metrics import QueueGauges

    gauges = QueueGauges(dbq.settings())
    try:
        names = {f[0]: f[3] for f in gauges.families({"queue": "q"})}
    finally:
        gauges.close_session()
    assert names["nsj_queue_schedules"] == [({"queue": "q"}, 1)]
    assert names["nsj_queue_schedule_lag_seconds"][0][1] < 5
    key = dbq.client().insert_task("t", "t", "teste", None, '{"wait_file": "/nao/existe"}',
                                   unique_key="visivel", data_hora=dt.datetime(2100, 1, 1))
    res = run_python(["-m", "nsj_queue_lib", "tasks", "list"], env=dbq.env(), timeout=60)
    line = next(ln for ln in res.stdout.splitlines() if ln.strip().startswith(str(key)))
    assert "[chave única visivel]" in line
    admin.remove_schedule("tick")
