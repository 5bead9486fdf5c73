"""QueueClient: the producer SDK.

Inserts run on the caller's connection and never commit or roll back: the task
belongs to the caller's transaction, so it exists only if that transaction
commits.  Importing this module needs no environment variable.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from nsj_queue_lib.config import validate_table_name
from nsj_queue_lib.db.payload import legacy_text, payload_hash
from nsj_queue_lib.db.repository import DEFAULT_PRIORITY, MYSQL_INSERT_CHUNK, TaskRepository
from nsj_queue_lib.db.session import session_of
from nsj_queue_lib.task_input import (
    BIGINT_MAX,
    BIGINT_MIN,
    INT_MAX,
    INT_MIN,
    TEXT_FIELDS,
    SizeRule,
    check_int,
    check_text,
    payload_text,
    row_size,
)

DEFAULT_EQUIVALENT_STATUS = ("sucesso", "pendente", "agendada")
UNIQUE_KEY_MAX = 250  # the chave_unica column
_TASK_FIELDS = {"origem", "destino", "processo", "chave_externa", "payload", "tenant",
                "grupo_empresarial", "data_hora", "prioridade", "unique_key", "ordering_key"}


class QueueClient:
    """Enqueue tasks in a queue table, inside the caller's transaction.

    Parameters
    ----------
    bd_conn:
        An open DB-API connection (psycopg2, pymysql or mysql-connector-python),
        or an object exposing one as `.conn` (such as the worker's `bd_conn`).
    queue_table:
        The queue table ('tabela' or 'schema.tabela').
    queue_subscriber_table:
        The subscriber table, for pub/sub queues (optional).
    """

    def __init__(self, bd_conn: Any, queue_table: str,
                 queue_subscriber_table: Optional[str] = None) -> None:
        session = session_of(bd_conn)
        dialect = session.dialect
        # Names as the database sees them: 'public.Fila_Teste' is public.fila_teste on
        # PostgreSQL (as it was with 1.2.2, which sent the name unquoted).
        queue_table = validate_table_name(queue_table, "queue_table", dialect.name)
        if queue_subscriber_table:
            queue_subscriber_table = validate_table_name(
                queue_subscriber_table, "queue_subscriber_table", dialect.name)
        self._repo = TaskRepository(session, queue_table, queue_subscriber_table)
        self._session = session
        self._sizes = SizeRule(session)
        self.queue_table = queue_table
        self.queue_subscriber_table = queue_subscriber_table

    def _codec(self) -> str:
        """The Python codec of the connection's encoding (utf-8 when it does not tell)."""
        try:
            return self._session._codec()
        except Exception:
            return "utf-8"

    def _row(self, origem: Optional[str], destino: Optional[str], processo: Optional[str],
             chave_externa: Optional[str], payload: Any, tenant: Optional[int],
             grupo_empresarial: Optional[str], data_hora: Optional[_dt.datetime],
             prioridade: Optional[int], pub_sub: bool,
             where: str = "") -> Tuple[Dict[str, Any], int]:
        """The row to insert and its size estimate, checked by the rule of
        nsj_queue_lib/task_input.py (InvalidTaskInput, a ValueError, or PayloadTooLarge,
        before the database sees anything)."""
        codec = self._codec()
        try:
            text = payload_text(payload, codec)
            row: Dict[str, Any] = {"origem": origem, "destino": destino, "processo": processo,
                   "chave_externa": chave_externa, "grupo_empresarial": grupo_empresarial}
            for name in TEXT_FIELDS:
                check_text(name, row[name], codec)
            if prioridade is not None and (not isinstance(prioridade, int)
                                           or isinstance(prioridade, bool)):
                raise TypeError("prioridade deve ser um inteiro")
            check_int("prioridade", prioridade, INT_MIN, INT_MAX, "int")
            check_int("tenant", tenant, BIGINT_MIN, BIGINT_MAX, "bigint")
        except (ValueError, TypeError) as exc:
            if not where:
                raise
            raise type(exc)(f"{where}: {exc}") from None
        row["payload"] = text
        size = row_size(row)
        self._sizes.check(row, size, where)
        row.update({
            "payload": text, "payload_hash": payload_hash(text),
            "tenant": tenant, "pub_sub": pub_sub,
            "prioridade": DEFAULT_PRIORITY if prioridade is None else prioridade,
            "data_hora": data_hora,
        })
        return row, size

    def insert_task(self, origem: Optional[str], destino: Optional[str], processo: Optional[str],
                    chave_externa: Optional[str], payload: Any, tenant: Optional[int] = None,
                    grupo_empresarial: Optional[str] = None,
                    data_hora: Optional[_dt.datetime] = None,
                    prioridade: Optional[int] = None,
                    unique_key: Optional[str] = None,
                    ordering_key: Optional[str] = None) -> int:
        """Enqueue a simple task; return its id.

        A dict (or list) payload is stored as JSON text.  `data_hora` schedules
        the task for later; a larger `prioridade` runs first (default 50).  On
        MySQL the columns hold UTC: an aware `data_hora` is converted, a naive
        one is taken as UTC.  `unique_key`: while a task of the queue with that key
        is not finished (waiting, scheduled, running, or failed with a retry to
        come), nothing is inserted and that task's id is returned.  `ordering_key`: tasks
        with the same key run one at a time, in the order they were inserted (a failing
        task's retries keep its place; its dead letter releases the key).
        """
        row = self._row(origem, destino, processo, chave_externa, payload, tenant,
                        grupo_empresarial, data_hora, prioridade, False)[0]
        return self._insert(row, unique_key, ordering_key=ordering_key)

    def _insert(self, row: Dict[str, Any], unique_key: Optional[str], where: str = "",
                ordering_key: Optional[str] = None) -> int:
        if ordering_key is not None:
            from nsj_queue_lib.db.limits import check_ordering_key, insert_ordered

            if unique_key is not None:
                raise ValueError(f"{where + ': ' if where else ''}unique_key e ordering_key "
                                 "juntos não são aceitos na mesma tarefa")
            row["chave_ordem"] = check_ordering_key(ordering_key, where)
            check_text("ordering_key", ordering_key, self._codec())
            return insert_ordered(self._repo.session, self._repo.queue_table, row)
        if unique_key is None:
            return self._repo.task_insert(**row)
        row["chave_unica"] = self._unique_key(unique_key, where)
        return self._repo.task_insert_unique(**row)

    def _unique_key(self, key: Any, where: str = "") -> str:
        """A checked unique_key (the insert refuses it in mixed-fleet mode: a 1.2.2
        worker's retry does not carry the key, so the guarantee would not hold)."""
        prefix = f"{where}: " if where else ""
        if not isinstance(key, str) or not key:
            raise ValueError(f"{prefix}unique_key deve ser um texto não vazio")
        if len(key) > UNIQUE_KEY_MAX:
            raise ValueError(f"{prefix}unique_key tem {len(key)} caracteres; o máximo é "
                             f"{UNIQUE_KEY_MAX}")
        check_text("unique_key", key, self._codec())
        return key

    def insert_task_pub_sub(self, origem: Optional[str], destino: Optional[str],
                            processo: str, chave_externa: Optional[str], payload: Any,
                            tenant: Optional[int] = None,
                            grupo_empresarial: Optional[str] = None,
                            data_hora: Optional[_dt.datetime] = None,
                            prioridade: Optional[int] = None,
                            unique_key: Optional[str] = None) -> int:
        """Publish a task to every active subscriber of `processo`; return the publication id.

        `unique_key` applies to the publication: until it is fanned out (or finishes
        otherwise), another publication with the key returns its id."""
        row = self._row(origem, destino, processo, chave_externa, payload, tenant,
                        grupo_empresarial, data_hora, prioridade, True)[0]
        return self._insert(row, unique_key)

    def insert_task_webhook(self, origem: Optional[str], destino: Optional[str],
                            processo: str, chave_externa: Optional[str], payload: Any,
                            tenant: Optional[int] = None,
                            grupo_empresarial: Optional[str] = None,
                            data_hora: Optional[_dt.datetime] = None,
                            prioridade: Optional[int] = None,
                            unique_key: Optional[str] = None) -> int:
        """Publish a task whose subscribers are webhooks (a pub/sub publication)."""
        return self.insert_task_pub_sub(origem, destino, processo, chave_externa, payload,
                                        tenant, grupo_empresarial, data_hora, prioridade,
                                        unique_key=unique_key)

    def insert_tasks(self, tasks: Iterable[Dict[str, Any]], pub_sub: bool = False) -> List[int]:
        """Enqueue many tasks in one round trip; return their ids in order.

        Each dict takes the keyword arguments of `insert_task` (`origem`,
        `destino`, `processo`, `chave_externa`, `payload`, and optionally
        `tenant`, `grupo_empresarial`, `data_hora`, `prioridade`, `unique_key`,
        `ordering_key`).  A batch where some task has a `unique_key` or an `ordering_key`
        is inserted one statement per task (in order; a unique key repeated in the batch
        gives the same id).
        """
        rows, sizes, keys = [], [], []
        for index, task in enumerate(tasks):
            unknown = set(task) - _TASK_FIELDS
            if unknown:
                raise TypeError(f"campos desconhecidos em insert_tasks: {sorted(unknown)}")
            row, size = self._row(task.get("origem"), task.get("destino"), task.get("processo"),
                                  task.get("chave_externa"), task.get("payload"),
                                  task.get("tenant"), task.get("grupo_empresarial"),
                                  task.get("data_hora"), task.get("prioridade"), pub_sub,
                                  where=f"insert_tasks: tarefa {index}")
            rows.append(row)
            sizes.append(size)
            keys.append((task.get("unique_key"), task.get("ordering_key")))
        if any(key != (None, None) for key in keys):
            return [self._insert(row, key[0], where=f"insert_tasks: tarefa {index}",
                                 ordering_key=key[1])
                    for index, (row, key) in enumerate(zip(rows, keys))]
        # Rows beyond the server's statement limit together go in as many statements as
        # needed (in order, in the caller's transaction); usually one call.
        ids: List[int] = []
        for part in self._sizes.batches(sizes, MYSQL_INSERT_CHUNK):
            ids.extend(self._repo.task_insert_many(rows[part.start:part.stop]))
        return ids

    def list_equivalent_task(self, origem: Optional[str], destino: Optional[str],
                             processo: Optional[str], chave_externa: Optional[str],
                             payload: Any, tenant: Optional[int] = None,
                             grupo_empresarial: Optional[str] = None,
                             status: Sequence[str] = DEFAULT_EQUIVALENT_STATUS
                             ) -> List[Dict[str, Any]]:
        """Tasks already queued with the same payload, chave_externa, origem, destino,
        processo, tenant and grupo_empresarial, in one of `status`.

        `payload` may be a dict or a str (a dict is serialised as `insert_task` does;
        tasks a 1.2.2 producer queued with the same dict, serialised its way, are found
        too).
        """
        hashes = [payload_hash(payload_text(payload, self._codec()))]
        legacy = payload_hash(legacy_text(payload))
        if legacy not in hashes:
            hashes.append(legacy)
        found: Dict[Any, Dict[str, Any]] = {}
        for digest in hashes:
            for row in self._repo.task_list_equivalent(
                    payload_hash=digest, chave_externa=chave_externa, status=list(status),
                    origem=origem, destino=destino, processo=processo, tenant=tenant,
                    grupo_empresarial=grupo_empresarial):
                found[row["id"]] = row
        return [found[k] for k in sorted(found)]
