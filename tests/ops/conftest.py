"""Fixtures of the operations tests (views, status, health, Loki, packaging)."""

from __future__ import annotations

from tests.client_server.conftest import cs_mysql_server, mariadb_csq  # noqa: F401
from tests.mysql.conftest import myqueue, mysql_server  # noqa: F401 (fixtures)
