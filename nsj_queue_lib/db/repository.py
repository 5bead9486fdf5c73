"""TaskRepository: one method per named query; no commits, no business rules."""

from __future__ import annotations

import datetime as _dt
from typing import Any, List, Optional, Sequence

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import LockKey
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession

DEFAULT_PRIORITY = 50
MESSAGE_MAX = 500  # length of the mensagem / mensagem_anterior columns

# Task statuses as persisted (the vocabulary of the reference).
AGENDADA = "agendada"
PENDENTE = "pendente"
PROCESSANDO = "processando"
SUCESSO = "sucesso"
FALHA = "falha"


def truncate_message(message: str, limit: int = MESSAGE_MAX) -> str:
    """Fit a message into its column; over-long text keeps its start and ends with '…'."""
    if len(message) <= limit:
        return message
    return message[: limit - 1] + "…"


def _normalize(row: Optional[dict]) -> Optional[dict]:
    if row is None:
        return None
    for key in ("pub_sub", "dead"):
        if key in row and row[key] is not None:
            row[key] = bool(row[key])
    return row


class TaskRepository:
    """Queue-table operations for one queue on one session."""

    def __init__(self, session: DbSession, queue_table: str,
                 subscriber_table: Optional[str] = None) -> None:
        self.session = session
        self.dialect = session.dialect
        self.q = Queries(session.dialect, queue_table, subscriber_table)

    # -- producer ---------------------------------------------------------
    def task_insert(self, **row: Any) -> int:
        if self.dialect.returning:
            return int(self.session.fetch_value(self.q["task_insert"], row))
        return int(self.session.insert_lastrowid(self.q["task_insert"], row))

    def task_insert_many(self, rows: Sequence[dict]) -> List[int]:
        if not rows:
            return []
        if self.dialect.name == "postgres":
            from psycopg2.extras import execute_values

            with self.session.conn.cursor() as cur:
                result = execute_values(
                    cur, self.q["task_insert_many"], rows,
                    template=self.q["task_insert_many_row"], page_size=len(rows), fetch=True,
                )
            return [r[0] for r in result]
        return self._insert_many_mysql(rows)

    def _insert_many_mysql(self, rows: Sequence[dict]) -> List[int]:
        # One multi-row INSERT; MySQL gives the first id and consecutive ids for
        # a single multi-row statement when innodb_autoinc_lock_mode <= 1; read them
        # back by range to be safe with any lock mode.
        cur = self.session.conn.cursor()
        try:
            cur.executemany(self.q["task_insert"], list(rows))
            first = cur.lastrowid
        finally:
            cur.close()
        return list(range(int(first), int(first) + len(rows)))

    def task_list_equivalent(self, **params: Any) -> List[dict]:
        status = params["status"]
        params["status"] = list(status) if self.dialect.name == "postgres" else tuple(status)
        rows = self.session.fetch_all(self.q["task_list_equivalent"], params)
        return [_normalize(r) for r in rows]

    # -- claim / finish ---------------------------------------------------
    def task_claim_locked(self, lock_ns: int) -> Optional[dict]:
        return _normalize(self.session.fetch_one(self.q["task_claim_locked"], {"lock_ns": lock_ns}))

    def task_claim_candidates(self, limit: int) -> List[int]:
        return [r["id"] for r in self.session.fetch_all(self.q["task_claim_candidates"],
                                                        {"limit": limit})]

    def task_mark_processing(self, task_id: int) -> Optional[dict]:
        if self.dialect.returning:
            return _normalize(self.session.fetch_one(self.q["task_mark_processing"],
                                                     {"id": task_id}))
        if self.session.execute(self.q["task_mark_processing"], {"id": task_id}) != 1:
            return None
        return self.task_get(task_id)

    def task_lock_row(self, task_id: int) -> bool:
        return self.session.fetch_one(self.q["task_lock_row"], {"id": task_id}) is not None

    def task_get(self, task_id: int) -> Optional[dict]:
        return _normalize(self.session.fetch_one(self.q["task_get"], {"id": task_id}))

    def task_finish(self, task_id: int, mensagem: str) -> bool:
        params = {"id": task_id, "mensagem": truncate_message(mensagem)}
        return self.session.execute(self.q["task_finish"], params) == 1

    def task_finish_unlock(self, task_id: int, mensagem: str, key: LockKey) -> bool:
        params = {"id": task_id, "mensagem": truncate_message(mensagem),
                  "lock_ns": key[0], "lock_id": key[1]}
        return self.session.fetch_one(self.q["task_finish_unlock"], params) is not None

    def task_fail(self, task_id: int, status: str, mensagem: str, requeue: bool,
                  delay_seconds: float) -> bool:
        params = {"id": task_id, "status": status, "mensagem": truncate_message(mensagem),
                  "requeue": requeue, "delay": delay_seconds}
        return self.session.execute(self.q["task_fail"], params) == 1

    def _insert_select(self, name: str, task_id: int) -> int:
        if self.dialect.returning:
            return int(self.session.fetch_value(self.q[name], {"id": task_id}))
        return int(self.session.insert_lastrowid(self.q[name], {"id": task_id}))

    def task_insert_next_attempt(self, task_id: int) -> int:
        return self._insert_select("task_insert_next_attempt", task_id)

    def task_insert_dead(self, task_id: int) -> int:
        return self._insert_select("task_insert_dead", task_id)

    # -- wake-ups and maintenance ----------------------------------------
    def task_seconds_to_next_due(self) -> Optional[float]:
        value = self.session.fetch_value(self.q["task_seconds_to_next_due"])
        return None if value is None else float(value)

    def task_has_due(self) -> bool:
        return bool(self.session.fetch_value(self.q["task_has_due"]))

    def task_list_running(self, after_id: int, limit: int) -> List[int]:
        rows = self.session.fetch_all(self.q["task_list_running"],
                                      {"after_id": after_id, "limit": limit})
        return [r["id"] for r in rows]

    def task_promote_scheduled(self, limit: int) -> int:
        return self.session.execute(self.q["task_promote_scheduled"], {"limit": limit})

    def task_has_lost_pending(self, seconds: float) -> bool:
        return bool(self.session.fetch_value(self.q["task_has_lost_pending"],
                                             {"seconds": seconds}))

    def task_purge(self, days: int, limit: int) -> int:
        return self.session.execute(self.q["task_purge"], {"days": days, "limit": limit})

    def notify(self, channel: str, payload: str = "") -> None:
        self.session.execute(self.q["notify"], {"channel": channel, "payload": payload})

    # -- pub/sub ----------------------------------------------------------
    def subscriber_fanout(self, publication_id: int) -> int:
        return self.session.execute(self.q["subscriber_fanout"], {"id": publication_id})

    def subscriber_get(self, subscriber_id: str) -> Optional[dict]:
        return self.session.fetch_one(self.q["subscriber_get"], {"id": subscriber_id})


def open_repository(settings: Settings, **connect_kwargs: Any) -> TaskRepository:
    """Open a new session and a repository for the configured queue."""
    session = DbSession.open(settings, **connect_kwargs)
    return TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
