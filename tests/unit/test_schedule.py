"""Pure time arithmetic of nsj_queue_lib.runtime.schedule."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.runtime.schedule import retry_delay_seconds, seconds_to_next_slot

EVERY_5 = frozenset(range(0, 60, 5))


def at(h: int, m: int, s: int = 0, us: int = 0) -> dt.datetime:
    return dt.datetime(2030, 5, 17, h, m, s, us)


@pytest.mark.parametrize("now,minutes,expected", [
    (at(10, 29, 30), frozenset({0, 30}), 30.0),
    (at(10, 30, 0), frozenset({0, 30}), 1800.0),       # strictly after the current minute
    (at(10, 30, 59, 500000), frozenset({30}), 3540.5),  # same minute: next hour
    (at(10, 7), frozenset({5}), 58 * 60.0),
    (at(23, 59, 50), frozenset({0}), 10.0),             # crosses midnight
    (at(10, 3, 20), EVERY_5, 100.0),
    (at(10, 3, 20), frozenset(range(60)), 40.0),
])
def test_seconds_to_next_slot(now, minutes, expected):
    assert seconds_to_next_slot(minutes, now) == pytest.approx(expected)


def test_seconds_to_next_slot_with_timezone_aware_clock():
    now = dt.datetime(2030, 1, 1, 12, 4, 30, tzinfo=dt.timezone.utc)
    assert seconds_to_next_slot(EVERY_5, now) == 30.0


def test_seconds_to_next_slot_without_minutes():
    with pytest.raises(ValueError):
        seconds_to_next_slot(frozenset(), at(1, 1))


@pytest.mark.parametrize("tentativa,base,expected", [
    (1, 5, 300.0), (2, 5, 600.0), (3, 5, 900.0), (1, 0.01, 0.6), (4, 0.5, 120.0), (1, 0, 0.0),
])
def test_retry_delay_is_tentativa_times_base_minutes(tentativa, base, expected):
    assert retry_delay_seconds(tentativa, base) == pytest.approx(expected)


def test_retry_delay_never_negative():
    assert retry_delay_seconds(2, -1) == 0.0


def test_backoff_grows_with_jitter_up_to_cap_and_resets():
    b = Backoff(first=0.5, cap=4.0, rng=random.Random(1))
    delays = [b.next() for _ in range(8)]
    nominal = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    for d, n in zip(delays, nominal):
        assert n / 2 <= d <= n
    b.reset()
    assert 0.25 <= b.next() <= 0.5


def test_backoff_jitter_bounds_the_draw_and_one_means_none():
    b = Backoff(first=0.2, cap=5.0, rng=random.Random(3), jitter=0.8)
    for nominal in [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]:
        assert 0.8 * nominal <= b.next() <= nominal
    exact = Backoff(first=1.0, cap=30.0, jitter=1.0)  # (the Loki sender's)
    assert [exact.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert exact.attempt == 7
    exact.reset()
    assert exact.next() == 1.0


def test_backoff_stays_at_its_cap_through_a_long_outage():
    # Fails before the fix: the 1025th consecutive delay raised OverflowError (2 ** 1024
    # does not fit a float): a worker, listener or Loki sender retrying through an outage
    # of about two hours died in its reconnect handler.
    b = Backoff(first=0.5, cap=10.0, rng=random.Random(5))
    delays = [b.next() for _ in range(5000)]
    assert all(5.0 <= d <= 10.0 for d in delays[5:])
    exact = Backoff(first=1.0, cap=30.0, jitter=1.0)
    assert [exact.next() for _ in range(3000)][-1] == 30.0
    assert exact.attempt == 3000
    exact.reset()
    assert exact.next() == 1.0
