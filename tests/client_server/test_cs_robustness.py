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


def _assert_exactly_once(csq, keys, worker_pids) -> None:
    """Every key has one committed effect, every chain one success, nothing left behind."""
    counts = effects_by_key(csq)
    duplicated = {k: n for k, n in counts.items() if n != 1}
    assert not duplicated, f"efeitos duplicados: {duplicated}"
    assert set(counts) == set(keys), f"faltam: {sorted(set(keys) - set(counts))[:20]}"
    assert csq.count("status IN ('pendente', 'agendada', 'processando')") == 0
    assert csq.count("dead") == 0
    successes = csq.sql(f"SELECT coalesce(id_inicial, id) AS raiz, count(*) AS n "
                        f"FROM {csq.qtable} WHERE status = 'sucesso' "
                        "GROUP BY coalesce(id_inicial, id)")
    assert len(successes) == len(keys) and {int(r["n"]) for r in successes} == {1}
    # The only failures allowed are rescues of attempts whose lock was lost.
    for row in csq.rows("status = 'falha'"):
        assert row["mensagem"].startswith(WORKER_STOPPED), row
    assert {e["pid"] for e in csq.effects()} <= set(worker_pids)


def test_server_killed_and_restarted_during_1000_tasks_loses_and_duplicates_nothing(csq):
    csq.timeout = 1.0
    server = csq.start_server()
    workers = [csq.start_worker(QUEUE_MINUTE_RETRY_THREAD="0") for _ in range(3)]
    for w in workers:
        eventually(lambda w=w: "Worker conectado" in w.log(), 20, message="worker pronto")
    keys = [f"k{i}" for i in range(1000)]
    csq.insert_many([{"efeito": k, "sleep": 0.004} for k in keys])

    eventually(lambda: csq.count("status = 'sucesso'") >= 150, 30, interval=0.01,
               message="150 tarefas concluídas")
    marks = [len(w.log()) for w in workers]
    server.kill9()
    done_at_kill = csq.count("status = 'sucesso'")
    assert done_at_kill < 900, "a carga acabou antes de derrubar o servidor"
    eventually(lambda: all("Conexão indisponível" in log_since(w, m)
                           for w, m in zip(workers, marks)), 20,
               message="os 3 workers perceberam a queda do servidor")
    # Without the server nobody can take a task lock: no new claims.
    stalled = csq.count("status = 'sucesso'")
    holds(lambda: csq.count("status = 'sucesso'") == stalled, 0.5,
          message="nenhuma tarefa concluída sem o servidor")
    eventually(lambda: csq.count("status = 'processando'") == 0, 10,
               message="nenhuma tarefa em processamento sem o servidor")
    last_effect = csq.value(f"SELECT max(id) AS m FROM {csq.quote(csq.schema)}.efeitos")

    csq.start_server()  # same ports
    csq.wait_idle(timeout=90)
    _assert_exactly_once(csq, keys, [w.pid for w in workers])
    after = {e["pid"] for e in csq.effects("id > %s", (last_effect,))}
    assert after, "nenhum worker voltou a trabalhar depois do reinício"
    for w in workers:
        assert w.proc.poll() is None, w.log()
    eventually(lambda: csq.server_status()["listeners"] == 3, 10,
               message="os 3 workers ouvindo o novo servidor")


def test_task_longer_than_socket_timeout_keeps_its_lock(csq, tmp_path):
    csq.timeout = 1.0  # heartbeat 1 s: a silent client would lose its locks after 2 s
    csq.start_server()
    csq.start_ready_worker()
    started_file = tmp_path / "started"
    task_id = csq.insert({"efeito": "longa", "started_file": str(started_file), "sleep": 6})
    eventually(started_file.exists, 10, message="tarefa iniciada")
    started = time.monotonic()
    probe = csq.locker()
    key = csq.task_key(task_id)
    second = None
    # Checked all along: past heartbeat + timeout (2 s) the lock is still held, and a
    # worker started then (its start-up rescue pass) leaves the task alone.
    while time.monotonic() - started < 5.0:
        assert probe.try_lock(key) is False, "o lock da tarefa longa foi perdido"
        assert csq.row(task_id)["status"] == "processando"
        if second is None and time.monotonic() - started >= 2.5:
            second = csq.start_worker()
        time.sleep(0.2)
    assert second is not None
    row = csq.wait_status(task_id, "sucesso", timeout=10)
    assert row["mensagem"] == f"ok {task_id}" and row["tentativa"] == 1
    assert csq.count() == 1  # no rescue, no retry
    assert effects_by_key(csq) == {"longa": 1}
    assert "resgatada" not in second.log()
    assert probe.try_lock(key) is True  # released after the task


def test_workers_back_off_while_the_server_is_down(mariadb_csq):
    csq = mariadb_csq
    server = csq.start_server()
    worker = csq.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    keys = [f"k{i}" for i in range(40)]
    csq.insert_many([{"efeito": k, "sleep": 0.1} for k in keys])
    eventually(lambda: csq.count("status = 'sucesso'") >= 3, 15, interval=0.02,
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
    csq.start_server()
    csq.wait_idle(timeout=40)
    _assert_exactly_once(csq, keys, [worker.pid])


def test_server_restart_during_a_long_task_does_not_stall_the_other_workers(csq, tmp_path):
    # The restart drops the long task's socket lock while its transaction still holds
    # the row.  The rescue pass that the other worker runs when it reconnects must
    # skip that row (not wait for it) and the task must finish once, in one attempt.
    csq.timeout = 1.0
    csq.start_server()
    long_worker = csq.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    started = tmp_path / "started"
    long_id = csq.insert({"efeito": "longa", "sleep": 9, "started_file": str(started)})
    eventually(started.exists, 10, message="tarefa longa iniciada")
    other = csq.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="0")
    keys = [f"k{i}" for i in range(300)]
    csq.insert_many([{"efeito": k, "sleep": 0.02} for k in keys])
    eventually(lambda: csq.count("status = 'sucesso'") >= 20, 10, interval=0.01,
               message="tarefas curtas em andamento")
    mark = len(other.log())
    csq.current_server.kill9()
    eventually(lambda: "Conexão indisponível" in log_since(other, mark), 10,
               message="o outro worker percebeu a queda do servidor")
    csq.start_server()
    before = csq.count("status = 'sucesso'")
    eventually(lambda: csq.count("status = 'sucesso'") - before >= 30, 6, interval=0.05,
               message=f"o outro worker parou atrás da tarefa longa\n{other.log()[-2000:]}")
    assert csq.row(long_id)["status"] == "processando", "a tarefa longa terminou cedo demais"
    csq.wait_idle(timeout=40)
    _assert_exactly_once(csq, [*keys, "longa"], [long_worker.pid, other.pid])
    assert csq.count("status = 'falha'") == 0
    [row] = csq.chain(long_id)
    assert (row["status"], row["tentativa"]) == ("sucesso", 1)
