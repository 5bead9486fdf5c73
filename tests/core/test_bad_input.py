"""Bad configuration and misbehaving task code: clear exits, recorded failures, no stalls."""

from __future__ import annotations

import json

from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually


def test_db_gen_rejects_invalid_identifiers():
    for args, named in ((["bad schema", "fila"], "schema"),
                        (["public", "fila; DROP TABLE x"], "fila"),
                        (["public", '"fi\"la"'], "fila"),
                        (["public", "fila\n"], "fila")):
        res = run_python(["-m", "nsj_queue_lib.db_gen", *args])
        assert res.returncode == 2, res
        assert res.stdout == ""
        assert named in res.stderr
        assert "identificador válido" in res.stderr


def test_worker_exits_2_when_queue_table_does_not_exist(pg_queue):
    w = pg_queue.start_worker(QUEUE_TABLE=f"{pg_queue.schema}.nao_existe")
    assert w.wait_exit(20) == 2
    log = w.log()
    assert (f"QUEUE_TABLE: a tabela '{pg_queue.schema}.nao_existe' não existe neste banco "
            f"(crie-a com o DDL de: python -m nsj_queue_lib.db_gen {pg_queue.schema} nao_existe)"
            ) in log
    # Not the hint about QUEUE_NAME (which only makes sense for an existing table).
    assert "QUEUE_NAME" not in log and "Traceback" not in log


def test_worker_on_a_table_without_queue_columns_says_so(pg_queue):
    pg_queue.sql(f'CREATE TABLE "{pg_queue.schema}".nao_fila (id int)')
    w = pg_queue.start_worker(QUEUE_TABLE=f"{pg_queue.schema}.nao_fila")
    assert w.wait_exit(20) == 2
    assert f"a tabela '{pg_queue.schema}.nao_fila' não tem as colunas de uma fila" in w.log()


def test_worker_exits_2_without_db_host(pg_queue, tmp_path):
    w = pg_queue.start_worker(drop_env=("DB_HOST", "DATABASE_HOST"), cwd=tmp_path)
    assert w.wait_exit(20) == 2
    assert "DB_HOST" in w.log()


def test_worker_exits_2_for_singlestore_without_client_server_mode(pg_queue):
    w = pg_queue.start_worker(DB_DRIVER="SINGLE_STORE", CLIENT_SERVER_MODE="false")
    assert w.wait_exit(20) == 2
    assert "CLIENT_SERVER_MODE" in w.log()


def test_worker_exits_2_for_invalid_int_setting(pg_queue):
    w = pg_queue.start_worker(QUEUE_MAX_RETRY="muitas")
    assert w.wait_exit(20) == 2
    log = w.log()
    assert "QUEUE_MAX_RETRY='muitas' inválida: use um número inteiro maior que zero" in log
    assert "invalid literal" not in log and "Traceback" not in log


def test_non_json_payload_is_a_recorded_failure_and_worker_goes_on(pg_queue):
    bad = pg_queue.insert("isto não é json", prioridade=90)
    good = pg_queue.insert({"efeito": "next"})
    w = pg_queue.start_worker()
    pg_queue.wait_status(good, "sucesso")
    row = pg_queue.row(bad)
    assert row["status"] == "falha"
    assert "JSONDecodeError" in row["mensagem"]
    assert pg_queue.count(f"id_anterior = {bad}") == 1  # retried like any failure
    assert w.proc.poll() is None
    assert [e["tarefa_id"] for e in pg_queue.effects()] == [good]


def test_non_string_return_value_is_stored_as_text(pg_queue):
    task_id = pg_queue.insert({"return": 123})
    pg_queue.start_worker()
    row = pg_queue.wait_status(task_id, "sucesso")
    assert row["mensagem"] == "123"


def test_none_return_value_gets_default_message(pg_queue):
    task_id = pg_queue.insert({"return": None})
    pg_queue.start_worker()
    row = pg_queue.wait_status(task_id, "sucesso")
    assert row["mensagem"] == "Concluído com sucesso"


def test_system_exit_in_task_is_a_failure_and_worker_survives(pg_queue):
    bad = pg_queue.insert({"system_exit": True, "efeito": "nao"}, prioridade=90)
    good = pg_queue.insert({"efeito": "sim"})
    w = pg_queue.start_worker(QUEUE_MAX_RETRY="1")
    pg_queue.wait_status(good, "sucesso")
    row = pg_queue.row(bad)
    assert row["status"] == "falha"
    assert "SystemExit" in row["mensagem"]
    assert w.proc.poll() is None
    # The interrupted attempt's write rolled back (its dead letter's handler wrote 'dead').
    assert [e["chave"] for e in pg_queue.effects("tipo = 'execute'")] == ["sim"]
    later = pg_queue.insert({"efeito": "depois"})
    pg_queue.wait_status(later, "sucesso")
    assert w.proc.poll() is None


def test_long_error_message_is_truncated_and_task_retried(pg_queue):
    task_id = pg_queue.insert({"long_message": 2000})
    pg_queue.start_worker(QUEUE_BASE_INTERVAL_RETRY="10")  # the retry stays scheduled
    nxt = eventually(lambda: pg_queue.rows(f"id_anterior = {task_id}"), message="retry row")[0]
    row = pg_queue.row(task_id)
    assert row["status"] == "falha"
    assert len(row["mensagem"]) == 500
    assert row["mensagem"].startswith("ValueError: xxxx")
    assert row["mensagem"].endswith("Tarefa reenfileirada.")
    assert nxt["status"] == "agendada"
    assert nxt["tentativa"] == 2
    assert nxt["mensagem_anterior"] == row["mensagem"]


def test_long_return_value_is_truncated_and_success_kept(pg_queue):
    task_id = pg_queue.insert({"return": "y" * 2000, "efeito": "longo"})
    pg_queue.start_worker()
    row = pg_queue.wait_status(task_id, "sucesso")
    assert len(row["mensagem"]) <= 500
    assert row["mensagem"].startswith("y" * 400)
    assert pg_queue.count() == 1
    assert [e["chave"] for e in pg_queue.effects()] == ["longo"]


def test_payload_reaches_worker_unchanged_when_not_json_object(pg_queue):
    # A JSON list is valid JSON but not an object: the scripted worker fails on .get(),
    # which must still be a recorded failure, not a crashed worker.
    task_id = pg_queue.insert(json.dumps([1, 2, 3]))
    w = pg_queue.start_worker(QUEUE_MAX_RETRY="1")
    row = pg_queue.wait_status(task_id, "falha")
    assert "AttributeError" in row["mensagem"]
    assert w.proc.poll() is None
