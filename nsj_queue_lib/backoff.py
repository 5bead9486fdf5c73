"""Exponential back-off with jitter: the one back-off of the library (foundation level,
so that the runtime, the engines and the log shipper share it without importing each
other)."""

from __future__ import annotations

import random
from typing import Optional

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
