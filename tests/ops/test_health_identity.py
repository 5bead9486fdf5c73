"""Health files identify the worker: the queue (database host/port/name and table) and
the process (pid and start time).  Real worker processes, real PostgreSQL and MariaDB,
the real probe command (python -m nsj_queue_lib.health)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from nsj_queue_lib.observability import health
from tests.fixtures.processes import run_python
from tests.fixtures.queue import Queue
from tests.fixtures.waiting import eventually


def _probe(q: Queue, tmpdir: Path, **extra: Any) -> subprocess.CompletedProcess:
    return run_python(["-m", "nsj_queue_lib.health", "--json"],
                      env={**os.environ, **q.env(TMPDIR=str(tmpdir), **extra)})


def _verdict(res: subprocess.CompletedProcess) -> Dict[str, Any]:
    assert res.returncode in (0, 1), res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["saudavel"] is (res.returncode == 0)
    return out


def _healthy_pids(q: Queue, tmpdir: Path, **extra: Any) -> List[int]:
    """The pids of the live workers the probe judged, when it says healthy; else []."""
    res = _probe(q, tmpdir, **extra)
    if res.returncode != 0:
        return []
    return [w["pid"] for w in _verdict(res)["workers"]]


def _files(tmpdir: Path) -> List[str]:
    return sorted(p.name for p in tmpdir.glob("nsj_queue_lib-*.health"))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    return proc.pid


@pytest.fixture
def pedidos(pg_server):
    """A queue called `pedidos` on PostgreSQL (schema of its own)."""
    q = Queue.create(pg_server, fila="pedidos")
    yield q
    q.destroy()


@pytest.fixture(params=[
    pytest.param("postgres", id="other-schema"),
    pytest.param("mariadb", id="mariadb-same-table", marks=pytest.mark.mysql)])
def twin(request, pedidos):
    """Another queue called `pedidos` on the same host: in another schema of the same
    PostgreSQL, or in MariaDB with the very same QUEUE_TABLE (schema.pedidos)."""
    if request.param == "postgres":
        q = Queue.create(request.getfixturevalue("pg_server"), fila="pedidos")
    else:
        q = Queue.create(request.getfixturevalue("mysql_server"), schema=pedidos.schema,
                         fila="pedidos")
    yield q
    q.destroy()


def test_two_queues_with_the_same_name_do_not_share_health(pedidos, twin, tmp_path):
    assert pedidos.env()["QUEUE_NAME"] == twin.env()["QUEUE_NAME"] == "pedidos"
    assert health.queue_key(pedidos.settings()) != health.queue_key(twin.settings())
    w1 = pedidos.start_ready_worker(TMPDIR=str(tmp_path))
    w2 = twin.start_ready_worker(TMPDIR=str(tmp_path))
    eventually(lambda: _healthy_pids(pedidos, tmp_path) == [w1.pid], timeout=15,
               message="health of pedidos: its worker only")
    eventually(lambda: _healthy_pids(twin, tmp_path) == [w2.pid], timeout=15,
               message="health of the twin: its worker only")
    assert len(_files(tmp_path)) == 2
    state = json.loads(next(tmp_path.glob(f"*-{w1.pid}-*.health")).read_text())
    assert state["pid"] == w1.pid and state["fila"] == "pedidos" and state["ok"]
    assert state["chave_fila"] == health.queue_key(pedidos.settings())
    assert state["inicio_processo"] == health.process_start(w1.pid)

    w1.kill9()  # no chance to clean up: its file stays until someone looks
    res = _probe(pedidos, tmp_path)
    out = _verdict(res)
    assert res.returncode == 1 and out["workers"] == [] and out["removidos"] == [w1.pid]
    assert "nenhum worker ativo da fila pedidos" in out["motivo"]
    assert not list(tmp_path.glob(f"*-{w1.pid}-*.health"))  # the dead file is removed
    # The twin's worker is still the only one its probe sees, and healthy.
    assert _healthy_pids(twin, tmp_path) == [w2.pid]
    assert _probe(pedidos, tmp_path).returncode == 1


def test_worker_with_bad_configuration_leaves_live_state_alone(pg_queue, tmp_path):
    live = pg_queue.start_ready_worker(TMPDIR=str(tmp_path))
    eventually(lambda: _healthy_pids(pg_queue, tmp_path) == [live.pid], timeout=15,
               message="live worker healthy")
    before = _files(tmp_path)
    # The same queue (same database and table: same health key), a login the database
    # refuses: exit 2 at start.  While it runs and after, the probe says healthy.
    bad = pg_queue.start_worker(TMPDIR=str(tmp_path), DB_USER=f"nao_existe_{uuid.uuid4().hex[:6]}")
    deadline = time.monotonic() + 30
    while bad.proc.poll() is None and time.monotonic() < deadline:
        assert _healthy_pids(pg_queue, tmp_path) == [live.pid], bad.log()
    assert bad.wait_exit(5) == 2, bad.log()
    assert "recusou a conexão" in bad.log()
    assert _files(tmp_path) == before  # no file of the bad worker, ever
    assert _healthy_pids(pg_queue, tmp_path) == [live.pid]


def test_bad_worker_leaves_a_shared_explicit_file_alone(pg_queue, tmp_path):
    path = tmp_path / "w.health"
    live = pg_queue.start_ready_worker(QUEUE_HEALTH_FILE=str(path))
    eventually(lambda: _probe(pg_queue, tmp_path, QUEUE_HEALTH_FILE=path).returncode == 0,
               timeout=15, message="live worker healthy")
    bad = pg_queue.start_worker(QUEUE_HEALTH_FILE=str(path), QUEUE_TABLE=f"{pg_queue.schema}.nada")
    assert bad.wait_exit(30) == 2, bad.log()
    state = json.loads(path.read_text())  # still there, still the live worker's
    assert state["pid"] == live.pid and state["ok"]
    res = _probe(pg_queue, tmp_path, QUEUE_HEALTH_FILE=path)
    assert res.returncode == 0 and _verdict(res)["estado"]["pid"] == live.pid


def _plant(tmpdir: Path, q: Queue, pid: int, start: int, **state: Any) -> Path:
    settings = q.settings()
    path = Path(health.health_file_path(settings, env={}, pid=pid, start=start,
                                        directory=str(tmpdir)))
    path.write_text(json.dumps({
        "pid": pid, "inicio_processo": start, "fila": settings.queue_name,
        "chave_fila": health.queue_key(settings), "horario": time.time(), "intervalo": 5.0,
        "ok": True, "erro": None, "consumidor_conectado": True, **state}))
    return path


def test_files_of_dead_or_reused_pids_are_ignored_and_removed(pg_queue, pedidos, tmp_path):
    me = os.getpid()
    dead = _plant(tmp_path, pg_queue, _dead_pid(), 1)
    reused = _plant(tmp_path, pg_queue, me, health.process_start(me) + 1)  # pid reused
    other_queue = _plant(tmp_path, pedidos, _dead_pid(), 1)  # not this queue's
    res = _probe(pg_queue, tmp_path)
    out = _verdict(res)
    assert res.returncode == 1 and "nenhum worker ativo" in out["motivo"]
    assert not dead.exists() and not reused.exists() and other_queue.exists()
    assert len(out["removidos"]) == 2

    # A live worker cleans its queue's dead files when it first writes its own.
    dead = _plant(tmp_path, pg_queue, _dead_pid(), 1)
    worker = pg_queue.start_ready_worker(TMPDIR=str(tmp_path))
    eventually(lambda: not dead.exists(), timeout=15, message="dead file removed by worker")
    assert other_queue.exists()
    eventually(lambda: _healthy_pids(pg_queue, tmp_path) == [worker.pid], timeout=15,
               message="healthy")

    # Every live worker counts: a live process of the queue whose heartbeat is stale
    # makes the queue unhealthy, and both are reported.
    hung = _plant(tmp_path, pg_queue, me, health.process_start(me), horario=time.time() - 60)
    out = _verdict(_probe(pg_queue, tmp_path))
    assert out["saudavel"] is False
    assert sorted(w["pid"] for w in out["workers"]) == sorted([worker.pid, me])
    assert f"pid {me}: o worker não atualiza" in out["motivo"]
    assert out["estado"]["pid"] == me  # the top-level state is the unhealthy one's
    hung.unlink()
    assert _healthy_pids(pg_queue, tmp_path) == [worker.pid]


def test_probe_without_queue_identity_is_a_config_error(pg_queue, tmp_path):
    env = {**os.environ, **pg_queue.env(TMPDIR=str(tmp_path))}
    del env["QUEUE_TABLE"]
    res = run_python(["-m", "nsj_queue_lib.health"], env=env)
    assert res.returncode == 2 and "QUEUE_TABLE" in res.stderr
    assert "QUEUE_HEALTH_FILE" in res.stderr


def test_key_is_the_database_and_the_table(pg_queue):
    settings = pg_queue.settings()
    key = health.queue_key(settings)
    assert health.queue_key(settings.replace(queue_name="outro")) == key
    assert health.queue_key(settings.replace(server_host="x")) == key
    for change in ({"db_host": "outro"}, {"db_port": 1}, {"db_name": "outra"},
                   {"queue_table": "s.outra"}):
        assert health.queue_key(settings.replace(**change)) != key, change
