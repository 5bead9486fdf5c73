"""MariaDB: wrong password or unknown database at start is a configuration error (exit 2,
one line), for the worker and for the queue server; a missing table is said plainly.
Real worker and server processes (client/server mode)."""

from __future__ import annotations

import pytest

from tests.core.test_db_refused import assert_config_exit
from tests.fixtures.queue import TOKEN
from tests.fixtures.servers import QueueServerProc


@pytest.mark.parametrize("env,expected", [
    ({"DB_PASS": "senha-errada"}, ("senha recusados", "DB_PASS", "[MySQL 1045]")),
    ({"DB_BASE": "base_inexistente"}, ("a base 'base_inexistente' não existe", "[MySQL 1049]")),
], ids=["password", "database"])
def test_mariadb_refusal_at_start_exits_2_with_one_line(mariadb_socket_queue, env, expected):
    line = assert_config_exit(mariadb_socket_queue.start_worker(**env), "recusou a conexão",
                              *expected)
    assert "senha-errada" not in line


def test_queue_server_with_a_refused_password_exits_2_with_one_line(mariadb_socket_queue):
    q = mariadb_socket_queue
    server = QueueServerProc(q.env(DB_PASS="senha-errada"),
                             q.log_dir / "server-refused.log", q.notify_port,
                             q.lock_port, TOKEN)
    line = assert_config_exit(server, "recusou a conexão", "DB_PASS", "[MySQL 1045]")
    assert "senha-errada" not in line


def test_worker_on_a_missing_mariadb_table_exits_2_saying_so(mariadb_socket_queue):
    q = mariadb_socket_queue
    q.start_server()
    worker = q.start_worker(QUEUE_TABLE=f"{q.schema}.nao_existe")
    assert_config_exit(worker, f"a tabela '{q.schema}.nao_existe' não existe neste banco",
                       f"db_gen {q.schema} nao_existe --mysql")
