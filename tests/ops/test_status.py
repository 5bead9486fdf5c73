"""python -m nsj_queue_lib.status: JSON and text on a known queue (PostgreSQL and MariaDB)."""

from __future__ import annotations

import json

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.postgres.backend import PgGuard
from nsj_queue_lib.observability import status as status_mod
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually
from tests.mysql.conftest import make_settings
from tests.ops import scenario

SETTINGS = {"QUEUE_MAX_RETRY": "2", "QUEUE_BASE_INTERVAL_RETRY": "5"}


def _status_env(env: dict) -> dict:
    """Only what the status command needs: DB_* and QUEUE_TABLE."""
    keep = {k: v for k, v in env.items() if k.startswith("DB_") or k == "QUEUE_TABLE"}
    return {**keep, "PATH": "/usr/bin:/bin"}


def _check_common(data: dict, history: scenario.History) -> None:
    assert data["cadeias_por_status"] == {"agendada": 1, "falha": 2, "processando": 1,
                                          "sucesso": 5}
    assert data["mortas_por_status"] == {"pendente": 1, "sucesso": 1}
    dead = data["mortas_24h"]
    assert dead["total"] == 2
    assert dead["por_status"] == {"pendente": 1, "sucesso": 1}
    assert [(d["id"], d["live_id"], d["status"], d["subscriber_id"]) for d in dead["ultimas"]] \
        == [(history.dead["s2"], history.ids["s2"], "pendente", "s2"),
            (history.dead["to_dead"], history.ids["to_dead"], "sucesso", None)]
    # The claimed task was "waiting"; what is left due is s2's dead letter.
    assert data["devidas"] == 1
    oldest = data["mais_antiga_devida"]
    assert oldest["id"] == history.dead["s2"]
    assert 0 <= oldest["atraso_segundos"] < 120
    assert data["em_execucao_total"] == 1
    [running] = data["em_execucao"]
    assert running["id"] == history.ids["waiting"]
    assert running["segundos"] >= 0


def test_status_json_postgres(pg_queue):
    settings = pg_queue.settings(**SETTINGS)
    driver = scenario.Driver(settings)
    try:
        history = scenario.build(driver)
    finally:
        driver.close()
    # A worker-like session claims the oldest due task and holds it in a transaction.
    worker = DbSession.open(settings)
    try:
        [claimed] = PgGuard(TaskRepository(worker, settings.queue_table),
                            settings.queue_table).claim()
        assert claimed["id"] == history.ids["waiting"]
        worker.begin()
        pid = worker.fetch_value("SELECT pg_backend_pid()")
        # Until the holder's transaction is 0.3 s old, by the database's own clock.
        eventually(lambda: pg_queue.value(
            "SELECT extract(epoch FROM clock_timestamp() - xact_start) >= 0.3 "
            "FROM pg_stat_activity WHERE pid = %s", (pid,)), 10, interval=0.05,
            message="transação do worker com 0.3 s")
        res = run_python(["-m", "nsj_queue_lib.status", "--json"],
                         env=_status_env(pg_queue.env()))
    finally:
        worker.close()
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["fila"] == pg_queue.table and data["banco"] == "postgres"
    expected_rows = {r["status"]: int(r["n"]) for r in pg_queue.sql(
        f"SELECT status, count(*) AS n FROM {pg_queue.table} GROUP BY status")}
    assert data["por_status"] == expected_rows
    _check_common(data, history)
    [running] = data["em_execucao"]
    # Its start is the lock holder's transaction start, not an estimate.
    assert running["estimado"] is False
    assert 0.2 <= running["segundos"] < 60


@pytest.mark.mysql
def test_status_json_mariadb(mariadb_queue):
    settings = make_settings(mariadb_queue, **SETTINGS)
    driver = scenario.Driver(settings)
    try:
        history = scenario.build(driver)
        driver.repo.task_mark_processing(history.ids["waiting"])
    finally:
        driver.close()
    data = status_mod.read_status(settings)
    json.dumps(data)  # serialisable as is
    assert data["banco"] == "mysql"
    _check_common(data, history)
    assert data["em_execucao"][0]["estimado"] is True
    assert data["gerado_em"].endswith("+00:00")


def test_status_text_and_watch(pg_queue):
    settings = pg_queue.settings(**SETTINGS)
    driver = scenario.Driver(settings)
    try:
        scenario.build(driver)
    finally:
        driver.close()
    env = _status_env(pg_queue.env())
    res = run_python(["-m", "nsj_queue_lib.status"], env=env)
    assert res.returncode == 0, res.stderr
    assert f"Fila {pg_queue.table} (postgres)" in res.stdout
    assert "Mortas nas últimas 24 h:    2" in res.stdout
    # --watch with --json prints one JSON line per reading until interrupted.
    import subprocess
    import sys

    from tests.fixtures.processes import ROOT

    proc = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.status", "--json", "--watch",
                             "0.2"], env={**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.send_signal(2)
        proc.wait(10)
    assert proc.returncode == 0
    assert all(json.loads(line)["fila"] == pg_queue.table for line in lines)


def test_status_config_and_missing_table(pg_queue):
    env = _status_env(pg_queue.env())
    env.pop("QUEUE_TABLE")
    res = run_python(["-m", "nsj_queue_lib.status"], env=env)
    assert res.returncode == 2
    assert "QUEUE_TABLE" in res.stderr
    res = run_python(["-m", "nsj_queue_lib.status", "--tabela", f"{pg_queue.schema}.nao_existe"],
                     env=env)
    assert res.returncode == 1
    assert "nao_existe" in res.stderr


def test_status_with_an_unknown_database_user_is_a_configuration_error(pg_queue):
    res = run_python(["-m", "nsj_queue_lib.status"],
                     env=_status_env(pg_queue.env(DB_USER="usuario_inexistente")))
    assert res.returncode == 2, res
    assert res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        f"Erro: O banco {pg_queue.server.host}:{pg_queue.server.port}/{pg_queue.server.dbname} "
        f"recusou "
        "a conexão: o usuário 'usuario_inexistente' não existe no servidor (verifique DB_USER) "
        "[SQLSTATE 28000]"]
