"""Database side of webhooks: subscription secrets, circuit breakers, delivery log.

One method per named query of ``sql/<dialect>/webhooks.sql`` (+ ``sql/common``).  It
never commits: callers run it inside their transaction.  `WebhookFeatures.probe` tells
which of the schema-5 objects a queue has (a 1.2.2 subscriber table has no secret
columns; a queue not yet upgraded has no breaker or delivery tables): what is absent
keeps the old behaviour.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, List, Optional, Sequence

from nsj_queue_lib.db.dialect import Dialect
from nsj_queue_lib.db.errors import MISSING, classify
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)


def _expand_in(sql: str, params: Dict[str, Any], name: str, values: Sequence[Any]) -> str:
    """`IN %(name)s` as `IN (%(name_0)s, ...)`, each value a parameter (every driver)."""
    keys = [f"{name}_{i}" for i in range(len(values))]
    params.update(zip(keys, values))
    return sql.replace(f"%({name})s", "(" + (", ".join(f"%({k})s" for k in keys) or "NULL") + ")")


@lru_cache(maxsize=32)
def _queries(dialect: Dialect, queue_table: str, sub_table: Optional[str]) -> Queries:
    return Queries(dialect, queue_table, sub_table, "webhooks.sql")


def is_missing_object(exc: BaseException) -> bool:
    """Whether `exc` says a table or column does not exist."""
    return classify(exc) in MISSING


@dataclass(frozen=True)
class WebhookFeatures:
    """Which webhook objects of schema 5 the queue has."""

    secrets: bool = False
    breaker: bool = False
    deliveries: bool = False

    @classmethod
    def probe(cls, store: WebhookStore) -> WebhookFeatures:
        """Probe each object on `store`'s session (outside a task; rolled back after)."""
        found = {}
        for name, query in (("secrets", "webhook_probe_secrets"),
                            ("breaker", "webhook_probe_endpoints"),
                            ("deliveries", "webhook_probe_deliveries")):
            try:
                store.session.fetch_all(store.q[query])
                found[name] = True
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                if not is_missing_object(exc):
                    raise
                found[name] = False
            finally:
                store.session.rollback()
        return cls(**found)


class WebhookStore:
    """Webhook tables of one queue on one session (no commits here)."""

    def __init__(self, session: Any, queue_table: str, sub_table: Optional[str]) -> None:
        self.session = session
        self.q = _queries(session.dialect, queue_table, sub_table)

    @classmethod
    def for_settings(cls, session: Any, settings: Any) -> WebhookStore:
        return cls(session, settings.queue_table, settings.queue_subscriber_table)

    # -- subscriptions ---------------------------------------------------------------
    def secrets_get(self, sub_id: str) -> Optional[dict]:
        return self.session.fetch_one(self.q["subscriber_secrets_get"], {"id": sub_id})

    def subscriber_exists(self, sub_id: str) -> bool:
        return self.session.fetch_one(self.q["subscriber_exists"], {"id": sub_id}) is not None

    def unsigned_list(self) -> List[str]:
        return [r["id"] for r in self.session.fetch_all(self.q["subscriber_unsigned_list"])]

    def subscriber_list(self) -> List[dict]:
        return self.session.fetch_all(self.q["subscriber_list"])

    def subscriber_signing(self) -> List[dict]:
        return self.session.fetch_all(self.q["subscriber_list_signing"])

    def subscriber_insert(self, **row: Any) -> int:
        return self.session.execute(self.q["subscriber_insert"], row)

    def secret_set(self, sub_id: str, segredo: Optional[str],
                   segredo_anterior: Optional[str]) -> int:
        return self.session.execute(self.q["subscriber_secret_set"], {
            "id": sub_id, "segredo": segredo, "segredo_anterior": segredo_anterior})

    def secret_rotate(self, sub_id: str, segredo: str, overlap_seconds: float) -> int:
        return self.session.execute(self.q["subscriber_secret_rotate"], {
            "id": sub_id, "segredo": segredo, "delay": overlap_seconds})

    def secret_rows(self) -> List[dict]:
        return self.session.fetch_all(self.q["subscriber_secret_rows"])

    def header_rows(self) -> List[dict]:
        return self.session.fetch_all(self.q["subscriber_header_rows"])

    def headers_set(self, sub_id: str, headers: str) -> int:
        return self.session.execute(self.q["subscriber_headers_set"],
                                    {"id": sub_id, "headers": headers})

    def set_active(self, sub_id: str, ativo: bool) -> int:
        return self.session.execute(self.q["subscriber_set_active"],
                                    {"id": sub_id, "ativo": ativo})

    def subscriber_delete(self, sub_id: str) -> int:
        return self.session.execute(self.q["subscriber_delete"], {"id": sub_id})

    # -- circuit breakers --------------------------------------------------------------
    def endpoint_get(self, endpoint: str) -> Optional[dict]:
        return self.session.fetch_one(self.q["endpoint_get"], {"endpoint": endpoint})

    def endpoint_take_probe(self, endpoint: str, lease: float, falhas: int) -> bool:
        """Take the probe lease for `lease` seconds of an endpoint half-open or closed with
        `falhas` failures (or more), in the caller's transaction (committed before the
        call); False when neither, another call holds the lease or another transaction
        holds the row."""
        if self.session.fetch_one(self.q["endpoint_take_probe"], {
                "endpoint": endpoint, "falhas": int(falhas)}) is None:
            return False
        self.session.execute(self.q["endpoint_probe_lease"],
                             {"endpoint": endpoint, "delay": float(lease)})
        return True

    def endpoint_probe_release(self, endpoint: str) -> None:
        self.session.execute(self.q["endpoint_probe_release"], {"endpoint": endpoint})

    def endpoint_defer_waiting(self, endpoint: str, ids: Sequence[str], wait: float,
                               mensagem: str, limit: int) -> int:
        """Put the endpoint's waiting deliveries (tasks of the subscriptions `ids`) back
        until the end of its pause, or of the probe's lease but at most `wait` s; the
        number of tasks put back (0: not open, or nothing to put back)."""
        if not ids:
            return 0
        ate = self.session.fetch_value(self.q["endpoint_deferral_until"], {
            "endpoint": endpoint, "delay": float(wait)})
        if ate is None:
            return 0
        params: Dict[str, Any] = {"ate": ate, "limit": int(limit)}
        sql = _expand_in(self.q["endpoint_waiting_locked"], params, "ids", ids)
        locked = [r["id"] for r in self.session.fetch_all(sql, params)]
        if not locked:
            return 0
        params = {"ate": ate, "mensagem": mensagem[:500]}
        sql = _expand_in(self.q["endpoint_defer_locked"], params, "locked", locked)
        return self.session.execute(sql, params)

    def subscriber_urls(self, limit: int) -> List[dict]:
        return self.session.fetch_all(self.q["subscriber_urls"], {"limit": int(limit)})

    def endpoint_failure(self, endpoint: str, erro: str, limite: int, pausa: float) -> None:
        self.session.execute(self.q["endpoint_failure"], {
            "endpoint": endpoint, "erro": erro[:500], "limite": limite, "pausa": int(pausa)})

    def endpoint_probe_failed(self, endpoint: str, erro: str, maximo: float) -> None:
        self.session.execute(self.q["endpoint_probe_failed"], {
            "endpoint": endpoint, "erro": erro[:500], "maximo": int(maximo)})

    def endpoint_reset(self, endpoint: str) -> None:
        self.session.execute(self.q["endpoint_reset"], {"endpoint": endpoint})

    def endpoint_list(self, limit: int) -> List[dict]:
        return self.session.fetch_all(self.q["endpoint_list"], {"limit": int(limit)})

    def endpoint_list_troubled(self, limit: int) -> List[dict]:
        return self.session.fetch_all(self.q["endpoint_list_troubled"], {"limit": int(limit)})

    def endpoint_count_open(self) -> int:
        return int(self.session.fetch_value(self.q["endpoint_count_open"]) or 0)

    # -- delivery log --------------------------------------------------------------------
    def delivery_insert(self, **row: Any) -> None:
        self.session.execute(self.q["delivery_insert"], row)

    def delivery_list(self, sub_id: str, limit: int = 20) -> List[dict]:
        return self.session.fetch_all(self.q["delivery_list"],
                                      {"subscriber_id": sub_id, "limit": int(limit)})

    def delivery_get(self, delivery_id: int) -> Optional[dict]:
        return self.session.fetch_one(self.q["delivery_get"], {"id": int(delivery_id)})

    def delivery_purge(self, days: int, limit: int) -> int:
        return self.session.execute(self.q["delivery_purge"],
                                    {"days": int(days), "limit": int(limit)})

    def task_insert_redelivery(self, task_id: int, mensagem: str) -> int:
        params = {"id": int(task_id), "mensagem": mensagem}
        if self.session.dialect.returning:
            return int(self.session.fetch_value(self.q["task_insert_redelivery"], params) or 0)
        return int(self.session.insert_lastrowid(self.q["task_insert_redelivery"], params) or 0)


BREAKER_LIMIT = 20  # endpoints listed by status/metrics/dashboard (bounded label set)


def breaker_summary(session: Any, queue_table: str, limit: int = BREAKER_LIMIT
                    ) -> Optional[dict]:
    """{"abertos": n, "endpoints": [...]} of the queue's circuit breakers (failing or
    not closed; at most `limit`), or None when the queue has no breaker table (schema
    before 5: the failed read is rolled back)."""
    store = WebhookStore(session, queue_table, None)
    try:
        rows = store.endpoint_list_troubled(limit)
        open_count = store.endpoint_count_open()
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        if not is_missing_object(exc):
            raise
        session.rollback()
        return None
    return {"abertos": open_count, "endpoints": [
        {"endpoint": r["endpoint"], "estado": r["estado"], "falhas": int(r["falhas"]),
         "pausa_segundos": int(r["pausa"] or 0), "aberto_ate": r["aberto_ate"]}
        for r in rows]}


__all__ = ["BREAKER_LIMIT", "WebhookFeatures", "WebhookStore", "breaker_summary",
           "is_missing_object"]
