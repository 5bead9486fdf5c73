"""Pure parts of the webhook features: signatures (checked by the reference
`standardwebhooks` package), endpoint keys, the breaker's failure rule, the rate limiter,
secret storage and the subscriber command's parsers."""

from __future__ import annotations

import pytest
from standardwebhooks.webhooks import Webhook

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.pubsub.breaker import RateLimiter, counts_against, endpoint_of
from nsj_queue_lib.pubsub.endpoint_hold import HOLD_EVERY, EndpointHold
from nsj_queue_lib.pubsub.secret_store import ENCRYPTED_PREFIX, SecretBox, SecretUnreadable
from nsj_queue_lib.pubsub.signing import (
    InvalidSecret,
    delivery_id,
    generate_secret,
    secret_key,
    signature_headers,
)
from nsj_queue_lib.pubsub.subscribers import (
    SubscriberError,
    masked_headers,
    parse_duration,
    parse_headers,
)

KEYS = ("dZuhwyIyTRadCJEvf3_k5UsuwzRWuWaft_u2OgWreEU=",
        "6o9Y_mB1ZMqm4ndKP0INVDvYaTZlvhsPgRCjrEh5glY=")


def test_signature_headers_verify_with_the_reference_library_for_each_secret():
    import time

    old, new = generate_secret(), generate_secret()
    body = '{"a": "ç"}'.encode()
    headers = signature_headers([secret_key(new), secret_key(old)],
                                delivery_id("loja.pedidos", 42), int(time.time()), body)
    assert headers["webhook-id"] == "msg_loja_pedidos_42"
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        assert Webhook(secret).verify(body, headers) == {"a": "ç"}
    assert signature_headers([], "x", 1, body) == {}


@pytest.mark.parametrize("bad", ["", "abc", "whsec_", "whsec_***", "whsec_" + "QUJD"])
def test_invalid_secrets_are_refused_without_echoing_them(bad):
    with pytest.raises(InvalidSecret) as info:
        secret_key(bad)
    assert str(info.value).startswith("segredo inválido")
    if len(bad) > len("whsec_"):
        assert bad not in str(info.value)


def test_endpoint_is_scheme_host_and_port():
    assert endpoint_of("https://u:p@API.example.com/x?t=1") == "https://api.example.com:443"
    assert endpoint_of("http://h:8080/a") == "http://h:8080"
    assert endpoint_of("http://[::1]/a") == "http://[::1]:80"
    assert endpoint_of("http://u:p@127.0.0.1:99999/x") == "http://127.0.0.1:99999"


def test_what_counts_against_an_endpoint():
    assert counts_against(None) and counts_against(500) and counts_against(503)
    assert counts_against(429) and counts_against(408)
    assert not counts_against(None, no_answer=False)  # an invalid URL: the subscription's fault
    assert not counts_against(404) and not counts_against(400) and not counts_against(301)


def test_rate_limiter_spaces_slots_per_endpoint():
    limiter = RateLimiter(2.0)  # one slot every 0.5 s
    assert limiter.reserve("a", now=10.0) == 0.0
    assert limiter.reserve("a", now=10.0) == 0.5
    assert limiter.reserve("b", now=10.0) == 0.0
    assert limiter.reserve("a", now=10.0) == 1.0
    assert limiter.reserve("a", now=10.0) == 1.5  # more than a second: no slot taken
    assert limiter.reserve("a", now=10.0) == 1.5
    assert not RateLimiter(0).enabled


def test_secret_box_seals_opens_and_reseals_with_the_newest_key():
    secret = generate_secret()
    assert SecretBox(None).seal(secret) == secret
    old = SecretBox(KEYS[0])
    sealed = old.seal(secret)
    assert sealed.startswith(ENCRYPTED_PREFIX) and secret[6:] not in sealed
    both = SecretBox(f"{KEYS[1]},{KEYS[0]}")
    assert both.open(sealed) == secret
    resealed = both.reseal(sealed)
    assert SecretBox(KEYS[1]).open(resealed) == secret
    with pytest.raises(SecretUnreadable):
        SecretBox(KEYS[1]).open(sealed)
    with pytest.raises(SecretUnreadable):
        SecretBox(None).open(sealed)
    with pytest.raises(ConfigError) as info:
        SecretBox("nao-e-chave")
    assert "nao-e-chave" not in str(info.value)


def test_secret_box_seals_header_values_and_leaves_clear_ones_as_they_are():
    old = SecretBox(KEYS[0])
    sealed = old.seal_headers({"Authorization": "Bearer t", "X-N": "1"})
    assert set(sealed) == {"Authorization", "X-N"}
    assert all(v.startswith(ENCRYPTED_PREFIX) and "Bearer" not in v for v in sealed.values())
    assert old.open_headers(sealed) == {"Authorization": "Bearer t", "X-N": "1"}
    clear = {"X-Antigo": "claro", "X-Num": 5}
    assert SecretBox(KEYS[1]).open_headers(clear) is clear  # older rows: as they are
    assert SecretBox(None).seal_headers(clear) == clear
    resealed = SecretBox(f"{KEYS[1]},{KEYS[0]}").reseal_headers(dict(sealed, **clear))
    assert resealed is not None and resealed["X-Num"] == 5
    assert SecretBox(KEYS[1]).open_headers(resealed) == {
        "Authorization": "Bearer t", "X-N": "1", "X-Antigo": "claro", "X-Num": 5}
    with pytest.raises(SecretUnreadable):
        SecretBox(KEYS[1]).open_headers(sealed)
    assert SecretBox(None).reseal_headers(clear) is None


def test_endpoint_hold_puts_back_at_most_once_a_second_per_queue_and_endpoint():
    hold = EndpointHold()
    assert hold.due("fila", "http://a:80", now=100.0)
    assert not hold.due("fila", "http://a:80", now=100.5)
    assert hold.due("fila", "http://b:80", now=100.5)
    assert hold.due("outra", "http://a:80", now=100.5)
    assert hold.due("fila", "http://a:80", now=100.0 + HOLD_EVERY)


def test_subscriber_command_parsers():
    assert parse_duration("24h") == 86400 and parse_duration("30m") == 1800
    assert parse_duration("0") == 0 and parse_duration("2d") == 172800
    with pytest.raises(SubscriberError):
        parse_duration("amanhã")
    assert parse_headers(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(SubscriberError):
        parse_headers(["semigual"])
    assert masked_headers({"Authorization": "Bearer x", "X-Api-Key": "k", "X-Origem": "erp",
                           "Cookie": "c"}) == {"Authorization": "***", "X-Api-Key": "***",
                                               "X-Origem": "erp", "Cookie": "***"}
