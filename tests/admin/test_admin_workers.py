"""QueueAdmin with real workers, on PostgreSQL and MariaDB (client/server mode): redrive of a
dead chain, cancel, pause (workers stop claiming within a second) and resume."""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.exceptions import InvalidTaskState, NotFoundException
from tests.fixtures.waiting import eventually, holds


def test_redrive_cancel_pause_resume_with_a_real_worker(socket_queue):
    socket_queue.start_server()
    worker = socket_queue.start_ready_worker(QUEUE_MAX_RETRY="2", QUEUE_BASE_INTERVAL_RETRY="0")
    admin = QueueAdmin(socket_queue.conn, socket_queue.table)

    # Fails on attempts 1 and 2 (QUEUE_MAX_RETRY=2): dead letter; the redrive (attempt 3) works.
    root = socket_queue.insert({"fail_until": 3})
    dead = eventually(lambda: socket_queue.rows("dead AND live_id = %s AND status = 'sucesso'",
                                                (root,)),
                      30, message="dead letter handled")[0]
    chain = admin.show(root)
    assert [a["status"] for a in chain["tentativas"]] == ["falha", "falha"]
    assert chain["status"] == "falha" and chain["cadeias_mortas"] == [dead["id"]]
    assert admin.show(dead["id"])["cadeia_viva"] == root
    with pytest.raises(NotFoundException):
        admin.show(10**12)

    # The dead chain's id redrives the live chain it came from.
    new_id = admin.retry(dead["id"], por="operador")
    socket_queue.wait_status(new_id, "sucesso")
    last_failed = chain["tentativas"][-1]
    new = socket_queue.row(new_id)
    assert (new["id_inicial"], new["id_anterior"], new["tentativa"]) == (root, last_failed["id"], 3)
    assert new["status_anterior"] == "falha" and new["dead"] is False
    assert socket_queue.row(last_failed["id"])["reenfileirado"] is True
    assert socket_queue.effects("tarefa_id = %s", (new_id,)) == []  # execute, not execute_dead
    with pytest.raises(InvalidTaskState):
        admin.retry(root)  # succeeded now
    current = {r["id"] for r in admin.list_tasks(status="sucesso")}
    assert new_id in current and root not in current
    every = [r["id"] for r in admin.list_tasks(all_attempts=True, dead=False)]
    assert every == sorted([root, last_failed["id"], new_id], reverse=True)

    # Pause: the worker says so and claims nothing (checked one second after the pause).
    admin.pause(motivo="manutenção", por="teste")
    assert admin.is_paused() and admin.pause_state()["motivo"] == "manutenção"
    time.sleep(1.0)
    waiting = socket_queue.insert({"return": "depois da pausa"})
    # The insert wakes the idle worker, which reads the pause before claiming.
    eventually(lambda: "pausada (manutenção)" in worker.log(), 5, message="worker paused")
    cancelled = socket_queue.insert({"return": "nunca"})
    assert admin.cancel(cancelled, motivo="duplicada", por="teste") == cancelled
    with pytest.raises(InvalidTaskState):
        admin.cancel(cancelled)
    holds(lambda: socket_queue.row(waiting)["status"] == "pendente", 2.0, interval=0.1,
          message="nada é pego com a fila pausada")
    row = socket_queue.row(cancelled)
    assert row["status"] == "cancelada" and row["mensagem"] == "Cancelada por teste: duplicada"

    # Resume wakes the worker; a redriven cancelled task runs too.
    redriven = admin.retry(cancelled)
    started = time.monotonic()
    admin.resume(por="teste")
    assert not admin.is_paused()
    eventually(lambda: socket_queue.row(waiting)["status"] == "sucesso", 10, message="resumed")
    eventually(lambda: socket_queue.row(redriven)["status"] == "sucesso", 10,
               message="redriven ran")
    assert time.monotonic() - started < 5
    assert "retomada" in worker.log()
    assert socket_queue.row(cancelled)["status"] == "cancelada"


def test_pause_is_shown_by_status_and_health_and_stops_claims_within_a_second(pg_queue, tmp_path):
    """PostgreSQL with LISTEN/NOTIFY and advisory locks (the default mode)."""
    import json

    from tests.fixtures.processes import run_python

    health_file = tmp_path / "w.health"
    worker = pg_queue.start_ready_worker(QUEUE_HEALTH_FILE=str(health_file))
    admin = QueueAdmin(pg_queue.conn, pg_queue.table)
    env = pg_queue.env(QUEUE_HEALTH_FILE=str(health_file))

    # A busy worker: a stream of tasks, then the pause; nothing is claimed 1 s later.
    ids = [pg_queue.insert({"sleep": 0.05}) for _ in range(40)]
    eventually(lambda: pg_queue.count("status = 'sucesso'") >= 3, 10, message="running")
    admin.pause(motivo="deploy", por="ci")
    paused_at = time.monotonic()
    time.sleep(1.0)  # the pause is read at most a second late (PauseGate)
    claimed = pg_queue.count("status IN ('processando', 'sucesso')")
    holds(lambda: pg_queue.count("status IN ('processando', 'sucesso')") == claimed, 1.5,
          interval=0.1, message="nada é pego com a fila pausada")
    assert pg_queue.count("status = 'pendente'") > 0
    assert time.monotonic() - paused_at < 10

    def probe() -> dict:
        res = run_python(["-m", "nsj_queue_lib.health", "--json"], env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout)

    result = eventually(lambda: (lambda r: r if r["pausada"] else None)(probe()), 15,
                        interval=0.5, message="health says paused")
    assert "fila PAUSADA (deploy)" in result["motivo"]
    res = run_python(["-m", "nsj_queue_lib.status"], env=env)
    assert res.returncode == 0 and "PAUSADA desde" in res.stdout and "por ci: deploy" in res.stdout
    res = run_python(["-m", "nsj_queue_lib.status", "--json"], env=env)
    assert json.loads(res.stdout)["pausa"]["pausada"] is True

    admin.resume()
    eventually(lambda: pg_queue.count("status = 'sucesso'") == len(ids), 20, message="resumed")
    eventually(lambda: probe()["pausada"] is False, 15, interval=0.5, message="health resumed")
    assert worker.proc.poll() is None
