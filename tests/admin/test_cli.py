"""nsj-queue (python -m nsj_queue_lib) as an operator runs it, against a real PostgreSQL and
real worker processes; --help/--version of every script and module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from nsj_queue_lib.cli import build_parser
from nsj_queue_lib.version import __version__
from tests.fixtures.processes import ROOT, run_python
from tests.fixtures.waiting import eventually

COMMANDS = ["schema", "worker", "webhook", "server", "status", "health", "tasks", "retry",
            "cancel", "pause", "resume", "halt", "dashboard", "demo", "schedule"]


def cli(*args: str, env=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_python(["-m", "nsj_queue_lib", *args], env=env, timeout=timeout)


def test_every_subcommand_is_registered_and_has_portuguese_help():
    names = list(build_parser()._subparsers._group_actions[0].choices)
    assert [n for n in COMMANDS if n not in names] == []
    res = cli("--help")
    assert res.returncode == 0 and res.stdout.startswith("uso: python -m nsj_queue_lib")
    assert "códigos de saída" in res.stdout
    for name in COMMANDS:
        res = cli(name, "--help")
        assert res.returncode == 0, (name, res.stderr)
        assert res.stdout.startswith("uso:") and "opções:" in res.stdout, name
    for args in (["tasks", "list"], ["tasks", "show"], ["schema", "print"],
                 ["schedule", "add"], ["schedule", "list"], ["schedule", "remove"]):
        res = cli(*args, "--help")
        assert res.returncode == 0 and res.stdout.startswith("uso:"), args
    res = cli("--version")
    assert (res.returncode, res.stdout.strip()) == (0, f"python -m nsj_queue_lib {__version__}")
    assert cli().returncode == 2
    assert cli("nao-existe").returncode == 2
    assert cli("retry", "abc").returncode == 2


@pytest.mark.parametrize("module", [
    "nsj_queue_lib.worker_fila_teste", "nsj_queue_lib.worker_pub_sub_teste",
    "nsj_queue_lib.worker_webhook", "nsj_queue_lib.server.server_main",
    "nsj_queue_lib.status", "nsj_queue_lib.health", "nsj_queue_lib.db_gen",
    "nsj_queue_lib.cli.demo", "tests.workers.scripted"])
def test_scripts_and_modules_answer_help_and_version_without_starting(module):
    env = {"PATH": os.environ.get("PATH", "")}  # no DB_*: a started worker would exit 2
    res = run_python(["-m", module, "--help"], env=env, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--version" in res.stdout and "Worker conectado" not in res.stdout + res.stderr
    res = run_python(["-m", module, "--version"], env=env, timeout=30)
    assert res.returncode == 0 and __version__ in res.stdout, res.stdout + res.stderr


def test_operator_session_against_postgres_and_a_worker(pg_queue):
    env = dict(os.environ)
    env.update(pg_queue.env(QUEUE_MAX_RETRY="1", QUEUE_BASE_INTERVAL_RETRY="0"))
    env["PYTHONPATH"] = str(ROOT)
    log = open(pg_queue.log_dir / f"{pg_queue.schema}-cli-worker.log", "wb")
    worker = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib", "worker",
                               "tests.workers.scripted:ScriptedWorker"], env=env, cwd=str(ROOT),
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        ok = pg_queue.insert({"return": "feito"}, processo="faturar")
        bad = pg_queue.insert({"fail_until": 2}, processo="faturar")  # attempt 1 fails: dead
        pg_queue.wait_status(ok, "sucesso")
        dead = eventually(lambda: pg_queue.rows("dead AND live_id = %s AND status = 'sucesso'",
                                                (bad,)), 20, message="dead letter")[0]

        res = cli("tasks", "list", "--json", env=env)
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [(r["id"], r["status"]) for r in rows] == [
            (dead["id"], "sucesso"), (bad, "falha"), (ok, "sucesso")]
        res = cli("tasks", "list", "--status", "falha", env=env)
        assert res.returncode == 0 and f"{bad:>8}" in res.stdout and "feito" not in res.stdout
        res = cli("tasks", "show", str(bad), env=env)
        assert res.returncode == 0, res.stderr
        assert f"Tarefa {bad}: falha após 1 tentativa(s)" in res.stdout
        assert f"Fila de mortos: #{dead['id']}" in res.stdout and '"fail_until": 2' in res.stdout

        res = cli("retry", str(dead["id"]), "--json", env=env)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["id_inicial"] == bad
        pg_queue.wait_status(out["nova_tentativa"], "sucesso")
        res = cli("retry", str(bad), env=env)
        assert res.returncode == 1 and "sucesso" in res.stderr
        res = cli("tasks", "show", "999999999", env=env)
        assert res.returncode == 1 and "não encontrada" in res.stderr

        res = cli("pause", "--motivo", "janela de manutenção", "--json", env=env)
        assert res.returncode == 0 and json.loads(res.stdout)["pausada"] is True
        time.sleep(1.0)
        later = pg_queue.insert({"return": "depois"})
        res = cli("status", env=env)
        assert res.returncode == 0 and "PAUSADA desde" in res.stdout
        assert "janela de manutenção" in res.stdout
        res = cli("cancel", str(later), "--motivo", "não precisa", env=env)
        assert res.returncode == 0 and f"Tarefa {later} cancelada" in res.stdout
        assert pg_queue.row(later)["status"] == "cancelada"
        assert cli("cancel", str(later), env=env).returncode == 1
        again = pg_queue.insert({"return": "retomada"})
        time.sleep(1.0)
        assert pg_queue.row(again)["status"] == "pendente"
        res = cli("resume", env=env)
        assert res.returncode == 0 and "retomada" in res.stdout
        pg_queue.wait_status(again, "sucesso", timeout=10)

        res = cli("schema", "print", pg_queue.schema, "x", env=env)
        ref = run_python(["-m", "nsj_queue_lib.db_gen", pg_queue.schema, "x"], env=env)
        assert res.returncode == 0 and res.stdout == ref.stdout
    finally:
        worker.terminate()
        assert worker.wait(20) == 0
        log.close()


def test_halt_stops_a_native_mysql_worker(mariadb_queue):
    env = dict(os.environ)
    env.update(mariadb_queue.env())
    env["PYTHONPATH"] = str(ROOT)
    worker = mariadb_queue.start_ready_worker()
    res = cli("halt", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"fila": mariadb_queue.table, "halt": True}
    assert worker.wait_exit(15) == 0
    assert "HALT recebido no canal" in worker.log()
    control = (f"{mariadb_queue.quote(mariadb_queue.schema)}."
               f"{mariadb_queue.quote(mariadb_queue.fila + '_controle')}")
    assert "@" in mariadb_queue.value(f"SELECT alterado_por FROM {control} WHERE id = 2")


def test_exit_codes_for_configuration_and_unavailable_database(pg_queue):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "QUEUE_"))}
    res = cli("tasks", "list", env=env)
    assert res.returncode == 2 and "DB_HOST" in res.stderr
    env.update(pg_queue.env())
    env.pop("QUEUE_TABLE")
    res = cli("pause", env=env)
    assert res.returncode == 2 and "QUEUE_TABLE" in res.stderr
    res = cli("pause", "--tabela", "nao valida", env=env)
    assert res.returncode == 2
    env["DB_PORT"] = "1"
    res = cli("tasks", "list", "--tabela", pg_queue.table, env=env)
    assert res.returncode == 1 and "conectar" in res.stderr
    res = cli("worker", "tests.workers.nao_existe:X", env=env)
    assert res.returncode == 2 and "nao_existe" in res.stderr


def test_health_probes_for_the_queue_server_and_the_database(socket_queue):
    """The compose healthchecks of the server and tests services."""
    socket_queue.start_server()
    env = dict(os.environ)
    env.update(socket_queue.env())
    res = cli("health", "--servidor", env=env)
    assert res.returncode == 0 and "respondeu" in res.stdout, res.stdout + res.stderr
    res = cli("health", "--servidor", "--json", env=dict(env, SERVER_AUTH_TOKEN="errado"))
    assert res.returncode == 1 and json.loads(res.stdout)["saudavel"] is False
    res = cli("health", "--somente-banco", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = cli("health", "--somente-banco", env=dict(env, DB_PORT="1"))
    assert res.returncode == 1 and "banco indisponível" in res.stdout


def test_schema_apply_verify_upgrade(pg_server, pg_queue):
    env = dict(os.environ)
    env.update(pg_queue.env())
    res = cli("schema", "verify", env=env)  # QUEUE_TABLE's queue, made by db_gen
    assert res.returncode == 0, res.stdout + res.stderr
    pg_queue.sql(f'DROP TABLE "{pg_queue.schema}"."{pg_queue.fila}_controle"')
    res = cli("schema", "verify", "--json", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    diffs = json.loads(res.stdout)["diferencas"]
    assert any(d["nome"] == f"{pg_queue.fila}_controle" and d["problema"] == "ausente"
               for d in diffs), diffs
    res = cli("schema", "upgrade", "--imprimir", env=env)
    assert res.returncode == 0 and f"{pg_queue.fila}_controle" in res.stdout
    assert pg_queue.value("SELECT to_regclass(%s) IS NULL", (f"{pg_queue.table}_controle",))
    res = cli("schema", "upgrade", env=env)
    assert res.returncode == 0 and "atualizada" in res.stdout, res.stdout + res.stderr
    assert cli("schema", "verify", env=env).returncode == 0
    assert "nada a fazer" in cli("schema", "upgrade", env=env).stdout
    assert cli("pause", env=env).returncode == 0  # the control table is back

    pg_queue.sql(f'CREATE SCHEMA "{pg_queue.schema}_b"')
    try:
        res = cli("schema", "apply", f"{pg_queue.schema}_b", "nova", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert cli("schema", "apply", f"{pg_queue.schema}_b", "nova", env=env).returncode == 0
        assert cli("schema", "verify", f"{pg_queue.schema}_b", "nova", env=env).returncode == 0
        # (its one row: a new queue starts out of mixed-fleet mode with 1.2.2)
        assert pg_queue.sql(f'SELECT pausada, compat_1_2_2 FROM "{pg_queue.schema}_b".nova_controle'
                            ) == [{"pausada": False, "compat_1_2_2": False}]
    finally:
        pg_queue.sql(f'DROP SCHEMA "{pg_queue.schema}_b" CASCADE')
    res = cli("schema", "verify", "so_schema", env=env)
    assert res.returncode == 2
