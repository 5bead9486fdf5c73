"""What the dashboard shows, read with the named queries of db/sql/<dialect>/dashboard.sql.

One database session (autocommit) shared by the request threads under a lock,
reopened after a lost connection.  Chain details and the actions (redrive,
cancel, pause, resume) are QueueAdmin's (nsj_queue_lib.admin): the same code as
the command line.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.config import Settings, validate_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable, NotFoundException
from nsj_queue_lib.observability.status import fleet_state

T = TypeVar("T")

COUNT_CAP = 100_000  # counts stop here ("100000+"): bounded cost on a huge backlog
DEAD_LIMIT = 50
FAILURES_LIMIT = 30  # chains in the list of recent failures
FAILURES_WINDOW = 20000  # ... looked for among this many newest task ids
PAYLOAD_SLICE = 1024 * 1024  # characters read per query when /payload streams a payload
# A payload's root and length, and one slice of it: the same text in every dialect
# (substr and char_length exist in PostgreSQL and MySQL).
_PAYLOAD_LENGTH = ("SELECT r.id AS raiz, char_length(r.payload) AS n FROM {table} t "
                   "JOIN {table} r ON r.id = coalesce(t.id_inicial, t.id) WHERE t.id = %(id)s")
_PAYLOAD_SLICE = "SELECT substr(payload, %(start)s, %(n)s) AS parte FROM {table} WHERE id = %(id)s"
QUEUES_TTL = 30.0  # seconds the list of queues is cached


class DashboardData:
    """Reads for the pages, and the admin operations, on the database of `settings`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._session: Optional[DbSession] = None
        self._queues: List[str] = []
        self._queues_at = 0.0

    # -- session ----------------------------------------------------------------
    def _run(self, work: Callable[[DbSession], T]) -> T:
        with self._lock:
            for attempt in range(2):
                if self._session is None:
                    self._session = DbSession.open(self.settings,
                                                   application_name="nsj_queue_lib:dashboard")
                try:
                    return work(self._session)
                except DatabaseUnavailable:
                    self._session.close()
                    self._session = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def _q(self, session: DbSession, table: str) -> Queries:
        return Queries(session.dialect, table, filename="dashboard.sql")

    # -- queues ---------------------------------------------------------------------
    def queues(self, refresh: bool = False) -> List[str]:
        """'schema.tabela' of every queue table of the database (cached for a while)."""
        if refresh or not self._queues or time.monotonic() - self._queues_at > QUEUES_TTL:
            def read(s: DbSession) -> List[str]:
                rows = s.fetch_all(self._q(s, "x")["dash_queues"])
                return [f"{r['esquema']}.{r['tabela']}" for r in rows]

            self._queues, self._queues_at = self._run(read), time.monotonic()
        return self._queues

    def check_queue(self, table: str) -> str:
        """`table` if it is one of the queues found (else NotFoundException)."""
        try:
            validate_table_name(table, "fila")
        except ConfigError:
            raise NotFoundException(f"Fila inválida: {table!r}") from None
        if table not in self.queues() and table not in self.queues(refresh=True):
            raise NotFoundException(f"Fila {table} não encontrada neste banco")
        return table

    def summary(self, table: str) -> Dict[str, Any]:
        """Counts of waiting/running tasks, the last hour, dead letters, oldest due, pause
        and mixed-fleet mode."""
        def read(s: DbSession) -> Dict[str, Any]:
            q = self._q(s, table)
            status_q = Queries(s.dialect, table, filename="status.sql")
            counts = {r["status"]: int(r["n"]) for r in
                      s.fetch_all(q["dash_active_counts"], {"cap": COUNT_CAP})}
            minutes: Dict[str, List[int]] = {"sucesso": [0] * 60, "falha": [0] * 60,
                                             "cancelada": [0] * 60}
            for r in s.fetch_all(q["dash_last_hour"]):
                m = int(r["minuto"])
                if 0 <= m < 60 and r["status"] in minutes:
                    minutes[r["status"]][59 - m] += int(r["n"])
            oldest = s.fetch_one(status_q["metrics_oldest_due"])
            dead = int(s.fetch_value(q["dash_dead_count"], {"cap": COUNT_CAP}) or 0)
            pause = QueueAdmin(s, table).pause_state()
            from nsj_queue_lib.scheduling.store import ScheduleStore

            schedules = ScheduleStore(s, table).overview()
            from nsj_queue_lib.db.limits import LimitStore

            limits = LimitStore(s, table).overview()
            from nsj_queue_lib.db.limits import ordering_overview

            return {"agendamentos": (schedules or {}).get("agendamentos", []),
                    "limites": limits or [],
                    "ordenacao": ordering_overview(s, table),
                    "fila": table, "contagens": counts, "ultima_hora": minutes,
                    "mais_antiga_devida": oldest, "mortas": dead, "pausa": pause,
                    # the mixed-fleet mode with 1.2.2, from the same control row
                    "frota_mista": fleet_state(s.dialect, pause),
                    "agora": s.fetch_value(q["dash_now"])}

        return self._run(read)

    def dead_letters(self, table: str, limit: int = DEAD_LIMIT) -> List[Dict[str, Any]]:
        """Dead-letter chains not yet resolved, newest first, with the live chain's error."""
        def read(s: DbSession) -> List[Dict[str, Any]]:
            q = self._q(s, table)
            rows = s.fetch_all(q["dash_dead_letters"], {"limit": limit})
            for r in rows:
                live = s.fetch_one(q["dash_live_last_error"], {"root": r["live_id"]})
                r["erro_original"] = live["mensagem"] if live else None
            return rows

        return self._run(read)

    def failures(self, table: str, limit: int = FAILURES_LIMIT) -> List[Dict[str, Any]]:
        """Recent failures of live chains, newest first: chains that ended in 'falha' and
        chains waiting for their next attempt after a failure ("aguardando": True).
        Dead-letter chains are listed by `dead_letters`."""
        def read(s: DbSession) -> List[Dict[str, Any]]:
            admin = QueueAdmin(s, table)
            # Among the newest FAILURES_WINDOW ids only: a bounded range of the primary
            # key, whatever the size of the table.
            newest = admin.max_id()
            after = None if newest is None else newest - FAILURES_WINDOW
            waiting = admin.list_tasks(failing=True, dead=False, limit=limit, after_id=after)
            ended = admin.list_tasks(status="falha", dead=False, limit=limit, after_id=after)
            for r in waiting:  # the failure's message is in the waiting attempt's row
                r["aguardando"] = True
                r["mensagem"] = r["mensagem_anterior"]
            for r in ended:
                r["aguardando"] = False
            return sorted(waiting + ended, key=lambda r: r["id"], reverse=True)[:limit]

        return self._run(read)

    def chain(self, table: str, task_id: int) -> Dict[str, Any]:
        return self._run(lambda s: QueueAdmin(s, table).show(task_id))

    def payload_length(self, table: str, task_id: int) -> Tuple[int, Optional[int]]:
        """(id of the chain's first attempt, where the payload lives; its length in
        characters, None without a payload).  NotFoundException for an unknown id."""
        def read(s: DbSession) -> Tuple[int, Optional[int]]:
            row = s.fetch_one(_PAYLOAD_LENGTH.format(table=s.dialect.quote_table(table)),
                              {"id": task_id})
            if row is None:
                raise NotFoundException(f"Tarefa {task_id} não encontrada em {table}")
            return int(row["raiz"]), None if row["n"] is None else int(row["n"])

        return self._run(read)

    def payload_slices(self, table: str, root: int, length: int,
                       size: int = PAYLOAD_SLICE) -> Iterator[str]:
        """The payload of attempt `root` in slices of `size` characters, one query each
        (the session is free between two slices)."""
        for start in range(1, length + 1, size):
            def read_slice(s: DbSession, start: int = start) -> Any:
                return s.fetch_value(_PAYLOAD_SLICE.format(table=s.dialect.quote_table(table)),
                                     {"id": root, "start": start, "n": size})

            part = self._run(read_slice)
            if not part:
                return
            yield part

    # -- actions (QueueAdmin, shared with the command line) -------------------------
    def retry(self, table: str, task_id: int, por: str) -> Tuple[int, bool]:
        """QueueAdmin.retry: (attempt id, True for a new attempt, False when the attempt
        that waited after a failure was made due now)."""
        def work(s: DbSession) -> Tuple[int, bool]:
            done = QueueAdmin(s, table).redrive(task_id, por=por)
            return done.id, not done.antecipada

        return self._run(work)

    def cancel(self, table: str, task_id: int, por: str) -> int:
        return self._run(lambda s: QueueAdmin(s, table).cancel(task_id, por=por))

    def pause(self, table: str, por: str) -> None:
        self._run(lambda s: QueueAdmin(s, table).pause(motivo="pelo painel", por=por))

    def resume(self, table: str, por: str) -> None:
        self._run(lambda s: QueueAdmin(s, table).resume(por=por))

    # -- webhooks (nsj_queue_lib.pubsub.subscribers, shared with the command line) --------
    def webhooks(self, table: str, per_subscriber: int = 5) -> Dict[str, Any]:
        """Subscriptions (never a secret), breakers and the last deliveries of each."""
        def read(s: DbSession) -> Dict[str, Any]:
            from nsj_queue_lib.pubsub.subscribers import SubscriberError
            from nsj_queue_lib.pubsub.webhook_store import is_missing_object

            admin = QueueAdmin(s, table, self.settings)
            try:
                subs = admin.subscriber_list()
                deliveries = {}
                for sub in subs[:50]:
                    try:
                        deliveries[sub["id"]] = admin.subscriber_deliveries(sub["id"],
                                                                            per_subscriber)
                    except SubscriberError:
                        break
                return {"assinaturas": subs, "entregas": deliveries,
                        "disjuntores": admin.webhook_endpoints(), "erro": None}
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                if not is_missing_object(exc):
                    raise
                s.rollback()
                return {"assinaturas": [], "entregas": {}, "disjuntores": [],
                        "erro": f"Sem tabela de assinaturas {admin.subscriber_table}."}

        return self._run(read)

    def redeliver(self, table: str, delivery_id: int, por: str) -> int:
        return self._run(lambda s: QueueAdmin(s, table, self.settings).subscriber_redeliver(
            delivery_id, por=por))
