"""QUEUE_SUBSCRIBER_TABLE: pub/sub and webhook workers default it to `<fila>_subscriber`
next to QUEUE_TABLE (the table `nsj-queue schema apply` creates) and check at start that
it exists: a missing table ends the worker with exit code 2 and one clear line, instead
of failing each publication at run time.  Real worker processes, real databases."""

from __future__ import annotations

import json

import pytest

from nsj_queue_lib.config import Settings, default_subscriber_table
from nsj_queue_lib.db.names import object_name
from nsj_queue_lib.worker_pub_sub_base import with_subscriber_table
from tests.fixtures.processes import assert_config_exit, wait_ready
from tests.fixtures.waiting import eventually

ENV = {"DB_HOST": "h", "DB_PORT": "5432", "DB_BASE": "b", "DB_USER": "u", "QUEUE_NAME": "f"}


def settings(**env: str) -> Settings:
    return Settings.from_env({**ENV, **env}, load_dotenv=False)


def test_the_default_is_the_table_schema_apply_creates():
    assert default_subscriber_table("public.fila") == "public.fila_subscriber"
    assert default_subscriber_table("fila") == "fila_subscriber"
    long = "f" * 60  # cut with a hash suffix, exactly as the DDL names it
    assert default_subscriber_table(f"s.{long}") == f"s.{object_name(long, 'subscriber')}"
    # resolved names: unquoted parts fold to lower case, quoted ones keep their case
    assert with_subscriber_table(settings(QUEUE_TABLE="Esq.Fila")).queue_subscriber_table \
        == "esq.fila_subscriber"
    assert with_subscriber_table(settings(QUEUE_TABLE='"Esq"."Fila"')).queue_subscriber_table \
        == "Esq.Fila_subscriber"
    explicit = settings(QUEUE_TABLE="public.fila", QUEUE_SUBSCRIBER_TABLE="outra.assinaturas")
    assert with_subscriber_table(explicit).queue_subscriber_table == "outra.assinaturas"



def test_pubsub_worker_without_the_variable_uses_fila_subscriber_and_delivers(each_db_queue):
    each_db_queue.add_subscriber("a")
    each_db_queue.add_subscriber("b")
    worker = each_db_queue.start_worker("tests.workers.pubsub_scripted",
                                        drop_env=["QUEUE_SUBSCRIBER_TABLE"])
    wait_ready(worker)
    pub_id = each_db_queue.publish(json.dumps({"x": 1}))
    eventually(lambda: sorted(e["chave"] for e in each_db_queue.effects()) == ["a", "b"], 30,
               message=f"assinantes a e b executados\n{worker.log()}")
    assert each_db_queue.row(pub_id)["status"] == "sucesso"
    log = worker.log()
    assert "QUEUE_SUBSCRIBER_TABLE não definida: usando a tabela de assinaturas" in log
    assert f"{each_db_queue.fila}_subscriber" in log
    assert " ERROR " not in log and "Traceback" not in log


def test_webhook_worker_without_the_variable_delivers(pg_queue, http_endpoint):
    http_endpoint.script("/hook", statuses=(200,))
    pg_queue.add_subscriber("hook", url=f"{http_endpoint.url}/hook", method="POST")
    worker = pg_queue.start_worker("nsj_queue_lib.worker_webhook",
                                   drop_env=["QUEUE_SUBSCRIBER_TABLE"])
    wait_ready(worker)
    pg_queue.publish(json.dumps({"pedido": 7}))
    got = eventually(lambda: http_endpoint.received("/hook"), 30,
                     message=f"webhook chamado\n{worker.log()}")
    assert json.loads(got[0].body) == {"pedido": 7}


@pytest.mark.parametrize("module", ["tests.workers.pubsub_scripted",
                                    "nsj_queue_lib.worker_webhook"])
def test_missing_default_subscriber_table_exits_2_with_the_command(pg_queue, module):
    pg_queue.sql(f"DROP TABLE {pg_queue.qsub_table}")
    worker = pg_queue.start_worker(module, drop_env=["QUEUE_SUBSCRIBER_TABLE"])
    line = assert_config_exit(worker, "QUEUE_SUBSCRIBER_TABLE", f"{pg_queue.fila}_subscriber",
                         "não existe", "QUEUE_SUBSCRIBER_TABLE não definida",
                         f"nsj-queue schema apply {pg_queue.schema} {pg_queue.fila}")
    assert "<fila>_subscriber" in line


def test_missing_configured_subscriber_table_exits_2(mariadb_queue):
    worker = mariadb_queue.start_worker("tests.workers.pubsub_scripted",
                                        QUEUE_SUBSCRIBER_TABLE=f"{mariadb_queue.schema}.nao_existe")
    line = assert_config_exit(worker, "QUEUE_SUBSCRIBER_TABLE", "nao_existe", "não existe",
                         "--mysql")
    assert "não definida" not in line


def test_subscriber_table_without_its_columns_exits_2(pg_queue):
    pg_queue.sql(f"CREATE TABLE {pg_queue.quote(pg_queue.schema)}.assinaturas (id text)")
    worker = pg_queue.start_worker("tests.workers.pubsub_scripted",
                                   QUEUE_SUBSCRIBER_TABLE=f"{pg_queue.schema}.assinaturas")
    assert_config_exit(worker, "QUEUE_SUBSCRIBER_TABLE", "assinaturas",
                  "não tem as colunas de uma tabela de assinaturas", "nsj-queue schema print")


def test_plain_worker_is_not_checked(pg_queue):
    """Only pub/sub workers read the subscriber table: a plain worker starts without it."""
    pg_queue.sql(f"DROP TABLE {pg_queue.qsub_table}")
    worker = pg_queue.start_worker(drop_env=["QUEUE_SUBSCRIBER_TABLE"])
    wait_ready(worker)
    task_id = pg_queue.insert({"efeito": "x"})
    pg_queue.wait_status(task_id, "sucesso", 30)
