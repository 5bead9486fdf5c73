"""An unwell endpoint's waiting deliveries put back in bulk (pubsub/breaker.py).

While an endpoint's breaker is open (or a probe holds its lease), each of its deliveries
that a worker claims is put back without spending an attempt: a claim and an UPDATE that
the healthy endpoints' deliveries wait behind.  So, when the breaker opens, when a probe
fails, and when a delivery finds the endpoint open or probed (at most once per
HOLD_EVERY seconds per process and endpoint), one transaction puts back every waiting
delivery of the endpoint until the end of the pause (or of the probe wait): they are not
claimed before then.  Only webhook workers with the breaker on do this; the queue's claim
is not involved.

The deliveries of an endpoint are the tasks of the subscriptions whose URL has that
endpoint (computed in Python, the same `endpoint_of` as the breaker's): the subscriber
table is read at most every SUBSCRIPTIONS_TTL seconds per process (SUBSCRIPTIONS_READ
rows at most; deliveries of others defer themselves one by one, as before).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from nsj_queue_lib.pubsub.breaker import endpoint_of
from nsj_queue_lib.pubsub.webhook_store import WebhookStore

logger = logging.getLogger(__name__)

HOLD_EVERY = 1.0  # s: a process's bulk put-backs of one endpoint found open, at most
HOLD_LIMIT = 5000  # tasks put back by one statement
SUBSCRIPTIONS_READ = 10000
SUBSCRIPTIONS_TTL = 60.0


class EndpointHold:
    """Bulk put-backs for one worker process (shared by its task threads)."""

    def __init__(self, delivers: Optional[Callable[[str], bool]] = None) -> None:
        # whether this worker delivers a subscription's tasks as webhooks (a handler of
        # its own takes precedence): only those tasks are put back
        self.delivers = delivers or (lambda sub_id: True)
        self._lock = threading.Lock()
        self._last: Dict[Tuple[str, str], float] = {}
        # per queue (its table): when its subscriptions were read, and them by endpoint
        self._read: Dict[str, Tuple[float, Dict[str, List[str]]]] = {}

    def due(self, queue: str, endpoint: str, now: Optional[float] = None) -> bool:
        """Whether a delivery that found `endpoint` open puts the others back now (and
        marks it done): at most once per HOLD_EVERY seconds per queue and endpoint."""
        now = time.monotonic() if now is None else now
        with self._lock:
            last = self._last.get((queue, endpoint))
            if last is not None and now - last < HOLD_EVERY:
                return False
            if len(self._last) > 1000:
                self._last.clear()
            self._last[(queue, endpoint)] = now
            return True

    def put_back(self, store: WebhookStore, queue: str, endpoint: str, wait: float) -> int:
        """Put the endpoint's waiting deliveries in `queue` (its table) back, in the
        store's transaction; how many."""
        ids = self.subscriptions(store, queue, endpoint)
        mensagem = (f"Endpoint {endpoint} em pausa (disjuntor aberto ou em sondagem): "
                    "entrega adiada sem gastar tentativa")
        count = store.endpoint_defer_waiting(endpoint, ids, wait, mensagem, HOLD_LIMIT)
        if count:
            logger.info("Endpoint %s: %s entregas adiadas de uma vez sem gastar tentativa "
                        "(disjuntor aberto ou em sondagem)", endpoint, count)
        return count

    def subscriptions(self, store: WebhookStore, queue: str, endpoint: str) -> List[str]:
        """Ids of the subscriptions of `queue` delivered as webhooks to `endpoint`."""
        now = time.monotonic()
        with self._lock:
            read = self._read.get(queue)
            if read is not None and now - read[0] < SUBSCRIPTIONS_TTL:
                return read[1].get(endpoint, [])
        rows = store.subscriber_urls(SUBSCRIPTIONS_READ)
        by_endpoint: Dict[str, List[str]] = {}
        for row in rows:
            sub_id = str(row["id"])
            try:
                found = endpoint_of(str(row["url"]))
            except ValueError:  # an invalid URL: its deliveries fail on their own
                continue
            if self.delivers(sub_id):
                by_endpoint.setdefault(found, []).append(sub_id)
        with self._lock:
            if len(self._read) > 100:
                self._read.clear()
            self._read[queue] = (now, by_endpoint)
        return by_endpoint.get(endpoint, [])


__all__ = ["HOLD_EVERY", "HOLD_LIMIT", "EndpointHold"]
