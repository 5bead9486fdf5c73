"""Fixtures of the compatibility suite (the real 1.2.2 itself: tests/fixtures/legacy.py)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.compat.mixed import Fleet

LOG_DIR = Path(os.environ.get("NSJQ_TEST_LOG_DIR", "/tmp/nsjq-test-logs"))


@pytest.fixture
def legacy_queue(pg_server, legacy):
    """A queue created by the real 1.2.2 db_gen, with an effects table."""
    s = f"m_{uuid.uuid4().hex[:10]}"
    fila = "fila_mista"
    conn = pg_server.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {s}")
        cur.execute(legacy.db_gen(s, fila))
        cur.execute(f"CREATE TABLE {s}.efeitos (id bigserial PRIMARY KEY, chave text, "
                    "tipo text, pid int)")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(legacy, pg_server.env(), s, fila, LOG_DIR)
    yield conn, fleet
    fleet.stop()
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
    conn.close()
