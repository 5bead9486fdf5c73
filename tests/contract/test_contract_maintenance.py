"""Contract, the admin services in-process on every backend (`backend_harness` over
`each_backend_queue`): the rescue (RetryService) of tasks left 'processando' by a dead
worker, next to a live worker's task and behind the admin lock; the promotion of due
scheduled tasks (NotifyService); each wakes the idle workers.  (With worker processes and
kill -9: test_contract_lifecycle.py.)"""

from __future__ import annotations

import datetime as dt

from nsj_queue_lib.engine.base import ADMIN_RETRY, admin_lock_key
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.maintenance import NotifyService, RetryService
from tests.contract.harness import listening, wait_for

EVERY_MINUTE = frozenset(range(60))


def _processing(q, *ids: int) -> None:
    """The rows as a worker that claimed them and died leaves them."""
    marks = ", ".join(["%s"] * len(ids))
    q.sql(f"UPDATE {q.qtable} SET status = 'processando' WHERE id IN ({marks})", ids)


def test_rescue_requeues_a_dead_workers_tasks_and_leaves_a_live_one(backend_harness):
    q = backend_harness.q
    free = q.insert({"x": 1}, prioridade=70)
    held = q.insert({"x": 2})
    # A chain at its last attempt (QUEUE_MAX_RETRY=2): attempt 2 stores no payload.
    root = q.insert("payload-q", prioridade=60)
    dying = q.insert(None, prioridade=60)
    q.sql(f"UPDATE {q.qtable} SET status = 'falha' WHERE id = %s", (root,))
    q.sql(f"UPDATE {q.qtable} SET id_inicial = %s, tentativa = 2 WHERE id = %s", (root, dying))
    _processing(q, free, held, dying)
    if backend_harness.backend.capabilities.leases:
        # the dead workers' leases expired; the live worker's runs for another minute
        q.sql(f"UPDATE {q.qtable} SET lease_dono = 'w', lease_ate = clock_timestamp() + "
              "CASE WHEN id = %s THEN interval '1 minute' ELSE interval '-1 second' END "
              "WHERE status = 'processando'", (held,))
    else:
        live = q.probe_locker()  # a live worker holds its task's lock
        assert live.try_lock(q.task_key(held))

    settings = q.settings(QUEUE_MAX_RETRY="2")
    rescue = RetryService(settings, backend_harness.backend, EVERY_MINUTE)
    admin = backend_harness.backend.admin_locker(backend_harness.session())
    backend_harness.closers.append(admin)
    key = admin_lock_key(q.table, ADMIN_RETRY)
    assert admin.try_lock(key)  # another worker runs the rescue now: skipped
    result = rescue.run_once()
    assert result.skipped and q.count("status = 'processando'") == 3
    assert admin.unlock(key)

    listener = listening(backend_harness)
    result = rescue.run_once()
    assert (result.skipped, result.count) == (False, 2)
    wait_for(listener, "")  # the idle workers are woken for the new attempt

    old = q.row(free)
    assert old["status"] == "falha" and old["mensagem"].startswith(WORKER_STOPPED)
    assert old["reenfileirado"] is True
    [nxt] = q.rows("id_anterior = %s", (free,))
    assert (nxt["status"], nxt["tentativa"], nxt["id_inicial"], nxt["prioridade"],
            nxt["status_anterior"]) == ("agendada", 2, free, 70, "falha")
    # The last attempt of its chain goes to the dead letters, with the root's payload.
    assert q.row(dying)["status"] == "falha" and q.row(dying)["estouro_tentativas"] is True
    [dead] = q.rows("dead")
    assert (dead["live_id"], dead["payload"], dead["prioridade"]) == (root, "payload-q", 60)
    # The live worker's task is left alone until its lock goes.
    assert q.row(held)["status"] == "processando"
    assert q.rows("id_anterior = %s", (held,)) == []
    if backend_harness.backend.capabilities.leases:  # its worker stops renewing the lease
        q.sql(f"UPDATE {q.qtable} SET lease_ate = clock_timestamp() - interval '1 second' "
              "WHERE id = %s", (held,))
    else:
        assert live.unlock(q.task_key(held))
    assert rescue.run_once().count == 1
    assert q.row(held)["status"] == "falha"
    assert q.count() == 7  # 4 tasks, 2 new attempts, 1 dead letter


def test_notify_service_promotes_due_scheduled_tasks_and_wakes_workers(backend_harness):
    q = backend_harness.q
    now = dt.datetime.now(dt.timezone.utc)
    due = q.insert({"n": "due"}, data_hora=now - dt.timedelta(seconds=5))
    future = q.insert({"n": "future"}, data_hora=now + dt.timedelta(hours=1))
    q.sql(f"UPDATE {q.qtable} SET status = 'agendada'")
    listener = listening(backend_harness)
    result = NotifyService(q.settings(), backend_harness.backend, EVERY_MINUTE).run_once()
    assert result.count == 1
    assert q.row(due)["status"] == "pendente"
    assert q.row(future)["status"] == "agendada"
    wait_for(listener, "")
