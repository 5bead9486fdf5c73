"""OAuth access token of the Nasajon account used to fetch tenant credentials.

The token endpoint is a Keycloak `openid-connect/token` route.  The provider
does a *password grant* the first time, caches the answer, and when the access
token expires uses the *refresh grant* while the refresh token is still valid.
When the refresh token is missing, expired or refused, it falls back to a new
password grant.  All of this happens under one lock, so any number of threads
may call `get_token()`; every HTTP call has a timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import requests

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.multidb.errors import MultiDatabaseError, scrub, short
from nsj_queue_lib.text import redact_url

logger = logging.getLogger(__name__)

SCOPE = "offline_access"

# Seconds subtracted from `expires_in` / `refresh_expires_in`, so that a token
# is never sent when it is about to expire on the server.
EXPIRY_MARGIN = 10.0

# Lifetime assumed when the server omits `expires_in` (or sends garbage).
# Short on purpose; a token refused earlier is handled by `invalidate()`.
DEFAULT_EXPIRES_IN = 60.0


@dataclass
class _TokenState:
    access_token: str
    access_expires_at: float
    refresh_token: Optional[str]
    # None: no local expiry known (Keycloak sends refresh_expires_in=0 for
    # offline tokens); the refresh token is used until the server refuses it.
    refresh_expires_at: Optional[float]


class TokenProvider:
    """Thread-safe cache of the OAuth access token (password and refresh grants).

    `settings` supplies `multi_database_user`, `multi_database_password`,
    `multi_database_client_id` and `oauth_token_url`.  `session` may be a
    `requests.Session` (one is created otherwise); `clock` is a monotonic
    clock in seconds, injectable for tests.
    """

    def __init__(self, settings: Settings, http_timeout: float = 10.0,
                 session: Optional[requests.Session] = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 expiry_margin: float = EXPIRY_MARGIN) -> None:
        missing = [name for name, value in (
            ("MULTI_DATABASE_USER", settings.multi_database_user),
            ("MULTI_DATABASE_PASSWORD", settings.multi_database_password),
            ("MULTI_DATABASE_CLIENT_ID", settings.multi_database_client_id),
            ("OAUTH_TOKEN_URL", settings.oauth_token_url),
        ) if not value]
        if missing:
            raise ConfigError(
                "Modo multi-banco: variável(is) não definida(s): " + ", ".join(missing))
        if http_timeout <= 0:
            raise ValueError("http_timeout must be positive")
        self._url: str = settings.oauth_token_url
        self._username: str = settings.multi_database_user  # type: ignore[assignment]
        self._password: str = settings.multi_database_password  # type: ignore[assignment]
        self._client_id: str = settings.multi_database_client_id  # type: ignore[assignment]
        self._timeout = http_timeout
        self._session = session if session is not None else requests.Session()
        self._clock = clock
        self._margin = expiry_margin
        self._lock = threading.Lock()
        self._state: Optional[_TokenState] = None

    # -- public API -----------------------------------------------------

    def get_token(self) -> str:
        """Return a valid access token, calling the token endpoint only when needed.

        Raises MultiDatabaseError when no token can be obtained.
        """
        with self._lock:
            state = self._state
            now = self._clock()
            if state is not None and now < state.access_expires_at:
                return state.access_token
            if state is not None and self._refresh_usable(state, now):
                try:
                    return self._grant_locked(refresh_token=state.refresh_token)
                except MultiDatabaseError as exc:
                    if exc.status_code is None:
                        # Server unreachable: a password grant would fail the
                        # same way; keep the refresh token for the next call.
                        raise
                    logger.warning(
                        "Refresh do token OAuth recusado (%s); tentando o password grant.", exc)
                    self._state = None
            return self._grant_locked(refresh_token=None)

    def invalidate(self) -> None:
        """Forget the access token (e.g. after a 401); the refresh token is kept."""
        with self._lock:
            if self._state is not None:
                self._state.access_expires_at = float("-inf")

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    # -- internals ------------------------------------------------------

    @staticmethod
    def _refresh_usable(state: _TokenState, now: float) -> bool:
        if not state.refresh_token:
            return False
        return state.refresh_expires_at is None or now < state.refresh_expires_at

    def _secrets(self) -> list[Optional[str]]:
        out: list[Optional[str]] = [self._password]
        if self._state is not None:
            out += [self._state.access_token, self._state.refresh_token]
        return out

    def _grant_locked(self, refresh_token: Optional[str]) -> str:
        """POST one grant (refresh when `refresh_token` is given); store and return the token."""
        if refresh_token:
            grant = "refresh_token"
            form = {"refresh_token": refresh_token, "client_id": self._client_id,
                    "scope": SCOPE, "grant_type": "refresh_token"}
        else:
            grant = "password"
            form = {"username": self._username, "password": self._password,
                    "client_id": self._client_id, "scope": SCOPE, "grant_type": "password"}
        logger.debug("Pedindo token OAuth (grant=%s) em %s.", grant, redact_url(self._url))
        started = self._clock()
        try:
            resp = self._session.post(self._url, data=form,
                                      headers={"Accept": "application/json"},
                                      timeout=self._timeout)
        except requests.RequestException as exc:
            reason = scrub(short(f"{type(exc).__name__}: {exc}"), self._secrets())
            raise MultiDatabaseError(
                f"Falha ao obter token OAuth (grant={grant}): servidor inacessível ({reason})"
            ) from None
        if resp.status_code != 200:
            raise MultiDatabaseError(
                f"Falha ao obter token OAuth (grant={grant}): HTTP {resp.status_code}"
                f"{self._oauth_error(resp)}",
                status_code=resp.status_code)
        try:
            body = resp.json()
        except ValueError:
            body = None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise MultiDatabaseError(
                f"Falha ao obter token OAuth (grant={grant}): HTTP {resp.status_code} "
                "sem access_token na resposta",
                status_code=resp.status_code)
        assert isinstance(body, dict)
        expires_in = _seconds(body.get("expires_in"))
        if expires_in is None:
            logger.warning("Resposta do token OAuth sem expires_in válido; assumindo %.0f s.",
                           DEFAULT_EXPIRES_IN)
            expires_in = DEFAULT_EXPIRES_IN
        new_refresh = body.get("refresh_token")
        if not isinstance(new_refresh, str) or not new_refresh:
            new_refresh = None
        refresh_in = _seconds(body.get("refresh_expires_in"))
        refresh_usable = new_refresh is not None and refresh_in is not None
        if new_refresh is not None and refresh_in is None:
            logger.info("Resposta do token OAuth sem refresh_expires_in; o refresh token não "
                        "será usado (novo password grant quando o access token expirar).")
        refresh_at: Optional[float] = None
        if refresh_usable and refresh_in:  # refresh_expires_in == 0 means "no expiry"
            refresh_at = started + refresh_in - self._margin
        self._state = _TokenState(
            access_token=token,
            access_expires_at=started + expires_in - self._margin,
            refresh_token=new_refresh if refresh_usable else None,
            refresh_expires_at=refresh_at,
        )
        logger.debug("Token OAuth obtido (grant=%s, expires_in=%s, refresh_expires_in=%s).",
                     grant, expires_in, refresh_in)
        return token

    def _oauth_error(self, resp: requests.Response) -> str:
        """', error=<code>' from an OAuth error answer, or ''."""
        try:
            body: Any = resp.json()
        except ValueError:
            return ""
        code = body.get("error") if isinstance(body, dict) else None
        if not isinstance(code, str) or not code:
            return ""
        return f" (error={scrub(short(code, 80), self._secrets())})"


def _seconds(value: Any) -> Optional[float]:
    """A non-negative number of seconds, or None when absent or invalid."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    if out != out or out < 0 or out == float("inf"):
        return None
    return out
