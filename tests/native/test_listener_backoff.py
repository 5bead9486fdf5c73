"""MySQL native with QUEUE_CONCURRENCY: the listener thread's idle turn under steady arrivals."""

from __future__ import annotations

from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually


def _lags(mariadb_queue, ids) -> list:
    """Seconds from each task's data_hora to its side effect, in id order."""
    rows = mariadb_queue.sql(f"SELECT TIMESTAMPDIFF(MICROSECOND, t.data_hora, e.criado) / 1e6 "
                             f"AS lag FROM {mariadb_queue.table} t "
                             f"JOIN {mariadb_queue.qeffects} e ON e.tarefa_id = t.id "
                             f"WHERE t.id IN ({', '.join(map(str, ids))}) ORDER BY t.id")
    return [float(r["lag"]) for r in rows]


def test_steady_arrivals_are_picked_up_promptly_with_concurrency(mariadb_queue):
    """One worker, QUEUE_CONCURRENCY=2, tasks arriving at 80/s.  The listener's probe
    announces each task, a task thread claims it; the listener must learn of that claim
    as a single-threaded worker's notifier does.  Fails before the fix: never told, it
    took every announced task for rows nobody could claim and backed off (2 ms doubling
    to 1 s), so pickup p50 grew from about 25 ms to about 480 ms."""
    worker = mariadb_queue.start_worker(QUEUE_CONCURRENCY="2")
    wait_ready(worker)
    ids = mariadb_queue.insert_steadily(80.0, 4.0)
    eventually(lambda: mariadb_queue.count("status = 'sucesso'") == len(ids), 30,
               message="todas as tarefas concluídas")
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == sorted(ids)  # each once
    lags = _lags(mariadb_queue, ids)
    late = sorted(lags[len(lags) // 2:])  # once any back-off had time to grow
    assert late[len(late) // 2] < 0.2, late
