"""Concurrency limits of a queue (`nsj-queue limit`): at most N tasks of a processo at once.

The limits live in `<fila>_limites` (processo, maximo).  Whether a queue has any is a flag
of its control row (PostgreSQL: `<fila>_controle.limites`; MySQL: row id = 4), which the
workers read with the pause flag anyway (runtime/pause.py notes it in the
consumer's `LimitsHint`).
A queue without limits therefore claims as always: same statements, same round trips.

With limits, each worker claims with `LimitedClaim` instead, in a transaction of its own:
the next due row (FOR UPDATE SKIP LOCKED) of a processo not found full; for a limited
processo, one of its `maximo` slots, each a session lock (PostgreSQL advisory lock, MySQL
named lock) that the task holds from its claim until its end (`release`), so no more than
`maximo` tasks of that processo are ever 'processando' across the fleet, and a worker that
dies frees its slot with its session.  A processo found full is skipped at once for the
rest of that claim: the worker takes another processo's task.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from nsj_queue_lib.db.names import limit_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError, FeatureUnavailable, NotFoundException

logger = logging.getLogger(__name__)

MAXIMO_MAX = 10000  # slots of one processo (each a lock key)
PROCESSO_MAX = 250
MIXED_FLEET = (
    "A fila está em modo misto (workers 1.2.2 podem compartilhá-la): limites de concorrência "
    "não valem nesse modo, pois um worker 1.2.2 pega tarefas sem olhar os limites. Desligue o "
    "modo misto com `nsj-queue compat off` quando não houver mais workers 1.2.2.")
NOT_ON_SOCKET = (
    "A fila tem limites de concorrência (nsj-queue limit) ou tarefas com ordering_key, que "
    "o modo cliente/servidor (CLIENT_SERVER_MODE) não aplica: este worker não pega tarefas "
    "enquanto a fila os usar. Use os workers nativos (PostgreSQL ou MySQL) ou remova os "
    "limites com `nsj-queue limit clear`.")
NOT_IN_TRANSACTION_POOL = (
    "A fila tem limites de concorrência (nsj-queue limit) ou tarefas com ordering_key, que o "
    "modo DB_POOL_MODE=transaction não aplica (as vagas dos limites são locks de sessão): "
    "este worker não pega tarefas enquanto a fila os usar. Use workers com conexão direta "
    "(DB_POOL_MODE=session) ou remova os limites com `nsj-queue limit clear`.")


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def slot_namespace(queue_table: str) -> int:
    """The advisory-lock namespace of a queue's slots (int32; not a task's nor an admin
    job's: coordination/keys.py names those, with the same scheme)."""
    schema, _, table = queue_table.rpartition(".")
    canonical = table if schema in ("", "public") else queue_table
    return _int32(zlib.crc32(f"nsj_queue_lib:{canonical}:limit".encode()))


def slot_keys(processo: str, maximo: int) -> List[int]:
    """The lock ids of the `maximo` slots of a processo (two equal ids of two processos only
    make those share a slot: fewer tasks at once, never more)."""
    return [_int32(zlib.crc32(f"{processo}#{k}".encode())) for k in range(maximo)]


class LimitsHint:
    """Whether the queue has limits, and whether a producer used ordering keys, as its
    control row said at the last read (one per consumer: its pause gate writes it, its
    guard reads it).  `active`: the guard claims with `LimitedClaim`."""

    def __init__(self) -> None:
        self.limits = False
        self.ordering = False
        self.fair = False  # QUEUE_FAIR_TENANTS (the worker's setting, not the row's)

    @property
    def active(self) -> bool:
        return self.limits or self.ordering or self.fair

    def note(self, limits: Any, ordering: Any = None) -> None:
        self.limits, self.ordering = bool(limits), bool(ordering)


def _check_processo(processo: Any) -> str:
    if not isinstance(processo, str) or not processo.strip() or len(processo) > PROCESSO_MAX:
        raise ConfigError(f"processo inválido: {processo!r} (de 1 a {PROCESSO_MAX} caracteres)")
    return processo


class LimitStore:
    """The operator's side: set, list, clear (`queue_table` already validated)."""

    def __init__(self, session: DbSession, queue_table: str) -> None:
        self.session = session
        self.queue_table = queue_table
        self.table = limit_table_name(queue_table)
        self.q = Queries(session.dialect, queue_table, filename="limits.sql")

    def set(self, processo: str, maximo: int, por: Optional[str] = None,
            mixed_fleet: bool = False) -> Dict[str, Any]:
        """Create or change the limit of `processo` (in the caller's transaction)."""
        _check_processo(processo)
        if isinstance(maximo, bool) or not isinstance(maximo, int) or not (
                1 <= maximo <= MAXIMO_MAX):
            raise ConfigError(f"limite deve ser um inteiro de 1 a {MAXIMO_MAX}: {maximo!r}")
        if mixed_fleet:
            raise FeatureUnavailable(MIXED_FLEET)
        self.session.execute(self.q["limit_upsert"],
                             {"processo": processo, "maximo": maximo, "por": por})
        self.session.execute(self.q["limit_flag_set"])
        running = int(self.session.fetch_value(self.q["limit_running"],
                                               {"processo": processo}) or 0)
        return {"processo": processo, "maximo": maximo, "em_execucao": running}

    def list(self) -> List[Dict[str, Any]]:
        return [dict(r) for r in self.session.fetch_all(self.q["limit_list"])]

    def overview(self) -> Optional[List[Dict[str, Any]]]:
        """For status, dashboard and metrics: the limits with `em_execucao`; None when the
        queue has no limits table (not upgraded) or it cannot be read."""
        try:
            return self.list()
        except Exception as exc:
            from nsj_queue_lib.exceptions import DatabaseUnavailable

            if isinstance(exc, DatabaseUnavailable):
                raise
            if self.session.in_transaction:
                self.session.rollback()
            return None

    def clear(self, processo: str) -> None:
        _check_processo(processo)
        if self.session.execute(self.q["limit_delete"], {"processo": processo}) != 1:
            raise NotFoundException(f"Processo {processo} não tem limite na fila "
                                    f"{self.queue_table}")
        self.session.execute(self.q["limit_flag_set"])


class LimitedClaim:
    """The limit-aware claim of one worker session (its slots held, by task id).

    `task_lock(task_id)`: MySQL native, the name of the task's named lock (None: batch
    mode, or PostgreSQL, whose statement computes the key from `lock_ns`).
    `slot_name(ns, key)`: MySQL, the named lock of a slot.
    """

    def __init__(self, session: DbSession, queue_table: str, lock_ns: int,
                 task_lock: Optional[Callable[[int], str]] = None,
                 slot_name: Optional[Callable[[int, int], str]] = None) -> None:
        self.session = session
        # PostgreSQL: slots are advisory locks taken in SQL, one ordered pick, RETURNING;
        # MySQL: named locks (GET_LOCK), one pick per waiting status
        self.postgres = session.dialect.advisory_locks
        self.q = Queries(session.dialect, queue_table, filename="limits.sql")
        self.lock_ns = lock_ns
        self.ns = slot_namespace(queue_table)
        self.task_lock = task_lock
        self.slot_name = slot_name
        self.held: Dict[int, Tuple[str, int]] = {}  # task id -> (processo, slot key)
        self.marking: List[int] = []  # ids the last claim tried to mark (their task locks)
        # QUEUE_FAIR_TENANTS: the tenant (its rotation value) this session served last.
        # Fairness only: each worker rotates on its own, the database keeps the claim safe.
        self.last_tenant: Optional[int] = None

    def claim(self, limit: int, batch: bool = False, ordered: bool = False,
              fair: bool = False) -> List[dict]:
        """Up to `limit` due tasks in claim order, each of a processo under its limit (and,
        `ordered`, the first of its ordering key with none running), marked 'processando'
        in the caller's open transaction (the caller commits)."""
        limits = {r["processo"]: int(r["maximo"])
                  for r in self.session.fetch_all(self.q["limit_all"])}
        blocked: List[str] = []
        rows: List[dict] = []
        slot: Optional[int] = None
        self.marking = []
        try:
            while len(rows) < limit:
                slot = None
                row = self._pick(blocked, ordered, self._next_tenant() if fair else None)
                if row is None and fair:
                    row = self._pick(blocked, ordered, None)
                if row is None:
                    break
                processo: Optional[str] = row.get("processo")
                if processo is not None and processo in limits:
                    slot = self._take_slot(processo, limits[processo])
                    if slot is None:
                        blocked.append(processo)  # full: other processos only, at once
                        continue
                self.marking.append(int(row["id"]))
                tarefa = self._mark(row, batch)
                if tarefa is None:  # (its task lock is held elsewhere: a rescue in progress)
                    break
                if slot is not None and processo is not None:
                    self.held[int(tarefa["id"])] = (processo, slot)
                    slot = None
                rows.append(tarefa)
                if fair:
                    self.last_tenant = _rotation(tarefa.get("tenant"))
        except BaseException:
            # The caller rolls back; session locks are not undone by a rollback.
            self._quietly(slot)
            for tarefa in rows:
                held = self.held.pop(int(tarefa["id"]), None)
                self._quietly(held[1] if held else None)
            raise
        if slot is not None:
            self._unlock(slot)
        return rows

    def _quietly(self, slot: Optional[int]) -> None:
        if slot is None:
            return
        try:
            self._unlock(slot)
        except Exception as exc:  # the session is gone (its locks with it) or unusable
            logger.debug("Vaga de limite não liberada após erro: %s", exc)

    def _next_tenant(self) -> Optional[int]:
        """QUEUE_FAIR_TENANTS: the rotation value of the tenant to serve now: the next one
        after the last served among the due tasks of the top priority (wrapping round)."""
        got = self.session.fetch_value(self.q["fair_tenant"], {"last": self.last_tenant})
        return None if got is None else int(got)

    def _pick(self, blocked: Sequence[str], ordered: bool,
              tenant: Optional[int]) -> Optional[dict]:
        from nsj_queue_lib.db.repository import _expand_in, _from_json

        if self.postgres:
            sql = self.q["limit_pick_ordered" if ordered else "limit_pick"]
            if tenant is not None:
                sql = sql.replace("ORDER BY c.prioridade DESC",
                                  f"AND {FAIR_KEY.format(t='c')} = %(tenant)s\n"
                                  " ORDER BY c.prioridade DESC")
            return self.session.fetch_one(sql, {"blocked": list(blocked), "tenant": tenant})
        best: Optional[dict] = None
        for status in ("pendente", "agendada"):
            params: dict = {"status": status}
            sql = self.q["limit_pick"]
            if tenant is not None:
                params["tenant"] = tenant
                sql = sql.replace("/*ordered*/", f"AND {FAIR_KEY.format(t='t')} = %(tenant)s "
                                  "/*ordered*/")
            if ordered:
                sql = sql.replace("/*ordered*/", self.q.parts["part_order_check"])
            if blocked:
                params["blocked"] = list(blocked)
                sql = sql.replace("/*blocked*/", "AND (t.processo IS NULL OR t.processo "
                                  "NOT IN %(blocked)s)")
                sql = _expand_in(sql, params, "blocked")
            got = self.session.fetch_one(sql, params)
            if got is None:
                continue
            row = _from_json(got)
            if best is None or ((-int(row["prioridade"]), row["data_hora"], row["id"])
                                < (-int(best["prioridade"]), best["data_hora"], best["id"])):
                best = row  # (the other stays row-locked until the claim's commit)
        return best

    def _take_slot(self, processo: str, maximo: int) -> Optional[int]:
        mine = {key for p, key in self.held.values() if p == processo}
        keys = [k for k in slot_keys(processo, maximo) if k not in mine]
        if not keys:
            return None
        if self.postgres:
            got = self.session.fetch_value(self.q["limit_slot_take"],
                                           {"keys": keys, "ns": self.ns})
            return None if got is None else int(got)
        assert self.slot_name is not None
        for start in range(0, len(keys), 64):  # one statement per 64 slots
            chunk = keys[start:start + 64]
            params = {f"n{i}": self.slot_name(self.ns, k) for i, k in enumerate(chunk)}
            cases = " ".join(f"WHEN GET_LOCK(%(n{i})s, 0) = 1 THEN {i}"
                             for i in range(len(chunk)))
            got = self.session.fetch_value(f"SELECT CASE {cases} END", params)
            if got is not None:
                return chunk[int(got)]
        return None

    def _mark(self, row: dict, batch: bool) -> Optional[dict]:
        from nsj_queue_lib.db.repository import _normalize

        name = "limit_mark_batch" if batch else "limit_mark"
        if self.postgres:
            return _normalize(self.session.fetch_one(
                self.q[name], {"id": row["id"], "lock_ns": self.lock_ns}))
        params: dict = {"id": row["id"]}
        if not batch:
            assert self.task_lock is not None
            params["lock_name"] = self.task_lock(int(row["id"]))
        if self.session.execute(self.q[name], params) != 1:
            return None
        row["status"] = "processando"
        return row

    def _unlock(self, key: int) -> None:
        if self.postgres:
            self.session.fetch_value(self.q["limit_slot_release"], {"ns": self.ns, "k": key})
        else:
            assert self.slot_name is not None
            self.session.fetch_value("SELECT RELEASE_LOCK(%(n)s)",
                                     {"n": self.slot_name(self.ns, key)})

    def release(self, task_id: int) -> None:
        """The task ended (after its commit or rollback): its slot is free again."""
        slot = self.held.pop(task_id, None)
        if slot is not None:
            self._unlock(slot[1])

    def release_all(self) -> None:
        """Batch mode, after the batch's commit or rollback; and after a failed claim."""
        for task_id in list(self.held):
            self.release(task_id)

    def forget(self, task_ids: Sequence[int]) -> None:
        """A claim that failed: the slots of its tasks (taken, not undone by the rollback)."""
        for task_id in task_ids:
            self.release(task_id)


# QUEUE_FAIR_TENANTS: a task's tenant as a rotation value (NULL as the smallest bigint).
FAIR_KEY = "coalesce({t}.tenant, -9223372036854775807)"
TENANT_NULL = -9223372036854775807


def _rotation(tenant: Any) -> int:
    return TENANT_NULL if tenant is None else int(tenant)


ORDER_SETTLE = 3.0  # seconds: FULL_READ_EVERY of runtime/pause.py plus a margin
ORDERING_KEY_MAX = 250


def check_ordering_key(key: Any, where: str = "") -> str:
    prefix = f"{where}: " if where else ""
    if not isinstance(key, str) or not key:
        raise ValueError(f"{prefix}ordering_key deve ser um texto não vazio")
    if len(key) > ORDERING_KEY_MAX:
        raise ValueError(f"{prefix}ordering_key tem {len(key)} caracteres; o máximo é "
                         f"{ORDERING_KEY_MAX}")
    return key


def insert_ordered(session: DbSession, queue_table: str, row: Dict[str, Any]) -> int:
    """insert_task(ordering_key=...): the task with `row["chave_ordem"]`, in the caller's
    transaction.  The queue's first ordered insert also sets the control row's flag (the
    workers then claim order-aware); until every worker has read it (ORDER_SETTLE seconds)
    the new tasks are not due yet."""
    import datetime as _dt

    from nsj_queue_lib.db.repository import _utc_naive

    q = Queries(session.dialect, queue_table, filename="limits.sql")
    state = session.fetch_one(q["order_state"]) or {}
    if state.get("misto"):
        raise FeatureUnavailable(
            "A fila está em modo misto (workers 1.2.2 podem compartilhá-la): a execução "
            "ordenada (ordering_key) não vale nesse modo, pois um worker 1.2.2 pega tarefas "
            "sem olhar a ordem. Desligue o modo misto com `nsj-queue compat off` quando não "
            "houver mais workers 1.2.2.")
    since = state.get("desde")
    if since is None:
        if session.dialect.returning:
            since = session.fetch_value(q["order_flag_set"])
        else:
            session.execute(q["order_flag_set"])
        if since is None:
            since = (session.fetch_one(q["order_state"]) or {}).get("desde")
    params = dict(row)
    settle = since + _dt.timedelta(seconds=ORDER_SETTLE) if since is not None else None
    if session.dialect.returning:
        params["settle"] = settle
        return int(session.fetch_value(q["task_insert_ordered"], params))
    params["data_hora"] = _utc_naive(params.get("data_hora"))
    params["settle"] = _utc_naive(settle)
    return int(session.insert_lastrowid(q["task_insert_ordered"], params))


def ordering_overview(session: DbSession, queue_table: str) -> Optional[Dict[str, int]]:
    """{"chaves": ordering keys with unfinished tasks, "tarefas": those tasks,
    "tenants_devidos": tenants with due tasks (QUEUE_FAIR_TENANTS rotates over them)}; None when
    the queue has no chave_ordem column (not upgraded) or it cannot be read."""
    try:
        row = session.fetch_one(Queries(session.dialect, queue_table,
                                        filename="limits.sql")["order_overview"]) or {}
    except Exception as exc:
        from nsj_queue_lib.exceptions import DatabaseUnavailable

        if isinstance(exc, DatabaseUnavailable):
            raise
        if session.in_transaction:
            session.rollback()
        return None
    tenants = session.fetch_value(Queries(session.dialect, queue_table,
                                          filename="limits.sql")["tenant_overview"])
    return {"chaves": int(row.get("chaves") or 0), "tarefas": int(row.get("tarefas") or 0),
            "tenants_devidos": int(tenants or 0)}
