"""The MariaDB/MySQL used by the tests, and a fresh database (with one queue) per test.

The server comes from NSJQ_TEST_MYSQL_HOST / _PORT / _USER / _PASS (default
127.0.0.1:3306, root, empty password).  When it does not answer, the tests are
skipped on a developer machine and FAIL when the `CI` variable is set, so a
misconfigured CI cannot go green having tested nothing.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import pymysql

from nsj_queue_lib.db.dialect import MYSQL
from nsj_queue_lib.db.schema import render_schema

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class MySqlServer:
    host: str
    port: int
    user: str
    password: str

    @classmethod
    def from_env(cls) -> MySqlServer:
        return cls(
            host=os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
            port=int(os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306")),
            user=os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
            password=os.environ.get("NSJQ_TEST_MYSQL_PASS", ""),
        )

    def connect(self, database: Optional[str] = None, autocommit: bool = True) -> Any:
        """A pymysql connection in UTC, as the library opens them."""
        return pymysql.connect(host=self.host, port=self.port, user=self.user,
                               password=self.password, database=database, autocommit=autocommit,
                               charset="utf8mb4", connect_timeout=5,
                               init_command="SET time_zone = '+00:00'")

    def connect_connector(self, database: str, autocommit: bool = False) -> Any:
        """A mysql-connector-python connection (a producer's own driver)."""
        import mysql.connector

        return mysql.connector.connect(host=self.host, port=self.port, user=self.user,
                                       password=self.password, database=database,
                                       autocommit=autocommit, connection_timeout=5)

    def env(self, database: str) -> Dict[str, str]:
        return {"DB_HOST": self.host, "DB_PORT": str(self.port), "DB_BASE": database,
                "DB_USER": self.user, "DB_PASS": self.password, "DB_DRIVER": "MYSQL"}

    def reachable(self) -> Optional[str]:
        """None when the server answers, else the reason."""
        try:
            self.connect().close()
        except pymysql.err.MySQLError as exc:
            return f"MariaDB/MySQL em {self.host}:{self.port} não responde: {exc}"
        return None


CURRENT_TEST: Any = None  # the test being set up (tests/conftest.py keeps it here)


def require_mysql() -> MySqlServer:
    """The test MariaDB/MySQL; skips the test when it does not answer, but fails it when
    CI is set (a misconfigured CI must not go green having tested nothing).  A test
    that reaches it without the `mysql` marker fails: `-m "not mysql"` must really
    leave MariaDB out."""
    import pytest

    item = CURRENT_TEST
    if item is not None and item.get_closest_marker("mysql") is None:
        pytest.fail(f"{item.nodeid} usa o MariaDB sem o marcador mysql "
                    "(@pytest.mark.mysql ou um fixture de tests/conftest.py MYSQL_FIXTURES)")

    server = MySqlServer.from_env()
    problem = server.reachable()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI definido: os testes de MySQL não podem ser pulados)")
        pytest.skip(problem)
    return server


def split_statements(ddl: str) -> List[str]:
    """Statements of a DDL script (';' at end of line; '--' comment lines dropped)."""
    lines = [ln for ln in ddl.splitlines() if not ln.lstrip().startswith("--")]
    parts = re.split(r";\s*$", "\n".join(lines), flags=re.MULTILINE)
    return [p.strip() for p in parts if p.strip()]


class MyQueue:
    """A fresh database with a queue made by db_gen --mysql (dropped by `destroy`)."""

    def __init__(self, server: MySqlServer, database: str, fila: str) -> None:
        self.server = server
        self.database = database
        self.fila = fila
        self.table = f"{database}.{fila}"
        self.sub_table = f"{database}.{fila}_subscriber"
        self.conn = server.connect(database=None)

    @classmethod
    def create(cls, server: MySqlServer) -> MyQueue:
        q = cls(server, f"nsjq_{uuid.uuid4().hex[:12]}", f"fila_{uuid.uuid4().hex[:6]}")
        for stmt in split_statements(render_schema(MYSQL, q.database, q.fila)):
            q.sql(stmt)
        q.sql(f"CREATE TABLE `{q.database}`.efeitos (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
              "tarefa_id BIGINT, chave VARCHAR(100))")
        return q

    def destroy(self) -> None:
        try:
            self.sql(f"DROP DATABASE IF EXISTS `{self.database}`")
        finally:
            self.conn.close()

    def sql(self, text: str, params: Any = None) -> List[dict]:
        with self.conn.cursor() as cur:
            cur.execute(text, params)
            if cur.description is None:
                return []
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def rows(self, where: str = "TRUE", params: Any = None) -> List[dict]:
        return self.sql(f"SELECT * FROM `{self.database}`.`{self.fila}` WHERE {where} "
                        "ORDER BY id", params)

    def row(self, task_id: int) -> dict:
        return self.rows("id = %s", (task_id,))[0]

    def count(self, where: str = "TRUE") -> int:
        return int(self.sql(f"SELECT count(*) AS n FROM `{self.database}`.`{self.fila}` "
                            f"WHERE {where}")[0]["n"])

    def effects(self) -> List[dict]:
        return self.sql(f"SELECT * FROM `{self.database}`.efeitos ORDER BY id")
