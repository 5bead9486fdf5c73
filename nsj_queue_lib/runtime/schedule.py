"""Pure time arithmetic: minute-aligned slots and retry delays (the back-off is
nsj_queue_lib/backoff.py)."""

from __future__ import annotations

import datetime as _dt
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
