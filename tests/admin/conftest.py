"""Fixtures of the operator's operations tests (QueueAdmin, pause, nsj-queue)."""

from __future__ import annotations

from tests.client_server.conftest import (  # noqa: F401 (fixtures)
    cs_mysql_server,
    csq,
    pytest_collection_modifyitems,
)
from tests.mysql.conftest import myqueue, mysql_server  # noqa: F401 (fixtures)
