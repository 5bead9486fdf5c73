"""Heartbeat file written by the worker and python -m nsj_queue_lib.health."""

from __future__ import annotations

import json
import os

from nsj_queue_lib.observability import health
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually


def _probe(env: dict, *args: str):
    return run_python(["-m", "nsj_queue_lib.health", *args], env=env)


def test_live_then_stopped_worker(pg_queue, tmp_path):
    path = tmp_path / "worker.health"
    env = pg_queue.env(QUEUE_HEALTH_FILE=str(path))
    assert _probe(env).returncode == 1  # no worker yet
    worker = pg_queue.start_ready_worker(QUEUE_HEALTH_FILE=str(path))
    res = eventually(lambda: (r := _probe(env)).returncode == 0 and r, timeout=15,
                     message="health ok")
    assert res.stdout.startswith("saudável: worker pid")
    state = json.loads(path.read_text())
    assert state["pid"] == worker.pid and state["ok"] and state["consumidor_conectado"]
    # The check runs no task and does not disturb the worker.
    ids = [pg_queue.insert({"efeito": f"e{i}"}) for i in range(3)]
    for task_id in ids:
        pg_queue.wait_status(task_id, "sucesso")
    res = _probe(env, "--db", "--json")
    assert res.returncode == 0, res.stdout
    assert json.loads(res.stdout)["saudavel"] is True
    # A worker that stops deletes its file: unhealthy at once.
    assert worker.stop() == 0
    assert not path.exists()
    res = _probe(env)
    assert res.returncode == 1
    assert "nenhum worker ativo" in res.stdout


def test_killed_worker_is_unhealthy(pg_queue, tmp_path):
    path = tmp_path / "worker.health"
    env = pg_queue.env(QUEUE_HEALTH_FILE=str(path))
    worker = pg_queue.start_ready_worker(QUEUE_HEALTH_FILE=str(path))
    eventually(lambda: _probe(env).returncode == 0, timeout=15, message="health ok")
    worker.kill9()
    assert path.exists()  # no chance to clean up
    res = _probe(env)
    assert res.returncode == 1
    assert "não existe mais" in res.stdout


def test_heartbeat_reports_unreachable_database(pg_queue, tmp_path):
    path = tmp_path / "h.json"
    settings = pg_queue.settings().replace(db_port=1)  # nothing listens there
    beat = health.HeartbeatService(settings, path=str(path), interval=0.1)
    beat.consumer_connected = True
    state = beat.run_once()
    assert state["ok"] is False and "banco indisponível" in state["erro"]
    result = health.check(str(path))
    assert not result["saudavel"] and "banco indisponível" in result["motivo"]
    # With a reachable database the same service is healthy; a stale file is not.
    ok = health.HeartbeatService(pg_queue.settings(), path=str(path), interval=0.1)
    ok.mark_connected()
    assert health.check(str(path))["saudavel"]
    assert not health.check(str(path), now=json.loads(path.read_text())["horario"] + 1)[
        "saudavel"]
    ok.close()
    assert not path.exists()
    beat.close()


def test_thread_beats_and_survives_a_killed_connection(pg_queue, tmp_path):
    path = tmp_path / "h.json"
    beat = health.HeartbeatService(pg_queue.settings(), path=str(path), interval=0.05)
    beat.consumer_connected = True
    beat.start()
    try:
        eventually(lambda: beat.runs >= 2, message="beats")
        # Kill the heartbeat's own connection: the next beat reconnects, still healthy.
        pg_queue.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE application_name = 'nsj_queue_lib:health_thread' AND pid <> "
                     "pg_backend_pid()")
        before = beat.runs
        eventually(lambda: beat.runs >= before + 2, message="beats after kill")
        assert json.loads(path.read_text())["ok"] is True
    finally:
        beat.stop()
        beat.join(5)
        beat.close()


def test_probe_without_queue_name_is_a_config_error(tmp_path):
    res = _probe({"PATH": os.environ.get("PATH", "/usr/bin")})
    assert res.returncode == 2
    assert "QUEUE_HEALTH_FILE" in res.stderr


def test_default_path_names_the_queue_and_the_worker(pg_queue):
    settings = pg_queue.settings()
    path = health.health_file_path(settings, env={}, pid=123, start=456)
    name = os.path.basename(path)
    assert name.startswith(f"nsj_queue_lib-{settings.queue_name}-")
    assert name.endswith(f"-{health.queue_key(settings)}-123-456.health")
    assert health.health_file_path(settings, env={"QUEUE_HEALTH_FILE": "/x/y"}) == "/x/y"


def test_dead_pid_in_file(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"pid": 2 ** 22 + 12345, "horario": 0, "ok": True}))
    assert "não existe mais" in health.check(str(path))["motivo"]
    path.write_text("{")
    assert "ilegível" in health.check(str(path))["motivo"]
