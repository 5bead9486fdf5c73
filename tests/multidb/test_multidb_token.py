"""TokenProvider against a real local HTTP server playing Keycloak."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError, NsjQueueError
from nsj_queue_lib.multidb import MultiDatabaseError, TokenProvider

from .conftest import CLIENT_ID, OAUTH_PASSWORD, OAUTH_USER, FakeApi, FakeClock

logger = logging.getLogger(__name__)


def _provider(settings: Settings, clock: FakeClock, **kw: object) -> TokenProvider:
    return TokenProvider(settings, http_timeout=kw.pop("http_timeout", 5.0),  # type: ignore[arg-type]
                         clock=clock, **kw)  # type: ignore[arg-type]


def test_password_grant_once_then_cached(fake_api: FakeApi, settings: Settings,
                                         clock: FakeClock) -> None:
    tokens = _provider(settings, clock)
    first = tokens.get_token()
    for _ in range(4):
        clock.advance(10)
        assert tokens.get_token() == first
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 0)
    req = st.token_requests[0]
    assert req["form"] == {"username": OAUTH_USER, "password": OAUTH_PASSWORD,
                           "client_id": CLIENT_ID, "scope": "offline_access",
                           "grant_type": "password"}
    assert req["headers"]["Accept"] == "application/json"
    assert req["headers"]["Content-Type"] == "application/x-www-form-urlencoded"


def test_refresh_grant_after_access_expiry(fake_api: FakeApi, settings: Settings,
                                           clock: FakeClock) -> None:
    fake_api.state.expires_in = 60
    fake_api.state.refresh_expires_in = 1800
    tokens = _provider(settings, clock)
    first = tokens.get_token()
    clock.advance(49)  # 60 - 10 s margin not reached yet
    assert tokens.get_token() == first
    clock.advance(2)  # 51 s: inside the margin -> refresh
    second = tokens.get_token()
    assert second != first
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 1)
    form = st.token_requests[1]["form"]
    assert form == {"refresh_token": "refresh-token-1", "client_id": CLIENT_ID,
                    "scope": "offline_access", "grant_type": "refresh_token"}
    assert "password" not in form
    assert tokens.get_token() == second
    assert st.token_calls == 2


def test_password_grant_again_after_refresh_expiry(fake_api: FakeApi, settings: Settings,
                                                   clock: FakeClock) -> None:
    fake_api.state.expires_in = 60
    fake_api.state.refresh_expires_in = 120
    tokens = _provider(settings, clock)
    tokens.get_token()
    clock.advance(111)  # both the access (50 s) and the refresh (110 s) expired
    tokens.get_token()
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (2, 0)


def test_missing_refresh_expires_in_uses_password_grant(fake_api: FakeApi, settings: Settings,
                                                        clock: FakeClock) -> None:
    fake_api.state.expires_in = 60
    fake_api.state.omit_refresh_expires_in = True
    tokens = _provider(settings, clock)
    first = tokens.get_token()  # no KeyError as in 1.2.2
    clock.advance(30)
    assert tokens.get_token() == first
    clock.advance(30)
    assert tokens.get_token() != first
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (2, 0)


def test_refresh_expires_in_zero_means_offline_token(fake_api: FakeApi, settings: Settings,
                                                     clock: FakeClock) -> None:
    """Keycloak sends refresh_expires_in=0 for offline tokens: no local expiry."""
    fake_api.state.expires_in = 60
    fake_api.state.refresh_expires_in = 0
    tokens = _provider(settings, clock)
    tokens.get_token()
    clock.advance(86400)
    tokens.get_token()
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 1)


def test_refused_refresh_falls_back_to_password_grant(fake_api: FakeApi, settings: Settings,
                                                      clock: FakeClock) -> None:
    fake_api.state.expires_in = 60
    tokens = _provider(settings, clock)
    first = tokens.get_token()
    fake_api.state.refuse_refresh = True
    clock.advance(60)
    second = tokens.get_token()
    assert second != first
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (2, 1)
    # The next expiry uses the (new) refresh token again once it is accepted.
    fake_api.state.refuse_refresh = False
    clock.advance(60)
    tokens.get_token()
    assert (st.password_grants, st.refresh_grants) == (2, 2)


def test_invalidate_forces_a_new_token(fake_api: FakeApi, settings: Settings,
                                       clock: FakeClock) -> None:
    tokens = _provider(settings, clock)
    first = tokens.get_token()
    tokens.invalidate()
    assert tokens.get_token() != first
    assert (fake_api.state.password_grants, fake_api.state.refresh_grants) == (1, 1)


def test_missing_expires_in_is_not_fatal(fake_api: FakeApi, settings: Settings,
                                         clock: FakeClock) -> None:
    fake_api.state.expires_in = None
    tokens = _provider(settings, clock)
    first = tokens.get_token()
    assert tokens.get_token() == first
    assert fake_api.state.token_calls == 1


def test_concurrent_callers_share_one_grant(fake_api: FakeApi, settings: Settings) -> None:
    fake_api.state.delay = 0.2
    tokens = TokenProvider(settings, http_timeout=5.0)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(tokens.get_token()))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len(set(results)) == 1
    assert fake_api.state.token_calls == 1


def test_wrong_password_error(fake_api: FakeApi, settings: Settings, clock: FakeClock,
                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad = settings.replace(multi_database_password="Wrong-Secret-Pw-1234")
    tokens = _provider(bad, clock)
    with pytest.raises(MultiDatabaseError) as info:
        tokens.get_token()
    text = str(info.value)
    assert "HTTP 401" in text and "invalid_grant" in text
    assert info.value.status_code == 401
    assert isinstance(info.value, NsjQueueError)
    assert "Wrong-Secret-Pw-1234" not in text
    assert "Wrong-Secret-Pw-1234" not in caplog.text


def test_server_error_then_recovery(fake_api: FakeApi, settings: Settings,
                                    clock: FakeClock) -> None:
    fake_api.state.token_status = 500
    tokens = _provider(settings, clock)
    with pytest.raises(MultiDatabaseError, match="HTTP 500"):
        tokens.get_token()
    fake_api.state.token_status = None
    assert tokens.get_token().startswith("access-token-")


def test_port_closed_then_recovery(fake_api: FakeApi, settings: Settings,
                                   clock: FakeClock) -> None:
    tokens = _provider(settings, clock)
    fake_api.stop()
    with pytest.raises(MultiDatabaseError, match="inacessível") as info:
        tokens.get_token()
    assert OAUTH_PASSWORD not in str(info.value)
    fake_api.start()  # same port
    assert tokens.get_token().startswith("access-token-")


def test_http_timeout(fake_api: FakeApi, settings: Settings, clock: FakeClock) -> None:
    fake_api.state.delay = 2.0
    tokens = _provider(settings, clock, http_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(MultiDatabaseError, match="Timeout"):
        tokens.get_token()
    assert time.monotonic() - started < 1.5


def test_answer_without_access_token(fake_api: FakeApi, settings: Settings,
                                     clock: FakeClock) -> None:
    tokens = _provider(settings, clock)
    fake_api.state.token_status = 200  # forced status with an error body, no token
    with pytest.raises(MultiDatabaseError, match="sem access_token"):
        tokens.get_token()


def test_secrets_never_logged(fake_api: FakeApi, settings: Settings, clock: FakeClock,
                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake_api.state.expires_in = 60
    tokens = _provider(settings, clock)
    issued = [tokens.get_token()]
    clock.advance(60)
    issued.append(tokens.get_token())  # refresh grant
    fake_api.state.refuse_refresh = True
    clock.advance(60)
    issued.append(tokens.get_token())  # refused refresh -> password grant
    assert fake_api.state.refresh_grants == 2
    for secret in [OAUTH_PASSWORD, *issued, "refresh-token-1", "refresh-token-2"]:
        assert secret not in caplog.text


def test_missing_settings_is_config_error(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="MULTI_DATABASE_CLIENT_ID"):
        TokenProvider(settings.replace(multi_database_client_id=None))


def test_refresh_with_server_down_keeps_the_refresh_token(fake_api: FakeApi, settings: Settings,
                                                          clock: FakeClock) -> None:
    fake_api.state.expires_in = 60
    tokens = _provider(settings, clock)
    tokens.get_token()
    clock.advance(60)
    fake_api.stop()
    with pytest.raises(MultiDatabaseError, match="grant=refresh_token"):
        tokens.get_token()
    fake_api.start()
    tokens.get_token()
    st = fake_api.state
    assert (st.password_grants, st.refresh_grants) == (1, 1)
