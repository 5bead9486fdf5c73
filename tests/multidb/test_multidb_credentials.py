"""CredentialsClient against a real local HTTP server."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.multidb import (
    CredentialsClient,
    DbCredentials,
    MultiDatabaseError,
    TokenProvider,
)

from .conftest import OAUTH_PASSWORD, TENANT_PASSWORD, FakeApi, FakeClock

logger = logging.getLogger(__name__)


def _answer(n: int, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"hostname": f"db{n}.example", "port": 5432,
                            "db_name": f"erp_{n}", "user": f"user_{n}",
                            "password": TENANT_PASSWORD}
    body.update(overrides)
    return body


def _client(settings: Settings, clock: FakeClock, ttl: float = 300,
            http_timeout: float = 5.0) -> CredentialsClient:
    tokens = TokenProvider(settings, http_timeout=http_timeout, clock=clock)
    return CredentialsClient(settings, tokens, ttl_seconds=ttl, http_timeout=http_timeout,
                             clock=clock)


def test_cached_per_tenant(fake_api: FakeApi, settings: Settings, clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1))
    fake_api.set_tenant(2, _answer(2))
    creds = _client(settings, clock)
    for _ in range(5):
        for tenant in (1, 2):
            got = creds.get(tenant)
            assert got == DbCredentials(f"db{tenant}.example", 5432, f"erp_{tenant}",
                                        f"user_{tenant}", TENANT_PASSWORD)
        clock.advance(10)
    st = fake_api.state
    assert st.credentials_calls == 2
    assert st.token_calls == 1
    req = st.credentials_requests[0]
    assert req["json"] == {"tenant": 1}
    assert req["headers"]["Authorization"] == "Bearer access-token-1"
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["Accept"] == "application/json"


def test_ttl_and_invalidate(fake_api: FakeApi, settings: Settings, clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1), _answer(1, hostname="moved.example"))
    creds = _client(settings, clock, ttl=300)
    assert creds.get(1).hostname == "db1.example"
    clock.advance(299)
    assert creds.get(1).hostname == "db1.example"
    assert fake_api.state.credentials_calls == 1
    clock.advance(1)
    assert creds.get(1).hostname == "moved.example"
    assert fake_api.state.credentials_calls == 2
    creds.invalidate(1)
    creds.get(1)
    creds.get(1, force_refresh=True)
    assert fake_api.state.credentials_calls == 4


def test_ttl_zero_disables_cache(fake_api: FakeApi, settings: Settings,
                                 clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1))
    creds = _client(settings, clock, ttl=0)
    creds.get(1)
    creds.get(1)
    assert fake_api.state.credentials_calls == 2


def test_401_retried_once_with_a_fresh_token(fake_api: FakeApi, settings: Settings,
                                             clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1))
    fake_api.set_tenant(2, _answer(2))
    creds = _client(settings, clock)
    creds.get(1)
    fake_api.state.revoke_access_tokens()  # server-side revocation, local cache still "valid"
    assert creds.get(2).hostname == "db2.example"
    st = fake_api.state
    assert st.credentials_calls == 3  # tenant 1, tenant 2 (401), tenant 2 again
    assert st.refresh_grants == 1
    assert st.credentials_requests[-1]["headers"]["Authorization"] == "Bearer access-token-2"


def test_401_twice_is_an_error(fake_api: FakeApi, settings: Settings, clock: FakeClock) -> None:
    fake_api.set_tenant(7, _answer(7))
    fake_api.state.reject_all_tokens = True
    creds = _client(settings, clock)
    with pytest.raises(MultiDatabaseError) as info:
        creds.get(7)
    assert "HTTP 401" in str(info.value) and "tenant 7" in str(info.value)
    assert (info.value.status_code, info.value.tenant) == (401, 7)
    assert fake_api.state.credentials_calls == 2


@pytest.mark.parametrize("status", [500, 503, 404, 403])
def test_api_error_status_then_recovery(fake_api: FakeApi, settings: Settings, clock: FakeClock,
                                        status: int) -> None:
    fake_api.set_tenant(42, _answer(42))
    creds = _client(settings, clock)
    fake_api.state.credentials_status = status
    with pytest.raises(MultiDatabaseError) as info:
        creds.get(42)
    assert f"HTTP {status}" in str(info.value)
    assert "tenant 42" in str(info.value)
    fake_api.state.credentials_status = None
    assert creds.get(42).db_name == "erp_42"


def test_tenant_unknown_to_the_api(fake_api: FakeApi, settings: Settings,
                                   clock: FakeClock) -> None:
    creds = _client(settings, clock)
    with pytest.raises(MultiDatabaseError, match=r"HTTP 404 para o tenant 999"):
        creds.get(999)


def test_port_closed_then_recovery(fake_api: FakeApi, settings: Settings,
                                   clock: FakeClock) -> None:
    fake_api.set_tenant(42, _answer(42))
    fake_api.set_tenant(43, _answer(43))
    creds = _client(settings, clock)
    creds.get(42)  # token now cached
    fake_api.stop()
    with pytest.raises(MultiDatabaseError) as info:
        creds.get(43)
    assert "inacessível" in str(info.value) and "tenant 43" in str(info.value)
    assert creds.get(42).db_name == "erp_42"  # cached entry still served
    fake_api.start()
    assert creds.get(43).db_name == "erp_43"


def test_token_endpoint_down_names_the_tenant(fake_api: FakeApi, settings: Settings,
                                              clock: FakeClock) -> None:
    fake_api.state.token_status = 502
    creds = _client(settings, clock)
    with pytest.raises(MultiDatabaseError) as info:
        creds.get(5)
    assert "HTTP 502" in str(info.value) and "tenant 5" in str(info.value)
    assert fake_api.state.credentials_calls == 0


def test_http_timeout(fake_api: FakeApi, settings: Settings, clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1))
    creds = _client(settings, clock, http_timeout=0.3)
    creds._tokens.get_token()  # token first, without delay
    fake_api.state.delay = 2.0
    with pytest.raises(MultiDatabaseError, match="tenant 1"):
        creds.get(1)


@pytest.mark.parametrize(("body", "fields"), [
    ({"hostname": "h", "port": 5432, "db_name": "d", "user": "u"}, "password"),
    ({"port": 5432, "db_name": "d", "user": "u", "password": TENANT_PASSWORD}, "hostname"),
    (_answer(1, port="abc"), "port"),
    (_answer(1, port=0), "port"),
    (_answer(1, port=70000), "port"),
    (_answer(1, port=True), "port"),
    (_answer(1, port=None, user=""), "user, port"),
    (_answer(1, db_name=None), "db_name"),
])
def test_unusable_answer(fake_api: FakeApi, settings: Settings, clock: FakeClock,
                         body: dict[str, Any], fields: str,
                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake_api.set_tenant(1, body)
    creds = _client(settings, clock)
    with pytest.raises(MultiDatabaseError) as info:
        creds.get(1)
    text = str(info.value)
    assert "HTTP 200" in text and "tenant 1" in text and text.endswith(fields)
    assert TENANT_PASSWORD not in text
    assert TENANT_PASSWORD not in caplog.text


def test_port_as_digit_string_is_accepted(fake_api: FakeApi, settings: Settings,
                                          clock: FakeClock) -> None:
    fake_api.set_tenant(1, _answer(1, port="6432"))
    assert _client(settings, clock).get(1).port == 6432


@pytest.mark.parametrize("raw", [b"not json " + TENANT_PASSWORD.encode(), b"[1, 2]", b"null"])
def test_non_object_answer(fake_api: FakeApi, settings: Settings, clock: FakeClock,
                           raw: bytes) -> None:
    fake_api.state.raw_credentials_body = raw
    with pytest.raises(MultiDatabaseError, match="inutilizável") as info:
        _client(settings, clock).get(1)
    assert TENANT_PASSWORD not in str(info.value)
    # The JSON error (which keeps the document) is not chained.
    err = info.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_missing_tenant_is_rejected_without_http(fake_api: FakeApi, settings: Settings,
                                                 clock: FakeClock) -> None:
    creds = _client(settings, clock)
    with pytest.raises(MultiDatabaseError, match="sem tenant"):
        creds.get(None)  # type: ignore[arg-type]
    assert fake_api.state.credentials_calls == 0


def test_concurrent_gets_of_one_tenant_share_one_call(fake_api: FakeApi,
                                                      settings: Settings) -> None:
    fake_api.set_tenant(1, _answer(1))
    fake_api.set_tenant(2, _answer(2))
    tokens = TokenProvider(settings, http_timeout=5.0)
    tokens.get_token()
    fake_api.state.delay = 0.2
    creds = CredentialsClient(settings, tokens, http_timeout=5.0)
    results: list[DbCredentials] = []
    threads = [threading.Thread(target=lambda t=t: results.append(creds.get(t)))
               for t in (1, 2) * 5]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 10
    assert fake_api.state.credentials_calls == 2


def test_password_hidden_in_repr_and_logs(fake_api: FakeApi, settings: Settings,
                                          clock: FakeClock,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake_api.set_tenant(1, _answer(1))
    creds = _client(settings, clock)
    got = creds.get(1)
    assert got.password == TENANT_PASSWORD
    assert TENANT_PASSWORD not in repr(got) and TENANT_PASSWORD not in str(got)
    assert "password='***'" in repr(got)
    logger.info("credentials: %s / %r", got, got)
    fake_api.state.credentials_status = 500
    with pytest.raises(MultiDatabaseError):
        creds.get(2)
    for secret in (TENANT_PASSWORD, OAUTH_PASSWORD, "access-token-1", "refresh-token-1"):
        assert secret not in caplog.text
