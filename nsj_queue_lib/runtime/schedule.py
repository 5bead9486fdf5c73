"""Pure time arithmetic: minute-aligned slots, retry delays and reconnect back-off."""

from __future__ import annotations

import datetime as _dt
import random
from typing import FrozenSet, Optional


def seconds_to_next_slot(minutes: FrozenSet[int], now: _dt.datetime) -> float:
    """Seconds from `now` to the start of the next clock minute listed in `minutes`.

    The slot is strictly after the current minute's start, so a job runs once
    per matching minute (all workers wake at the same instant on purpose: the
    admin lock lets exactly one of them do the work).
    """
    base = now.replace(second=0, microsecond=0)
    for step in range(1, 24 * 60 + 1):
        slot = base + _dt.timedelta(minutes=step)
        if slot.minute in minutes:
            return max(0.0, (slot - now).total_seconds())
    raise ValueError("no minute configured")


def current_slot(minutes: FrozenSet[int], now: _dt.datetime) -> Optional[_dt.datetime]:
    """Start of the latest clock minute listed in `minutes` at or before `now`, as a naive
    UTC datetime (the same slot for every worker, whatever its time zone); None when no
    minute is configured.  A naive `now` is local time."""
    base = now.replace(second=0, microsecond=0)
    for step in range(0, 24 * 60 + 1):
        slot = base - _dt.timedelta(minutes=step)
        if slot.minute in minutes:
            return slot.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return None


def retry_delay_seconds(tentativa: int, base_interval_minutes: float) -> float:
    """Delay before the next attempt: tentativa x QUEUE_BASE_INTERVAL_RETRY minutes."""
    return max(0.0, tentativa * base_interval_minutes * 60.0)


_MAX_DOUBLINGS = 60  # past any cap: first x 2**60 is over 10**17 s


class Backoff:
    """Exponential back-off for reconnects and retries: `first` seconds doubling up to
    `cap`, each delay drawn in [`jitter` x delay, delay] (jitter=1.0: none).

    The one back-off of the library: the worker's and listener's reconnects (0.5 s to
    10 s), the socket client's reconnects and the Loki sender's retries.
    """

    def __init__(self, first: float = 0.5, cap: float = 10.0,
                 rng: Optional[random.Random] = None, jitter: float = 0.5) -> None:
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self.attempt = 0  # delays handed out since the last reset
        self._rng = rng or random.Random()

    def next(self) -> float:
        # (the exponent is bounded: 2 ** 1024 does not fit a float, and an outage may
        # last that many attempts, about two hours at the reconnects' 10 s cap)
        delay = min(self.cap, self.first * 2.0 ** min(self.attempt, _MAX_DOUBLINGS))
        self.attempt += 1
        return delay * (self.jitter + self._rng.random() * (1.0 - self.jitter))

    def reset(self) -> None:
        self.attempt = 0
