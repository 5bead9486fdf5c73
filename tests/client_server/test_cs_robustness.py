"""Client/server mode under failures of the server itself: killed and restarted, down,
restarted during a long task; a task longer than TIMEOUT_SOCKET_MESSAGE.  Real server
and worker processes, MariaDB and PostgreSQL.  (Several workers exactly once, kill -9
of a worker and SIGTERM run on every backend: tests/core.)"""

from __future__ import annotations

import re
import time

from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually, holds, log_since


def _assert_exactly_once(socket_queue, keys, worker_pids) -> None:
    """Every key has one committed effect, every chain one success, nothing left behind."""
    counts = effects_by_key(socket_queue)
    duplicated = {k: n for k, n in counts.items() if n != 1}
    assert not duplicated, f"efeitos duplicados: {duplicated}"
    assert set(counts) == set(keys), f"faltam: {sorted(set(keys) - set(counts))[:20]}"
    assert socket_queue.count("status IN ('pendente', 'agendada', 'processando')") == 0
    assert socket_queue.count("dead") == 0
    successes = socket_queue.sql(f"SELECT coalesce(id_inicial, id) AS raiz, count(*) AS n "
                                 f"FROM {socket_queue.qtable} WHERE status = 'sucesso' "
                                 "GROUP BY coalesce(id_inicial, id)")
    assert len(successes) == len(keys) and {int(r["n"]) for r in successes} == {1}
    # The only failures allowed are rescues of attempts whose lock was lost.
    for row in socket_queue.rows("status = 'falha'"):
        assert row["mensagem"].startswith(WORKER_STOPPED), row
    assert {e["pid"] for e in socket_queue.effects()} <= set(worker_pids)


def test_server_killed_and_restarted_during_1000_tasks_loses_and_duplicates_nothing(socket_queue):
    socket_queue.timeout = 1.0
    server = socket_queue.start_server()
    workers = [socket_queue.start_worker(QUEUE_MINUTE_RETRY_THREAD="0") for _ in range(3)]
    for w in workers:
        eventually(lambda w=w: "Worker conectado" in w.log(), 20, message="worker pronto")
    keys = [f"k{i}" for i in range(1000)]
    socket_queue.insert_many([{"efeito": k, "sleep": 0.004} for k in keys])

    eventually(lambda: socket_queue.count("status = 'sucesso'") >= 150, 30, interval=0.01,
               message="150 tarefas concluídas")
    marks = [len(w.log()) for w in workers]
    server.kill9()
    done_at_kill = socket_queue.count("status = 'sucesso'")
    assert done_at_kill < 900, "a carga acabou antes de derrubar o servidor"
    eventually(lambda: all("Conexão indisponível" in log_since(w, m)
                           for w, m in zip(workers, marks)), 20,
               message="os 3 workers perceberam a queda do servidor")
    # Without the server nobody can take a task lock: no new claims.
    stalled = socket_queue.count("status = 'sucesso'")
    holds(lambda: socket_queue.count("status = 'sucesso'") == stalled, 0.5,
          message="nenhuma tarefa concluída sem o servidor")
    eventually(lambda: socket_queue.count("status = 'processando'") == 0, 10,
               message="nenhuma tarefa em processamento sem o servidor")
    last_effect = socket_queue.value(f"SELECT max(id) AS m FROM "
                                     f"{socket_queue.quote(socket_queue.schema)}.efeitos")

    socket_queue.start_server()  # same ports
    socket_queue.wait_idle(timeout=90)
    _assert_exactly_once(socket_queue, keys, [w.pid for w in workers])
    after = {e["pid"] for e in socket_queue.effects("id > %s", (last_effect,))}
    assert after, "nenhum worker voltou a trabalhar depois do reinício"
    for w in workers:
        assert w.proc.poll() is None, w.log()
    eventually(lambda: socket_queue.server_status()["listeners"] == 3, 10,
               message="os 3 workers ouvindo o novo servidor")


def test_task_longer_than_socket_timeout_keeps_its_lock(socket_queue, tmp_path):
    socket_queue.timeout = 1.0  # heartbeat 1 s: a silent client would lose its locks after 2 s
    socket_queue.start_server()
    socket_queue.start_ready_worker()
    started_file = tmp_path / "started"
    task_id = socket_queue.insert({"efeito": "longa", "started_file": str(started_file),
                                   "sleep": 6})
    eventually(started_file.exists, 10, message="tarefa iniciada")
    started = time.monotonic()
    probe = socket_queue.locker()
    key = socket_queue.task_key(task_id)
    second = None
    # Checked all along: past heartbeat + timeout (2 s) the lock is still held, and a
    # worker started then (its start-up rescue pass) leaves the task alone.
    while time.monotonic() - started < 5.0:
        assert probe.try_lock(key) is False, "o lock da tarefa longa foi perdido"
        assert socket_queue.row(task_id)["status"] == "processando"
        if second is None and time.monotonic() - started >= 2.5:
            second = socket_queue.start_worker()
        time.sleep(0.2)
    assert second is not None
    row = socket_queue.wait_status(task_id, "sucesso", timeout=10)
    assert row["mensagem"] == f"ok {task_id}" and row["tentativa"] == 1
    assert socket_queue.count() == 1  # no rescue, no retry
    assert effects_by_key(socket_queue) == {"longa": 1}
    assert "resgatada" not in second.log()
    assert probe.try_lock(key) is True  # released after the task


def test_workers_back_off_while_the_server_is_down(mariadb_socket_queue):
    q = mariadb_socket_queue
    server = q.start_server()
    worker = q.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    keys = [f"k{i}" for i in range(40)]
    q.insert_many([{"efeito": k, "sleep": 0.1} for k in keys])
    eventually(lambda: q.count("status = 'sucesso'") >= 3, 15, interval=0.02,
               message="3 tarefas concluídas")
    log_before = len(worker.log())
    server.kill9()
    # Exponential back-off (0.5 s doubling, jitter in [50%, 100%]): the announced delays
    # never shrink and the third is at least 1 s (before the fix: ~0.4 s each time).
    retry = re.compile(r"Conexão indisponível.*nova tentativa em ([0-9.]+) s")

    def three_delays():
        found = retry.findall(log_since(worker, log_before))
        return [float(d) for d in found[:3]] if len(found) >= 3 else None

    delays = eventually(three_delays, 30, interval=0.1, message="3 tentativas de reconexão")
    assert delays == sorted(delays) and delays[2] >= 1.0, delays
    q.start_server()
    q.wait_idle(timeout=40)
    _assert_exactly_once(q, keys, [worker.pid])


def test_server_restart_during_a_long_task_does_not_stall_the_other_workers(socket_queue, tmp_path):
    # The restart drops the long task's socket lock while its transaction still holds
    # the row.  The rescue pass that the other worker runs when it reconnects must
    # skip that row (not wait for it) and the task must finish once, in one attempt.
    socket_queue.timeout = 1.0
    socket_queue.start_server()
    long_worker = socket_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    started = tmp_path / "started"
    long_id = socket_queue.insert({"efeito": "longa", "sleep": 9, "started_file": str(started)})
    eventually(started.exists, 10, message="tarefa longa iniciada")
    other = socket_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    keys = [f"k{i}" for i in range(300)]
    socket_queue.insert_many([{"efeito": k, "sleep": 0.02} for k in keys])
    eventually(lambda: socket_queue.count("status = 'sucesso'") >= 20, 10, interval=0.01,
               message="tarefas curtas em andamento")
    mark = len(other.log())
    socket_queue.current_server.kill9()
    eventually(lambda: "Conexão indisponível" in log_since(other, mark), 10,
               message="o outro worker percebeu a queda do servidor")
    socket_queue.start_server()
    before = socket_queue.count("status = 'sucesso'")
    eventually(lambda: socket_queue.count("status = 'sucesso'") - before >= 30, 6, interval=0.05,
               message=f"o outro worker parou atrás da tarefa longa\n{other.log()[-2000:]}")
    assert socket_queue.row(long_id)["status"] == "processando", \
        "a tarefa longa terminou cedo demais"
    socket_queue.wait_idle(timeout=40)
    _assert_exactly_once(socket_queue, [*keys, "longa"], [long_worker.pid, other.pid])
    assert socket_queue.count("status = 'falha'") == 0
    [row] = socket_queue.chain(long_id)
    assert (row["status"], row["tentativa"]) == ("sucesso", 1)
