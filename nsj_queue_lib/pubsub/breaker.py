"""Per-endpoint isolation of webhook deliveries: circuit breaker and rate limit.

Endpoint: scheme, host and port of the URL (``https://api.example.com:443``).

Circuit breaker (state in the queue's ``<fila>_endpoints`` table, shared by the fleet):

* closed: deliveries go out; each failure that says the endpoint is unwell (no answer,
  timeout, HTTP 5xx, 408, 429) adds one to `falhas`, any other answer resets it; one
  failure from opening, the next call goes alone (it takes the probe's lease, below), so
  that a dead endpoint does not hold every thread of the fleet for one more timeout;
* the WEBHOOK_BREAKER_FAILURES-th consecutive failure (5) opens it for
  WEBHOOK_BREAKER_COOLDOWN seconds (30): meanwhile the endpoint's deliveries are put
  back, due when it ends, WITHOUT spending an attempt (TaskDeferred); the waiting ones
  in bulk, one transaction for all (pubsub/endpoint_hold.py), so that the other
  endpoints' deliveries do not wait behind a claim and an UPDATE for each of them;
* half-open, once the pause is over: one delivery is the probe.  It takes a lease
  (`sonda_ate` = now + the webhook timeout + PROBE_LEASE_MARGIN), committed on a
  connection of its own before its HTTP call, so one probe per pause runs fleet-wide;
  the others are put back (at most PROBE_WAIT seconds each time).  Its success closes
  the breaker; its failure opens it again for twice the pause, up to
  WEBHOOK_BREAKER_MAX_COOLDOWN (600); either clears the lease, and so does a probe that
  made no call.  A probe whose worker died holds the lease until it lapses.

Rate limit (WEBHOOK_RATE_LIMIT deliveries per second per endpoint, off by default): a
token bucket in each worker process (not shared: N processes allow N times the rate).
A delivery that would wait more than a second is put back instead of holding its thread.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, Optional
from urllib.parse import urlsplit

# Endpoints (breaker rows) a listing reads at most; those not closed come first.
ENDPOINTS_LISTED = 200

DEFAULT_PORTS = {"http": 80, "https": 443}
PROBE_WAIT = 5.0  # seconds a delivery waits while another one probes the endpoint
PROBE_LEASE_MARGIN = 10.0  # the probe's lease: the webhook timeout plus this (seconds)
MAX_SLEEP = 1.0  # rate limit: longer waits put the delivery back instead of sleeping


def endpoint_of(url: str) -> str:
    """'scheme://host:port' of `url` (default port written out; no path or credentials)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port: object = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:  # a port out of range: the call fails on its own, keep its text
        text = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        port = "".join(c for c in text if c.isalnum())[:10] or "?"
    return f"{scheme}://{host}:{port}"[:300]


def counts_against(status: Optional[int], no_answer: bool = True) -> bool:
    """Whether a failed call counts against its endpoint: no answer (timeout, connection
    failure), HTTP 5xx, 408 or 429.  A request that could not be made (invalid URL:
    status None, `no_answer` False) does not: the subscription is wrong, not the host."""
    if status is None:
        return no_answer
    return status >= 500 or status in (408, 429)


def spread(seconds: float) -> float:
    """`seconds` plus up to 10% (deferred deliveries do not all come back at once)."""
    return seconds + random.uniform(0, max(seconds, 1.0) * 0.1)


class RateLimiter:
    """Token bucket per endpoint for one process; `reserve` returns the wait in seconds."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second if per_second > 0 else 0.0
        self._next: Dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def reserve(self, endpoint: str, now: Optional[float] = None) -> float:
        """Take the endpoint's next slot; seconds until it (0: now).  A wait longer than
        MAX_SLEEP takes no slot (the caller puts the delivery back)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            slot = max(self._next.get(endpoint, now), now)
            wait = slot - now
            if wait <= MAX_SLEEP:
                self._next[endpoint] = slot + self.interval
            return wait


__all__ = ["ENDPOINTS_LISTED", "PROBE_LEASE_MARGIN", "PROBE_WAIT", "RateLimiter",
           "counts_against", "endpoint_of", "spread"]
