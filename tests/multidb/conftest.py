"""Fixtures of the multi-database tests.

`fake_api` is a real HTTP server (threading `http.server` on 127.0.0.1, random
port) that plays both the Keycloak token endpoint (`/token`) and the Nasajon
credentials endpoint (`/credentials`).  It counts calls, and its expiries,
failures and answers are configurable per test.

`local_pg` / `tenant_dbs` use the suite's real PostgreSQL (DB_* variables, by
default 127.0.0.1:5432, user postgres, trust auth).  When PostgreSQL is
unreachable the tests are skipped, except when the `CI` environment variable is
set: then they fail.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Optional, Union
from urllib.parse import parse_qs

import psycopg2
import pytest

from nsj_queue_lib.cli import devdb
from nsj_queue_lib.config import Settings

logger = logging.getLogger(__name__)

OAUTH_USER = "conta@nasajon.example"
OAUTH_PASSWORD = "Oauth-Secret-Pw-8842"
CLIENT_ID = "queue-worker"
TENANT_PASSWORD = "Tenant-Db-Secret-5531"

# The PostgreSQL of the whole suite: the DB_* variables (as .ci/run exports them; see
# nsj_queue_lib.cli.devdb), by default 127.0.0.1:5432, user postgres.  Tenant databases are
# made there, and the tenants' credentials name it (trust authentication).
_PG = devdb.configured() or devdb.DevPostgres("127.0.0.1", 5432, "postgres", "", "postgres")
PG_HOST = _PG.host
PG_PORT = _PG.port
PG_USER = _PG.user
PG_PASS = _PG.password or None
PG_DB = _PG.dbname


def pg_connect(dbname: str, **kwargs: Any) -> Any:
    """A psycopg2 connection to `dbname` on the suite's PostgreSQL."""
    return psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, password=PG_PASS,
                            dbname=dbname, **kwargs)

Answer = Union[dict, int]


@dataclass
class ApiState:
    """Behaviour and counters of the fake API; tests change it freely."""

    # Token endpoint
    expires_in: Any = 300
    refresh_expires_in: Any = 1800
    omit_refresh_expires_in: bool = False
    token_status: Optional[int] = None  # force this status on /token
    refuse_refresh: bool = False  # answer 400 invalid_grant to refresh grants
    # Credentials endpoint
    credentials_status: Optional[int] = None  # force this status on /credentials
    reject_all_tokens: bool = False  # 401 on /credentials whatever the token
    raw_credentials_body: Optional[bytes] = None  # answer these bytes (200)
    # tenant (as str) -> list of answers (dict = 200 JSON, int = status); the
    # last one is repeated forever.
    tenants: dict[str, list[Answer]] = field(default_factory=dict)
    delay: float = 0.0
    # Counters and records
    password_grants: int = 0
    refresh_grants: int = 0
    credentials_calls: int = 0
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    credentials_requests: list[dict[str, Any]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # query string of each request
    issued: int = 0
    valid_access: set[str] = field(default_factory=set)
    valid_refresh: set[str] = field(default_factory=set)

    @property
    def token_calls(self) -> int:
        return self.password_grants + self.refresh_grants

    def revoke_access_tokens(self) -> None:
        self.valid_access.clear()


class FakeApi:
    """Real HTTP server on 127.0.0.1 playing the token and credentials endpoints."""

    def __init__(self) -> None:
        self.state = ApiState()
        self.lock = threading.Lock()
        self.port = 0
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return self.base_url + "/token"

    @property
    def credentials_url(self) -> str:
        return self.base_url + "/credentials"

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"api": self})
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,),
                                        daemon=True, name="fake-api")
        self._thread.start()

    def stop(self) -> None:
        """Stop listening: the port is closed until `start()` again (same port)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def set_tenant(self, tenant: Any, *answers: Answer) -> None:
        with self.lock:
            self.state.tenants[str(tenant)] = list(answers)


def pg_credentials(db_name: str, **overrides: Any) -> dict[str, Any]:
    """A credentials API answer pointing at the local PostgreSQL."""
    body: dict[str, Any] = {"hostname": PG_HOST, "port": PG_PORT, "db_name": db_name,
                            "user": PG_USER, "password": TENANT_PASSWORD}
    body.update(overrides)
    return body


class _Handler(BaseHTTPRequestHandler):
    api: FakeApi
    # HTTP/1.0: one connection per request, so that `stop()` really makes the
    # endpoint unreachable (no keep-alive connection survives it).
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Union[dict, bytes, None]) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        state = self.api.state
        if state.delay:
            time.sleep(state.delay)
        path, _, query = self.path.partition("?")
        with self.api.lock:
            self.api.state.queries.append(query)
        if path == "/token":
            self._token(raw)
        elif path == "/credentials":
            self._credentials(raw)
        else:
            self._send(404, {"error": "not_found"})

    def _token(self, raw: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        api = self.api
        with api.lock:
            st = api.state
            st.token_requests.append({"form": form, "headers": dict(self.headers),
                                      "at": time.monotonic()})
            grant = form.get("grant_type")
            if grant == "password":
                st.password_grants += 1
            elif grant == "refresh_token":
                st.refresh_grants += 1
            if st.token_status is not None:
                self._send(st.token_status, {"error": "server_error"})
                return
            if form.get("client_id") != CLIENT_ID or form.get("scope") != "offline_access":
                self._send(400, {"error": "invalid_client"})
                return
            if grant == "password":
                if form.get("username") != OAUTH_USER or form.get("password") != OAUTH_PASSWORD:
                    self._send(401, {"error": "invalid_grant",
                                     "error_description": "Invalid user credentials"})
                    return
            elif grant == "refresh_token":
                if st.refuse_refresh or form.get("refresh_token") not in st.valid_refresh:
                    self._send(400, {"error": "invalid_grant"})
                    return
            else:
                self._send(400, {"error": "unsupported_grant_type"})
                return
            st.issued += 1
            access, refresh = f"access-token-{st.issued}", f"refresh-token-{st.issued}"
            st.valid_access.add(access)
            st.valid_refresh.add(refresh)
            body: dict[str, Any] = {"access_token": access, "expires_in": st.expires_in,
                                    "refresh_token": refresh, "token_type": "Bearer"}
            if not st.omit_refresh_expires_in:
                body["refresh_expires_in"] = st.refresh_expires_in
        self._send(200, body)

    def _credentials(self, raw: bytes) -> None:
        api = self.api
        with api.lock:
            st = api.state
            st.credentials_calls += 1
            try:
                payload = json.loads(raw.decode())
            except ValueError:
                payload = None
            st.credentials_requests.append({"json": payload, "headers": dict(self.headers)})
            if st.credentials_status is not None:
                self._send(st.credentials_status, {"error": "boom"})
                return
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
            if st.reject_all_tokens or token not in st.valid_access:
                self._send(401, {"error": "invalid_token"})
                return
            if st.raw_credentials_body is not None:
                self._send(200, st.raw_credentials_body)
                return
            tenant = payload.get("tenant") if isinstance(payload, dict) else None
            answers = st.tenants.get(str(tenant))
            if not answers:
                self._send(404, {"error": "tenant not found"})
                return
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, int):
            self._send(answer, {"error": "configured failure"})
        else:
            self._send(200, answer)


class FakeClock:
    """Monotonic clock moved by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi()
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def settings(fake_api: FakeApi) -> Settings:
    env = {
        "MULTI_DATABASE": "true",
        "MULTI_DATABASE_USER": OAUTH_USER,
        "MULTI_DATABASE_PASSWORD": OAUTH_PASSWORD,
        "MULTI_DATABASE_CLIENT_ID": CLIENT_ID,
        "MULTI_DATABASE_API_CREDETIALS_URL": fake_api.credentials_url,
        "OAUTH_TOKEN_URL": fake_api.token_url,
    }
    return Settings.from_env(env, load_dotenv=False, require=())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _admin_connect() -> Any:
    conn = pg_connect(PG_DB,
                            connect_timeout=3)
    conn.autocommit = True
    return conn


@pytest.fixture(scope="session")
def local_pg() -> Iterator[None]:
    """Fail (under CI) or skip when the local PostgreSQL is unreachable."""
    try:
        conn = _admin_connect()
    except psycopg2.OperationalError as exc:
        message = f"PostgreSQL em {PG_HOST}:{PG_PORT} inacessível: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    conn.close()
    yield None


@pytest.fixture
def pg_admin(local_pg: None) -> Iterator[Any]:
    conn = _admin_connect()
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope="session")
def _tenant_db_names(local_pg: None) -> Iterator[dict[int, str]]:
    """Two temporary databases, for tenants 101 and 202, dropped at the end of the session."""
    suffix = uuid.uuid4().hex[:10]
    names = {101: f"nsjq_mdb_{suffix}_a", 202: f"nsjq_mdb_{suffix}_b"}
    admin = _admin_connect()
    try:
        with admin.cursor() as cur:
            for name in names.values():
                cur.execute(f'CREATE DATABASE "{name}"')
        for name in names.values():
            conn = pg_connect(name)
            with conn, conn.cursor() as cur:
                cur.execute("CREATE TABLE item (id serial PRIMARY KEY, txt text NOT NULL)")
            conn.close()
        yield names
    finally:
        with admin.cursor() as cur:
            for name in names.values():
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def tenant_dbs(_tenant_db_names: dict[int, str]) -> dict[int, str]:
    """The tenant databases (tenant -> database name), with an empty `item` table."""
    for name in _tenant_db_names.values():
        conn = pg_connect(name)
        with conn, conn.cursor() as cur:
            cur.execute("TRUNCATE item RESTART IDENTITY")
        conn.close()
    return _tenant_db_names


# -- end-to-end helpers (worker subprocesses: test_multidb_worker.py) ---------------


def multidb_env(api: FakeApi, **overrides: Any) -> dict[str, str]:
    """Environment of a worker in multi-database mode, pointed at the fake API.

    Both URLs are always set, so a test never reaches the production endpoints.
    """
    env = {
        "MULTI_DATABASE": "true",
        "MULTI_DATABASE_USER": OAUTH_USER,
        "MULTI_DATABASE_PASSWORD": OAUTH_PASSWORD,
        "MULTI_DATABASE_CLIENT_ID": CLIENT_ID,
        "MULTI_DATABASE_API_CREDETIALS_URL": api.credentials_url,
        "OAUTH_TOKEN_URL": api.token_url,
    }
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def tenant_sql(db_name: str, sql: str, params: Any = None) -> list[tuple]:
    """Run `sql` (autocommit) on a tenant database; the rows, if any."""
    conn = pg_connect(db_name,
                            connect_timeout=3)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []
    finally:
        conn.close()


def tenant_items(db_name: str) -> list[str]:
    """The `txt` of the rows of the tenant database's `item` table, in insertion order."""
    return [r[0] for r in tenant_sql(db_name, "SELECT txt FROM item ORDER BY id")]


@pytest.fixture
def tenants(fake_api: FakeApi, tenant_dbs: dict[int, str]) -> dict[int, str]:
    """Tenants 101 and 202 known to the fake credentials API, each with its own database."""
    for tenant, db_name in tenant_dbs.items():
        fake_api.set_tenant(tenant, pg_credentials(db_name))
    return tenant_dbs
