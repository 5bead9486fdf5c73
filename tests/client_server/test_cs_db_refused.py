"""MariaDB: wrong password or unknown database at start is a configuration error (exit 2,
one line); the worker process is real (client/server mode)."""

from __future__ import annotations

import pytest

from tests.core.test_db_refused import assert_config_exit


@pytest.mark.parametrize("env,expected", [
    ({"DB_PASS": "senha-errada"}, ("senha recusados", "DB_PASS", "[MySQL 1045]")),
    ({"DB_BASE": "base_inexistente"}, ("a base 'base_inexistente' não existe", "[MySQL 1049]")),
], ids=["password", "database"])
def test_mariadb_refusal_at_start_exits_2_with_one_line(mariadb_csq, env, expected):
    line = assert_config_exit(mariadb_csq.start_worker(**env), "recusou a conexão", *expected)
    assert "senha-errada" not in line
