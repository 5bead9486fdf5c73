"""Database credentials of each tenant, from the Nasajon credentials API.

Caching choice: the answer for a tenant is kept for `ttl_seconds` (default 300 s).
ERP database credentials change rarely (a migration, a password rotation), so a
few minutes of staleness costs nothing, while calling the API for every task
(as version 1.2.2 did) makes each task depend on the API and adds its latency.
Staleness is also bounded by the connection pool, which calls
`invalidate(tenant)` / `get(tenant, force_refresh=True)` when a connection
with the cached credentials fails.  `ttl_seconds=0` disables the cache.

Fetches of different tenants run in parallel; concurrent fetches of the same
tenant are collapsed into one HTTP call.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import requests

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.multidb.errors import MultiDatabaseError, scrub, short
from nsj_queue_lib.multidb.token import TokenProvider

logger = logging.getLogger(__name__)

Tenant = Union[int, str]

_REQUIRED_TEXT = ("hostname", "db_name", "user")


@dataclass(frozen=True)
class DbCredentials:
    """Connection data of one tenant's database; `repr()` hides the password."""

    hostname: str
    port: int
    db_name: str
    user: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return (f"DbCredentials(hostname={self.hostname!r}, port={self.port!r}, "
                f"db_name={self.db_name!r}, user={self.user!r}, password='***')")

    __str__ = __repr__


@dataclass
class _Cached:
    credentials: DbCredentials
    expires_at: float


class CredentialsClient:
    """Fetches and caches (per tenant, with a TTL) the tenant database credentials.

    Thread safe.  Errors are raised as MultiDatabaseError naming the tenant and
    the HTTP status code; the password is never part of a message or a log.
    """

    def __init__(self, settings: Settings, token_provider: TokenProvider,
                 ttl_seconds: float = 300, http_timeout: float = 10.0, *,
                 session: Optional[requests.Session] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not settings.multi_database_api_credentials_url:
            raise ConfigError(
                "Modo multi-banco: MULTI_DATABASE_API_CREDENTIALS_URL não definida.")
        if http_timeout <= 0:
            raise ValueError("http_timeout must be positive")
        if ttl_seconds < 0:
            raise ValueError("ttl_seconds must not be negative")
        self._url = settings.multi_database_api_credentials_url
        self._tokens = token_provider
        self._ttl = float(ttl_seconds)
        self._timeout = http_timeout
        self._session = session if session is not None else requests.Session()
        self._clock = clock
        self._lock = threading.Lock()  # guards _cache and _tenant_locks
        self._cache: dict[Tenant, _Cached] = {}
        self._tenant_locks: dict[Tenant, threading.Lock] = {}

    # -- public API -----------------------------------------------------

    def get(self, tenant: Tenant, *, force_refresh: bool = False) -> DbCredentials:
        """Credentials of `tenant`, from the cache or from the API.

        `force_refresh=True` skips (and replaces) the cached entry.
        Raises MultiDatabaseError when the API is down or its answer unusable.
        """
        if tenant is None or isinstance(tenant, bool) or tenant == "":
            raise MultiDatabaseError(
                "Tarefa sem tenant: impossível obter as credenciais do banco no modo "
                "multi-banco.", tenant=tenant)
        if not force_refresh:
            hit = self._cached(tenant)
            if hit is not None:
                return hit
        with self._lock:
            tenant_lock = self._tenant_locks.setdefault(tenant, threading.Lock())
            seen = self._cache.get(tenant)
        with tenant_lock:
            # Another thread may have fetched it while we waited for the lock
            # (with force_refresh, only an entry newer than the one we saw counts).
            with self._lock:
                entry = self._cache.get(tenant)
                if (entry is not None and self._clock() < entry.expires_at
                        and (not force_refresh or entry is not seen)):
                    return entry.credentials
            credentials = self._fetch(tenant)
            if self._ttl > 0:
                with self._lock:
                    self._cache[tenant] = _Cached(credentials, self._clock() + self._ttl)
            return credentials

    def invalidate(self, tenant: Tenant) -> None:
        """Drop the cached credentials of `tenant` (the next `get` calls the API)."""
        with self._lock:
            self._cache.pop(tenant, None)

    def clear(self) -> None:
        """Drop every cached entry."""
        with self._lock:
            self._cache.clear()

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    # -- internals ------------------------------------------------------

    def _cached(self, tenant: Tenant) -> Optional[DbCredentials]:
        with self._lock:
            entry = self._cache.get(tenant)
            if entry is None:
                return None
            if self._clock() >= entry.expires_at:
                del self._cache[tenant]
                return None
            return entry.credentials

    def _fetch(self, tenant: Tenant) -> DbCredentials:
        logger.debug("Buscando credenciais do banco do tenant %s.", tenant)
        token = self._token(tenant, renew=False)
        resp = self._post(tenant, token)
        if resp.status_code == 401:
            logger.info("API de credenciais respondeu 401 para o tenant %s; "
                        "renovando o token e tentando de novo.", tenant)
            token = self._token(tenant, renew=True)
            resp = self._post(tenant, token)
        if resp.status_code != 200:
            raise MultiDatabaseError(
                f"API de credenciais respondeu HTTP {resp.status_code} para o tenant {tenant}",
                status_code=resp.status_code, tenant=tenant)
        credentials = self._parse(tenant, resp)
        logger.info("Credenciais do tenant %s obtidas: %s:%s/%s (usuário %s).", tenant,
                    credentials.hostname, credentials.port, credentials.db_name,
                    credentials.user)
        return credentials

    def _token(self, tenant: Tenant, *, renew: bool) -> str:
        if renew:
            self._tokens.invalidate()
        try:
            return self._tokens.get_token()
        except MultiDatabaseError as exc:
            raise MultiDatabaseError(f"{exc} (tenant {tenant})", status_code=exc.status_code,
                                     tenant=tenant) from None

    def _post(self, tenant: Tenant, token: str) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Accept": "application/json"}
        try:
            return self._session.post(self._url, json={"tenant": tenant}, headers=headers,
                                      timeout=self._timeout)
        except requests.RequestException as exc:
            reason = scrub(short(f"{type(exc).__name__}: {exc}"), [token])
            raise MultiDatabaseError(
                f"API de credenciais inacessível para o tenant {tenant} ({reason})",
                tenant=tenant) from None

    @staticmethod
    def _parse(tenant: Tenant, resp: requests.Response) -> DbCredentials:
        def unusable(why: str) -> MultiDatabaseError:
            return MultiDatabaseError(
                f"API de credenciais respondeu HTTP {resp.status_code} para o tenant {tenant} "
                f"com resposta inutilizável: {why}",
                status_code=resp.status_code, tenant=tenant)

        try:
            body: Any = resp.json()
        except ValueError:
            # The JSON error keeps the document; do not chain it.
            raise unusable("não é JSON") from None
        if not isinstance(body, dict):
            raise unusable("não é um objeto JSON")
        bad = [name for name in _REQUIRED_TEXT
               if not isinstance(body.get(name), str) or not body[name].strip()]
        password = body.get("password")
        if not isinstance(password, str):
            bad.append("password")
        port = _port(body.get("port"))
        if port is None:
            bad.append("port")
        if bad:
            raise unusable("campos ausentes ou inválidos: " + ", ".join(bad))
        assert port is not None and isinstance(password, str)
        return DbCredentials(hostname=body["hostname"].strip(), port=port,
                             db_name=body["db_name"], user=body["user"], password=password)


def _port(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and 0 < value < 65536:
        return value
    return None
