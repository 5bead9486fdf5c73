"""The PostgreSQL used by the tests (see nsj_queue_lib.devdb)."""

from __future__ import annotations

from nsj_queue_lib.devdb import DevPostgres as PgServer
from nsj_queue_lib.devdb import acquire

__all__ = ["PgServer", "acquire"]
