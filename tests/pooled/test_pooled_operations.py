"""Everything the library does, through a real PgBouncer in transaction pooling
(DB_POOL_MODE=transaction): schema apply/verify/upgrade, the CLI, QueueClient on a
producer's pooled connection, HALT and pause, the dashboard, and a worker killed with
kill -9 whose task is rescued once its lease expires (nothing lost, nothing twice)."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request

import pytest

from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from tests.fixtures.processes import ROOT, run_python
from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually, holds

pytestmark = pytest.mark.process


def _env(q, **extra) -> dict:
    env = dict(os.environ)
    env.update(q.env(**extra))
    env["PYTHONPATH"] = str(ROOT)
    return env


def cli(*args: str, env: dict) -> object:
    return run_python(["-m", "nsj_queue_lib", *args], env=env, timeout=60)


def test_schema_upgrade_from_6_apply_and_verify_through_pgbouncer(pooled_queue):
    q = pooled_queue
    env = _env(q)
    # A queue of schema 6: no lease columns.  A pooled worker refuses it, in Portuguese.
    q.sql(f"ALTER TABLE {q.qtable} DROP COLUMN lease_dono, DROP COLUMN lease_ate")
    worker = q.start_worker()
    assert worker.wait_exit(30) == 2, worker.log()
    assert "nsj-queue schema upgrade" in worker.log() and "lease_dono" in worker.log()
    res = cli("schema", "verify", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    res = cli("schema", "upgrade", env=env)
    assert res.returncode == 0 and "atualizada" in res.stdout, res.stdout + res.stderr
    assert "SET LOCAL lock_timeout" in res.stdout or "lease_dono" in res.stdout
    assert cli("schema", "verify", env=env).returncode == 0
    assert q.value("SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
                   "AND table_name = %s AND column_name LIKE 'lease%%'", (q.schema, q.fila)) == 2
    # nothing left on the pooled server connections by the upgrade
    assert q.bouncer is not None
    with q.bouncer.connect() as conn, conn.cursor() as cur:
        for _ in range(4):
            cur.execute("SHOW lock_timeout")
            assert cur.fetchone()[0] == "0"
    q.sql(f'CREATE SCHEMA "{q.schema}_b"')
    try:
        assert cli("schema", "apply", f"{q.schema}_b", "nova", env=env).returncode == 0
        assert cli("schema", "verify", f"{q.schema}_b", "nova", env=env).returncode == 0
    finally:
        q.sql(f'DROP SCHEMA "{q.schema}_b" CASCADE')
    worker = q.start_ready_worker()
    task = q.insert({"efeito": "depois do upgrade"})
    q.wait_status(task, "sucesso")


def test_producer_cli_pause_and_halt_through_pgbouncer(pooled_queue):
    q = pooled_queue
    env = _env(q)
    worker = q.start_ready_worker()
    # The producer's own transaction through the pooler: QueueClient on its connection.
    assert q.bouncer is not None
    conn = q.bouncer.connect(autocommit=False)
    try:
        client = QueueClient(conn, q.table, q.sub_table)
        ids = [client.insert_task("teste", "teste", "teste", None,
                                  json.dumps({"efeito": f"p{i}"})) for i in range(5)]
        conn.commit()
    finally:
        conn.close()
    for task_id in ids:
        q.wait_status(task_id, "sucesso", timeout=15)
    assert effects_by_key(q) == {f"p{i}": 1 for i in range(5)}
    row = q.row(ids[0])
    assert row["lease_ate"] is None and row["lease_dono"]  # the lease of the finished run

    res = cli("tasks", "list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert {r["id"] for r in json.loads(res.stdout)} >= set(ids)
    res = cli("pause", "--motivo", "janela", "--json", env=env)
    assert res.returncode == 0 and json.loads(res.stdout)["pausada"] is True
    eventually(lambda: "pausada" in worker.log(), 10, message="worker viu a pausa")
    held = q.insert({"efeito": "pausada"})
    holds(lambda: q.row(held)["status"] == "pendente", 1.5, message="pausada, não pega")
    res = cli("status", env=env)
    assert res.returncode == 0 and "PAUSADA" in res.stdout, res.stdout + res.stderr
    assert cli("resume", env=env).returncode == 0
    q.wait_status(held, "sucesso", timeout=10)

    res = cli("halt", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert worker.wait_exit(15) == 0, worker.log()
    assert "HALT" in worker.log()
    later = q.start_ready_worker()  # started after the HALT: not affected
    task = q.insert({"efeito": "depois do halt"})
    q.wait_status(task, "sucesso")
    assert later.proc.poll() is None


def test_dashboard_through_pgbouncer(pooled_queue, tmp_path):
    from tests.dashboard.conftest import start_dashboard

    q = pooled_queue
    task = q.insert({"efeito": "painel"})
    board = start_dashboard(q, tmp_path, db_env=q.env())
    url = board.url("/fila?" + urllib.parse.urlencode({"f": q.table}))
    with urllib.request.urlopen(url, timeout=10) as resp:
        page = resp.read().decode()
    assert resp.status == 200 and str(task) in page


def test_kill9_mid_task_is_rescued_once_within_the_lease(pooled_queue, tmp_path):
    q = pooled_queue
    lease = q.settings().queue_lease_seconds
    victim = q.start_ready_worker()
    bystander = q.start_ready_worker()
    started, release = tmp_path / "started", tmp_path / "release"
    first = q.insert({"efeito": "resgatada", "started_file": str(started),
                      "wait_file": str(release)})
    eventually(started.exists, 10, message="tarefa iniciada")
    owner_pid = int(started.read_text())
    victim, other = (victim, bystander) if owner_pid == victim.pid else (bystander, victim)
    # the heartbeat keeps a live worker's lease well past its first term
    claimed_until = q.row(first)["lease_ate"]
    eventually(lambda: q.row(first)["lease_ate"] > claimed_until, lease, interval=0.1,
               message="concessão renovada")
    holds(lambda: q.row(first)["status"] == "processando"
          and q.row(first)["lease_ate"] > q.db_now(), lease * 1.5, interval=0.2,
          message="concessão viva enquanto o worker vive")
    victim.kill9()  # mid-task: its attempt's effect is rolled back with its transaction
    killed_at = time.monotonic()
    release.write_text("ok")  # (the next attempt runs through)
    eventually(lambda: q.row(first)["status"] == "falha", lease * 3,
               message="tarefa resgatada pela concessão vencida")
    q.wait_chain_done(first)
    # runs again within the lease and a half (expiry, then the next half-lease rescue), the
    # new attempt due at once (+ slack for a loaded machine)
    assert time.monotonic() - killed_at <= lease * 1.5 + 3
    old, retry = q.chain(first)
    assert old["mensagem"].startswith(WORKER_STOPPED)
    assert retry["status"] == "sucesso" and retry["tentativa"] == 2
    assert effects_by_key(q) == {"resgatada": 1}
    assert other.proc.poll() is None


def test_no_session_state_is_left_on_the_pooled_server_connections(pooled_queue, tmp_path):
    """While tasks run (one at a time and QUEUE_CONCURRENCY=2), no advisory lock of the
    queue, no LISTEN and no prepared statement lives on any server connection."""
    from nsj_queue_lib.engine.keys import task_lock_key

    q = pooled_queue
    q.start_ready_worker()
    q.start_ready_worker(QUEUE_CONCURRENCY="2")
    release = tmp_path / "release"
    ids = [q.insert({"efeito": f"s{i}", "wait_file": str(release)}) for i in range(3)]
    eventually(lambda: q.count("status = 'processando'") == 3, 20, message="3 em execução")
    ns = task_lock_key(q.table, 0)[0] & 0xFFFFFFFF
    assert q.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                   "AND classid = %s", (ns,)) == 0
    assert q.bouncer is not None
    with q.bouncer.connect() as conn, conn.cursor() as cur:
        for _ in range(8):  # (each autocommit statement may land on another server conn)
            cur.execute("SELECT (SELECT count(*) FROM pg_prepared_statements), "
                        "(SELECT count(*) FROM pg_listening_channels()), "
                        "current_setting('lock_timeout'), "
                        "current_setting('tcp_keepalives_idle')")
            prepared, listening, lock_timeout, keepalive = cur.fetchone()
            # (keepalive: the server's own value, never the 30 s a direct session sets)
            assert (prepared, listening, lock_timeout) == (0, 0, "0") and keepalive != "30"
    # nsj-queue status names each running task's lease owner (host:pid:...)
    res = cli("status", "--json", env=_env(q))
    assert res.returncode == 0, res.stderr
    running = json.loads(res.stdout)["em_execucao"]
    assert sorted(r["id"] for r in running) == ids
    pids = {str(w.pid) for w in q.workers}
    assert all(r["sessao"].startswith("concessão de ") and r["sessao"].split(":")[1] in pids
               for r in running), running
    release.write_text("ok")
    for task_id in ids:
        q.wait_status(task_id, "sucesso")
    assert effects_by_key(q) == {f"s{i}": 1 for i in range(3)}


def test_pooled_workers_claim_nothing_while_the_queue_has_concurrency_limits(pooled_queue):
    """Concurrency limits hold their slots with session locks: not in transaction mode."""
    from nsj_queue_lib.admin import QueueAdmin

    q = pooled_queue
    QueueAdmin(q.conn, q.table).set_limit("p", 1)
    worker = q.start_ready_worker()
    task = q.insert({"return": "ok"}, processo="outro")
    eventually(lambda: "DB_POOL_MODE=transaction não aplica" in worker.log(), 20,
               message="recusa dos limites no log")
    holds(lambda: q.row(task)["status"] == "pendente", 1.5, message="nada pego")
    QueueAdmin(q.conn, q.table).clear_limit("p")
    eventually(lambda: q.row(task)["status"] == "sucesso", 20, message="sem limites")
