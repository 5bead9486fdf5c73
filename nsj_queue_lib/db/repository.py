"""TaskRepository: one method per named query; no commits, no business rules."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import re
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from nsj_queue_lib.db import claimed_row
from nsj_queue_lib.db.claim_position import ClaimPosition
from nsj_queue_lib.db.control import FleetMode, read_stored_mode
from nsj_queue_lib.db.queries import TAREFA_COLUMNS, TAREFA_TIMESTAMPS, Queries, raw_queries
from nsj_queue_lib.db.server_version import (
    LOCK_WAIT_SINGLESTORE,
    NOWAIT,
    SKIP_LOCKED,
    session_row_lock_mode,
)
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import DatabaseUnavailable, FeatureUnavailable
from nsj_queue_lib.text import clean, safe_text, to_str

if TYPE_CHECKING:
    from nsj_queue_lib.engine.keys import LockKey

logger = logging.getLogger(__name__)

DEFAULT_PRIORITY = 50
MYSQL_INSERT_CHUNK = 500  # rows per multi-row INSERT (keeps under max_allowed_packet)
_PARAM = re.compile(r"%\((\w+)\)s")
ROW_LOCK_WAIT = 1  # seconds the rescue's fence waits where NOWAIT is missing (the minimum)
MESSAGE_MAX = 500  # length of the mensagem / mensagem_anterior columns

# Task statuses as persisted (the vocabulary of the reference).
AGENDADA = "agendada"
PENDENTE = "pendente"
PROCESSANDO = "processando"
SUCESSO = "sucesso"
FALHA = "falha"


_BULK_COLUMNS = ("origem", "destino", "processo", "chave_externa", "payload", "payload_hash",
                 "tenant", "grupo_empresarial", "pub_sub", "prioridade", "data_hora")


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _sql_timestamp(value: Optional[_dt.datetime]) -> str:
    """A timestamptz (or NULL) as SQL text built from an integer only."""
    if value is None:
        return "NULL"
    micros = (value - _EPOCH) // _dt.timedelta(microseconds=1)
    return f"(timestamptz 'epoch' + {int(micros)} * interval '1 microsecond')"


def truncate_message(message: str, limit: int = MESSAGE_MAX) -> str:
    """Fit a message into its column: never fails (any value becomes text), NUL
    removed, lone surrogates escaped, over-long text cut keeping its start and
    ending with '… [N caracteres]' (N: the full length)."""
    return safe_text(message, limit)


@overload
def _normalize(row: dict) -> dict: ...
@overload
def _normalize(row: None) -> None: ...
@overload
def _normalize(row: Optional[dict]) -> Optional[dict]: ...
def _normalize(row: Optional[dict]) -> Optional[dict]:
    if row is None:
        return None
    for key in ("pub_sub", "dead"):
        if key in row and row[key] is not None:
            row[key] = bool(row[key])
    return row


def _from_json(row: dict) -> dict:
    """A `tarefa_json` row (MySQL: a JSON array in TAREFA_COLUMNS order) as the dict the
    column form gives."""
    return _from_values(json.loads(row["tarefa_json"]))


def _from_values(values: list) -> dict:
    """The values of a `tarefa_json` array as a `tarefa` dict: timestamps, which JSON
    carries as text ('YYYY-MM-DD HH:MM:SS.ffffff'), back to naive datetimes.  Values after
    the row's own (a statement's additions) are left out."""
    tarefa = dict(zip(TAREFA_COLUMNS, values))
    for col in TAREFA_TIMESTAMPS:
        if tarefa[col] is not None:
            tarefa[col] = _dt.datetime.fromisoformat(tarefa[col])
    return _normalize(tarefa)


def _utc_naive(value: Any) -> Any:
    """MySQL DATETIME(6) columns hold naive UTC: convert an aware datetime to it.

    A naive datetime is taken as UTC already (the drivers drop tzinfo silently).
    """
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        return value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return value


def _row_lock_busy(exc: BaseException) -> bool:
    """A MySQL row-lock wait that ended without the lock: 1205 (lock wait timeout; also
    MariaDB's NOWAIT) or 3572 (MySQL's NOWAIT).  The connection stays usable."""
    code = getattr(exc, "errno", None) or (exc.args[0] if exc.args else None)
    return isinstance(code, int) and code in (1205, 3572)


def _bind_in(params: dict, name: str) -> List[str]:
    """The list `params[name]` as the parameters name_0, name_1, ... (their keys)."""
    values = list(params.pop(name))
    keys = [f"{name}_{i}" for i in range(len(values))]
    params.update(zip(keys, values))
    return keys


def _expand_in(sql: str, params: dict, name: str) -> str:
    """MySQL: turn `IN %(name)s` into `IN (%(name_0)s, ...)` (mysql-connector binds no
    tuples); values stay parameters.  An empty list matches nothing."""
    keys = _bind_in(params, name)
    placeholders = ", ".join(f"%({k})s" for k in keys) or "NULL"
    return sql.replace(f"%({name})s", f"({placeholders})")


class ClaimCall(NamedTuple):
    """A claim statement of task_claim_locked, built and not sent (TaskRepository.claim_call)."""

    name: str  # prepared statement name
    sql: str
    params: dict
    lean: bool  # the bare UPDATE (no probe row when nothing is claimed)


class TaskRepository:
    """Queue-table operations for one queue on one session."""

    def __init__(self, session: DbSession, queue_table: str,
                 subscriber_table: Optional[str] = None, *,
                 legacy: Union[bool, FleetMode] = False) -> None:
        """`legacy`: whether 1.2.2 workers may share the queue (the queue's mode, followed
        as it changes, or a fixed flag: engine/fleet_mode.py); while they may, the
        claim, the promotion and the fan-out use their *_compat statements (PostgreSQL)."""
        self.session = session
        self.queue_table = queue_table
        self.fleet = legacy if isinstance(legacy, FleetMode) else FleetMode.fixed(legacy)
        self._mixed_fleet = session.dialect.mixed_fleet
        self.dialect = session.dialect
        self.q = Queries(session.dialect, queue_table, subscriber_table)
        self._step: Optional[int] = None  # MySQL auto_increment_increment, read once
        self._last_message: Optional[Tuple[str, Any, str]] = None  # (text, encoding, stored)
        self._finish_mark: Dict[int, str] = {}  # task_finish_release_mark's SQL by id count
        # PostgreSQL: the next-due probe answered by the last claim that found nothing
        self._claim_probe: Optional[Tuple[Optional[float]]] = None
        self._claim_besides: Optional[Tuple[Optional[float]]] = None
        # PostgreSQL: where this session's claims and idle probes start reading
        # (db/claim_position.py), for the claims that read from one (part_claim_pick);
        # MySQL's claim is another module's.
        self.position: Optional[ClaimPosition] = (
            ClaimPosition() if "part_claim_pick" in self.q.parts else None)
        # PostgreSQL: whether a claim that holds no listener turn must also answer the idle
        # probe when it finds nothing (take_empty_claim_due).  The consumer clears it when
        # it waits with the listener turn (its claims outside the turn never read that
        # answer): those claims are then the bare UPDATE (task_claim_locked, lean).
        self.empty_claim_probe = True
        self._claim_sql: Dict[Tuple[str, bool, bool, int], Tuple[str, str]] = {}
        # PostgreSQL: the per-task claim returns its row as one JSON value (None: not
        # decided yet; db/claimed_row.py)
        self._json_claim: Optional[bool] = None

    @property
    def legacy(self) -> bool:
        """Mixed-fleet mode now (PostgreSQL): 1.2.2's keys are held too.  Never read yet
        (no claim of a worker did; in-process tools): read once on this session."""
        if not self._mixed_fleet:
            return False
        if self.fleet.unread:
            self.fleet.note(read_stored_mode(self.session, self.queue_table))
        return self.fleet.mixed

    # -- producer ---------------------------------------------------------
    def task_insert(self, **row: Any) -> int:
        if self.dialect.returning:
            return int(self.session.fetch_value(self.q["task_insert"], row))
        row["data_hora"] = _utc_naive(row.get("data_hora"))
        return int(self.session.insert_lastrowid(self.q["task_insert"], row))

    def task_insert_unique(self, **row: Any) -> int:
        """Insert the task unless an unfinished task holds row['chave_unica']; the id of
        the new task or of that one.  A concurrent transaction holding the key makes this
        wait for its end (the unique index, not a lock of ours)."""
        if not self.dialect.returning:
            row["data_hora"] = _utc_naive(row.get("data_hora"))
        for _ in range(3):  # (the holder may finish between the two statements: insert again)
            if self.dialect.returning:
                new = self.session.fetch_value(self.q["task_insert_unique"], row)
            else:
                new = self.session.insert_lastrowid(self.q["task_insert_unique"], row)
            if new:
                return int(new)
            existing = self.session.fetch_value(self.q["task_unique_existing"],
                                                {"chave_unica": row["chave_unica"]})
            if existing is not None:
                return int(existing)
            if self.queue_mixed_fleet():
                raise FeatureUnavailable(
                    "A fila está em modo misto (workers 1.2.2 podem compartilhá-la): tarefas "
                    "únicas (unique_key) não são garantidas nesse modo, pois um worker 1.2.2 "
                    "cria a nova tentativa sem a chave. Desligue o modo misto com `nsj-queue "
                    "compat off` quando não houver mais workers 1.2.2.")
        raise RuntimeError("chave única disputada: tente de novo")  # pragma: no cover

    def queue_mixed_fleet(self) -> bool:
        """Whether the queue is in mixed-fleet mode (1.2.2 workers may share it)."""
        return bool(self.session.fetch_value(self.q["queue_mixed_fleet"]))

    def task_insert_many(self, rows: Sequence[dict]) -> List[int]:
        if not rows:
            return []
        if self.dialect.array_params:
            columns = {key: [row[key] for row in rows] for key in _BULK_COLUMNS}
            return [r["id"] for r in self.session.fetch_all(self.q["task_insert_many"], columns)]
        return self._insert_many_mysql(rows)

    def _insert_many_mysql(self, rows: Sequence[dict]) -> List[int]:
        # One multi-row INSERT per chunk ("simple insert": InnoDB reserves its ids in one
        # block, so they are lastrowid + k * auto_increment_increment).
        step = self._autoinc_step()
        head, row_sql = self.q["task_insert_many"].split("\nVALUES ", 1)
        ids: List[int] = []
        for start in range(0, len(rows), MYSQL_INSERT_CHUNK):
            chunk = rows[start:start + MYSQL_INSERT_CHUNK]
            values, params = [], {}
            for k, row in enumerate(chunk):
                values.append(_PARAM.sub(rf"%(\1_{k})s", row_sql))
                for key in _BULK_COLUMNS:
                    value = row.get(key)
                    params[f"{key}_{k}"] = _utc_naive(value) if key == "data_hora" else value
            sql = head + "\nVALUES " + ",\n".join(values)
            first = int(self.session.insert_lastrowid(sql, params))
            ids.extend(first + k * step for k in range(len(chunk)))
        return ids

    def _autoinc_step(self) -> int:
        if self._step is None:
            self._step = int(self.session.fetch_value("SELECT @@auto_increment_increment") or 1)
        return self._step

    def task_list_equivalent(self, **params: Any) -> List[dict]:
        sql = self.q["task_list_equivalent"]
        if self.dialect.array_params:
            params["status"] = list(params["status"])
        else:
            sql = _expand_in(sql, params, "status")
        rows = self.session.fetch_all(sql, params)
        return [_normalize(r) for r in rows]

    # -- claim / finish ---------------------------------------------------
    def task_claim_locked(self, lock_ns: int, limit: int = 1, *, unlock: Optional[int] = None,
                          turn: Optional[Tuple[int, int, int]] = None,
                          keep: bool = False, legacy: Optional[bool] = None) -> List[dict]:
        """PostgreSQL: claim up to `limit` due tasks, each advisory-locked by this session.

        In the same statement: `unlock` (a one-bigint key, or None) is released whatever
        the outcome, and `turn` (a two-int32 key held by this session; limit 1 only) is
        released when a task was claimed, with `keep` only when another task is due too
        (`take_claim_besides` then gives the seconds to the next due task but the one
        claimed).  `turn` is (namespace, turn id, hand-over id): see the SQL.  Each
        returned row has "nsjq_turn_released".  `legacy`: take 1.2.2's keys too (None:
        as the queue's mode says now)."""
        claim = self.claim_call(lock_ns, limit, unlock=unlock, turn=turn, keep=keep,
                                legacy=legacy)
        rows = self.session.fetch_all_prepared(claim.name, claim.sql, claim.params)
        return self.claimed_rows(claim, rows)

    def claim_call(self, lock_ns: int, limit: int = 1, *, unlock: Optional[int] = None,
                   turn: Optional[Tuple[int, int, int]] = None, keep: bool = False,
                   legacy: Optional[bool] = None) -> ClaimCall:
        """The statement of task_claim_locked (same arguments), not sent: for a caller that
        sends it itself (with a COMMIT: PgGuard's claim-ahead), then gives its rows to
        `claimed_rows`."""
        limit = int(limit)
        if limit < 1 or (turn is not None and limit != 1):
            raise ValueError("limit inválido para o claim")
        legacy = self.legacy if legacy is None else legacy
        query = "task_claim_locked_compat" if legacy else "task_claim_locked"
        params: Dict[str, Any] = {
            "lock_ns": lock_ns, "unlock": unlock,
            "turn_ns": turn[0] if turn else None, "turn_id": turn[1] if turn else None,
            "hand_id": turn[2] if turn else None, "keep": bool(keep and turn)}
        position = self._position()
        params.update(position.claim_params())
        params["due_from"] = position.probe_from()
        lean = turn is None and not self.empty_claim_probe
        name, sql = self._claim_statement(query, params["pos_from"] is None, lean, limit)
        return ClaimCall(name, sql, params, lean)

    def claim_ahead_ready(self) -> bool:
        """Whether a claim built now sends nothing before it (no xmin-horizon read due,
        the row's form decided), so that it can be built inside a task's transaction for
        its COMMIT."""
        return (self.position is not None and self._json_claim is not None
                and not self.position.pin_check_due())

    def _claims_json(self) -> bool:
        """Whether the per-task claim returns its row as one JSON value: decided once,
        from the table's column types (db/claimed_row.py)."""
        if self._json_claim is None:
            rows = self.session.fetch_all(
                raw_queries(self.dialect, "catalog.sql")["catalog_tarefa_types"],
                {"table": self.dialect.quote_table(self.queue_table)})
            self._json_claim = claimed_row.json_safe((r["name"], r["type"]) for r in rows)
            if not self._json_claim:
                logger.info("Fila %s: colunas de tipos diferentes dos do DDL; o claim lê a "
                            "linha coluna a coluna", self.queue_table)
        return self._json_claim

    def claimed_rows(self, claim: ClaimCall, rows: List[dict]) -> List[dict]:
        """The `tarefa` dicts of a claim's rows (task_claim_locked's answer), the claim
        position moved and the idle probe kept (see take_empty_claim_due)."""
        self._claim_probe = self._claim_besides = None
        if not claim.lean and len(rows) == 1 and rows[0]["id"] is None:
            # nothing claimed: the probe's row
            value = rows[0]["nsjq_next_due"]
            self._claim_probe = (None if value is None else float(value),)
            return []
        keep = claim.params["keep"]
        for row in rows:
            value = row.pop("nsjq_next_due", None)
            if keep:
                self._claim_besides = (None if value is None else float(value),)
        if claim.name.endswith("_j"):
            rows = [self._decoded(r) for r in rows]
        else:
            rows = [_normalize(r) for r in rows]
        assert self.position is not None
        self.position.note(rows)
        return rows

    def task_locks_release_stale(self, lock_ns: int, keep: Sequence[int] = (),
                                 keep_raw: Sequence[int] = ()) -> int:
        """PostgreSQL, after a failed claim: release (once each) the task locks this
        session holds for tasks not in `keep` (the ones it runs) and, in compat mode, the
        1.2.2 raw keys of this queue's tasks not in `keep_raw`; the number released."""
        params = {"lock_ns": lock_ns, "legacy": self.legacy,
                  "keep_ns": [int(i) & 0xFFFFFFFF for i in keep],
                  "keep_raw": [int(i) for i in keep_raw]}
        rows = self.session.fetch_all(self.q["task_locks_release_stale"], params)
        return sum(1 for r in rows if r["released"])

    def _decoded(self, row: dict) -> dict:
        """A claimed row of the JSON form as the `tarefa` dict (the statement's own
        nsjq_* columns kept); a value the parser does not take: the row as it is now, read
        in the column form (it is this session's, 'processando')."""
        try:
            tarefa = claimed_row.tarefa_from_json(row.pop("tarefa_json"))
        except (ValueError, TypeError):
            tarefa = self.task_get(row["id"]) or {}
        if "nsjq_turn_released" in row:
            tarefa["nsjq_turn_released"] = row["nsjq_turn_released"]
        return tarefa

    def take_empty_claim_due(self) -> Optional[Tuple[Optional[float]]]:
        """What task_seconds_to_next_due would answer, as read by the last claim of
        task_claim_locked when it found nothing (a 1-tuple), once; None when that claim
        got tasks, or after it was taken (the caller then probes)."""
        probe, self._claim_probe = self._claim_probe, None
        return probe

    def take_claim_besides(self) -> Optional[Tuple[Optional[float]]]:
        """After a claim of task_claim_locked with `keep` that got a task: the seconds to
        the next due task but that one, as read by the claim (a 1-tuple; its value None:
        no other task waits), once; None otherwise."""
        besides, self._claim_besides = self._claim_besides, None
        return besides

    def _claim_statement(self, query: str, full: bool, lean: bool,
                         limit: int) -> Tuple[str, str]:
        """(prepared statement name, SQL) of a claim of task_claim_locked(_compat): `full`
        from the index start (part_claim_pick_full*), `lean` without the main SELECT of
        part_claim_locked_tail (no listener turn, no probe: the CTE's UPDATE alone; each
        execution of the generic plan initialises every node of the tail's unexecuted
        probes), `limit` written in.  Built once each."""
        key = (query, full, lean, limit)
        got = self._claim_sql.get(key)
        if got is None:
            name = "nsjq_claim_compat" if query.endswith("_compat") else "nsjq_claim"
            sql = self.q[query]
            if full:
                # (the pick swapped before the limit is written in: the parts hold %(limit)s)
                sql, name = self._from_start(sql, name, {"pos_from": None},
                                             query.endswith("_compat"))
            if limit == 1:
                sql = self._one_row_target(sql)
            if lean:
                head, tail = "WITH c AS (\n", "\n)\n" + self.q.parts["part_claim_locked_tail"]
                if not (sql.startswith(head) and sql.endswith(tail)):
                    raise AssertionError("claim sem a forma WITH c AS (...) tail")
                sql, name = sql[len(head):-len(tail)], f"{name}_lean"
            name = f"{name}_{limit}"
            if self._claims_json():
                returning = "RETURNING " + self.q.tarefa_cols
                if returning not in sql:
                    raise AssertionError("claim sem RETURNING {tarefa_cols}")
                sql = sql.replace(returning, "RETURNING " + self.q.claimed_json)
                name += "_j"
            # The limit is part of the statement (one prepared statement per limit): see
            # the SQL.
            got = self._claim_sql[key] = (name, sql.replace("%(limit)s", str(limit)))
        return got

    def _one_row_target(self, sql: str) -> str:
        """A one-row claim finds its row by `t.id = (pick)`, not `t.id = ANY(ARRAY(pick))`.
        The claim is a prepared statement: its generic plan, made once per session, was
        costed for an array of unknown length, so on a queue table that was small or never
        analyzed when it was made (a new or quiet queue) it updated through a sequential
        scan of the whole table, kept until the next ANALYZE; the pickup of a task then
        grew with the table (#23).  Equality with one value on the primary key plans as
        an index scan whatever the table's size."""
        parts = self.q.parts
        for pick in ("part_claim_pick", "part_claim_pick_full", "part_claim_pick_compat",
                     "part_claim_pick_full_compat"):
            target = f"t.id = ANY(ARRAY({parts[pick]}))"
            if target in sql:
                return sql.replace(target, f"t.id = ({parts[pick]})")
        raise AssertionError("claim sem a forma t.id = ANY(ARRAY(pick))")

    def _from_start(self, sql: str, name: str, params: dict,
                    legacy: bool) -> Tuple[str, str]:
        """A claim from the index start runs the single ordered scan (part_claim_pick_full*),
        in a prepared statement of its own: its plan never depends on position values."""
        if params["pos_from"] is not None:
            return sql, name
        pick = "part_claim_pick_compat" if legacy else "part_claim_pick"
        parts = self.q.parts
        return sql.replace(parts[pick], parts[pick.replace("pick", "pick_full")]), f"{name}_full"

    def task_claim_batch(self, limit: int, lock_ns: int) -> List[dict]:
        """Batch mode: claim up to `limit` due tasks inside the caller's transaction, in
        claim order (priority, then age, then id).  PostgreSQL: one statement (with
        transaction-level advisory locks); MySQL: the rows locked with SKIP LOCKED, then
        marked 'processando' (two statements, no named locks)."""
        if not self.dialect.advisory_locks:  # (PostgreSQL's claim takes them in its SQL)
            rows = self.task_claim_skip_locked(limit, max(16, 4 * limit))
            if rows:
                params: dict = {"ids": [r["id"] for r in rows]}
                sql = _expand_in(self.q["task_mark_processing_batch"], params, "ids")
                self.session.execute(sql, params)
                for row in rows:
                    row["status"] = "processando"
        else:
            legacy = self.legacy
            sql = self.q["task_claim_batch_compat"] if legacy else self.q["task_claim_batch"]
            position = self._position()
            params = {"lock_ns": lock_ns, "limit": limit, **position.claim_params()}
            sql, _ = self._from_start(sql, "", params, legacy)
            rows = [_normalize(r) for r in self.session.fetch_all(sql, params)]
            position.note(rows)
        rows.sort(key=lambda r: (-int(r["prioridade"]), r["data_hora"], r["id"]))
        return rows

    def task_claim_skip_locked(self, limit: int, candidates: int) -> List[dict]:
        """MySQL native: lock up to `limit` due rows no other claim holds (in a transaction)."""
        rows = self.session.fetch_all_prepared("nsjq_claim_skip_locked",
                                               self.q["task_claim_skip_locked"],
                                               {"limit": limit, "candidates": candidates})
        return [_from_json(r) for r in rows]

    def task_claim_ahead_pending(self, limit: int) -> Tuple[List[dict], bool]:
        """MySQL native claim-ahead: up to `limit` due 'pendente' rows locked as
        task_claim_skip_locked would (in a transaction), and whether a row was found while
        an 'agendada' task is due (then only task_claim_skip_locked gives the claim order;
        its locks on these rows end with the transaction)."""
        found = [json.loads(r["tarefa_json"]) for r in self.session.fetch_all_prepared(
            "nsjq_claim_ahead_pending", self.q["task_claim_ahead_pending"], {"limit": limit})]
        # (the 'agendada' check is the array's value after the row's: see the SQL)
        scheduled = any(values[len(TAREFA_COLUMNS)] for values in found)
        return [_from_values(values) for values in found], scheduled

    def task_mark_processing_locked(self, ids: Sequence[int], lock_prefix: str) -> int:
        """MySQL native: named lock + 'processando' for the locked rows; how many changed."""
        params: dict = {"ids": list(ids), "lock_prefix": lock_prefix}
        sql = _expand_in(self.q["task_mark_processing_locked"], params, "ids")
        return self.session.execute(sql, params)

    def task_list_processing(self, ids: Sequence[int]) -> List[int]:
        params: dict = {"ids": list(ids)}
        sql = _expand_in(self.q["task_list_processing"], params, "ids")
        return [r["id"] for r in self.session.fetch_all(sql, params)]

    def task_unclaim(self, task_id: int) -> bool:
        """MySQL native: a task claimed ahead and not run goes back to 'pendente'."""
        return self.session.execute(self.q["task_unclaim"], {"id": task_id}) == 1

    def task_finish_release(self, task_id: int, mensagem: str, lock_name: str) -> bool:
        """MySQL native: mark 'sucesso' and release the task's named lock."""
        params = {"id": task_id, "mensagem": self._message(mensagem), "lock_name": lock_name}
        return self.session.execute_prepared("nsjq_finish_release", self.q["task_finish_release"],
                                             params) == 1

    def task_finish_release_mark(self, task_id: int, mensagem: str, lock_name: str,
                                 ids: Sequence[int], lock_prefix: str) -> int:
        """MySQL native: task_finish_release of `task_id` and task_mark_processing_locked
        of `ids` in one statement; how many rows changed (both together)."""
        params: dict = {"id": task_id, "mensagem": self._message(mensagem),
                        "lock_name": lock_name, "ids": [task_id, *ids],
                        "lock_prefix": lock_prefix}
        # Prepared on MariaDB (parsed once per connection), one statement per number of ids
        # (its text is expanded once per number too: this runs for every task).
        count = len(ids) + 1
        sql = self._finish_mark.get(count)
        if sql is None:
            sql = self._finish_mark[count] = _expand_in(self.q["task_finish_release_mark"],
                                                        params, "ids")
        else:
            _bind_in(params, "ids")
        return self.session.execute_prepared(f"nsjq_finish_mark_{count}", sql, params)

    def task_lock_waiting(self, ids: Sequence[int]) -> List[dict]:
        """Client/server: the rows of `ids` still waiting, row-locked (in a transaction),
        as `tarefa` dicts."""
        params: dict = {"ids": list(ids)}
        if self.dialect.array_params:  # (else the rows come as JSON: sql/mysql)
            return [_normalize(r) for r in self.session.fetch_all(self.q["task_lock_waiting"],
                                                                  params)]
        sql = _expand_in(self.q["task_lock_waiting"], params, "ids")
        return [_from_json(r) for r in self.session.fetch_all(sql, params)]

    def task_finish_mark(self, task_id: int, mensagem: str, ids: Sequence[int]) -> int:
        """Client/server: task_finish of `task_id` and the 'processando' mark of `ids`
        (locked by task_lock_waiting) in one statement; rows changed (both)."""
        params: dict = {"id": task_id, "mensagem": self._message(mensagem),
                        "ids": [task_id, *ids]}
        if self.dialect.array_params:
            return self.session.execute(self.q["task_finish_mark"], params)
        return self.session.execute(_expand_in(self.q["task_finish_mark"], params, "ids"),
                                    params)

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

    def task_try_lock_row(self, task_id: int) -> bool:
        """Lock a 'processando' row without waiting; False if it is locked or not running.

        In the form the server has (db/server_version.py): SKIP LOCKED; else NOWAIT; else a plain
        FOR UPDATE waiting one second at most.  A held row is then an error 1205."""
        mode = session_row_lock_mode(self.session)
        params = {"id": task_id}
        if mode == SKIP_LOCKED:
            return self.session.fetch_one(self.q["task_try_lock_row"], params) is not None
        try:
            if mode == NOWAIT:
                return self.session.fetch_one(self.q["task_try_lock_row_nowait"],
                                              params) is not None
            names = (("session_lock_wait_get_singlestore", "session_lock_wait_set_singlestore")
                     if mode == LOCK_WAIT_SINGLESTORE
                     else ("session_lock_wait_get", "session_lock_wait_set"))
            kept = self.session.fetch_value(self.q[names[0]])
            self.session.execute(self.q[names[1]], {"seconds": ROW_LOCK_WAIT})
            try:
                return self.task_lock_row(task_id)
            finally:
                self.session.execute(self.q[names[1]], {"seconds": kept})
        except Exception as exc:
            if _row_lock_busy(exc):
                return False  # held by a running task transaction
            raise

    def task_get(self, task_id: int) -> Optional[dict]:
        return _normalize(self.session.fetch_one(self.q["task_get"], {"id": task_id}))

    def _message(self, mensagem: str) -> str:
        # (the last text and its result kept: a worker stores the same success message
        # task after task; the result depends only on the text and the connection's
        # encoding (psycopg2's `encoding`), checked at every call)
        encoding = getattr(self.session.conn, "encoding", None)
        last = self._last_message
        if (last is not None and type(mensagem) is str and last[0] == mensagem
                and last[1] == encoding):
            return last[2]
        stored = truncate_message(self.session.storable(clean(to_str(mensagem))))
        if type(mensagem) is str:
            self._last_message = (mensagem, encoding, stored)
        return stored

    def task_finish(self, task_id: int, mensagem: str) -> bool:
        params = {"id": task_id, "mensagem": self._message(mensagem)}
        return self.session.execute(self.q["task_finish"], params) == 1

    def task_finish_many(self, ids: Sequence[int], mensagens: Sequence[str]) -> int:
        """Batch mode: mark the tasks `ids` 'sucesso', each with its message (same order),
        in one statement; how many rows it marked (only rows still 'processando')."""
        if not ids:
            return 0
        texts = [self._message(m) for m in mensagens]
        if self.dialect.array_params:
            return self.session.execute(self.q["task_finish_many"],
                                        {"ids": list(ids), "mensagens": texts})
        params: dict = {}
        sql = self.q["task_finish_many"]
        for name, values in (("ids", ids), ("mensagens", texts)):
            keys = [f"{name}_{i}" for i in range(len(values))]
            params.update(zip(keys, values))
            sql = sql.replace(f"%({name})s", ", ".join(f"%({k})s" for k in keys))
        return self.session.execute(sql, params)

    def task_finish_unlock(self, task_id: int, mensagem: str, key: LockKey) -> bool:
        params = {"id": task_id, "mensagem": self._message(mensagem),
                  "lock_ns": key[0], "lock_id": key[1]}
        sql = self.q["task_finish_unlock"]
        return self.session.fetch_one_prepared("nsjq_finish", sql, params) is not None

    def finish_at_commit_call(self, task_id: int, mensagem: str,
                              key: LockKey) -> Tuple[str, str, dict]:
        """PostgreSQL: (prepared name, SQL, parameters) of task_finish_unlock_at_commit,
        not sent: the caller sends it with the task's COMMIT (PgGuard)."""
        params = {"id": task_id, "mensagem": self._message(mensagem),
                  "lock_ns": key[0], "lock_id": key[1]}
        return "nsjq_finish_at_commit", self.q["task_finish_unlock_at_commit"], params

    def task_fail(self, task_id: int, status: str, mensagem: str, requeue: bool,
                  delay_seconds: float) -> bool:
        params = {"id": task_id, "status": status, "mensagem": self._message(mensagem),
                  "requeue": requeue, "delay": delay_seconds}
        return self.session.execute(self.q["task_fail"], params) == 1

    def task_defer(self, task_id: int, mensagem: str, delay_seconds: float) -> bool:
        """Put a running attempt back, due in `delay_seconds`, keeping its `tentativa`."""
        params = {"id": task_id, "mensagem": self._message(mensagem), "delay": delay_seconds}
        return self.session.execute(self.q["task_defer"], params) == 1

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
        """Seconds until the next waiting task is due (<= 0: due now; None: none waits).
        PostgreSQL: from this session's claim position when one applies (see
        `idle_wait_cap`)."""
        if self.position is None:
            value = self.session.fetch_value(self.q["task_seconds_to_next_due"])
        else:
            value = self.session.fetch_value(self.q["task_seconds_to_next_due_from"],
                                             {"due_from": self._position().probe_from()})
        return None if value is None else float(value)

    def idle_probe_sql(self) -> Tuple[str, str]:
        """PostgreSQL: (seconds to the next due task, more than one task due) as SQL with
        no parameter, from this session's claim position when one applies, for a statement
        that cannot bind values (the listener turn's DO block): the position is written
        as an integer number of microseconds."""
        since = _sql_timestamp(self._position().probe_from())
        return (self.q["task_seconds_to_next_due_from"].replace("%(due_from)s", since),
                self.q["task_due_beyond_one"].replace("%(due_from)s", since))

    def _position(self) -> ClaimPosition:
        """The session's claim position, its view of the xmin horizon refreshed when due
        (one statement every FULL_SCAN_EVERY seconds at most)."""
        position = self.position
        assert position is not None
        if position.pin_check_due():
            position.pin_checked(bool(self.session.fetch_value(
                self.q["xmin_horizon_held"], {"age": position.pin_age})))
        return position

    def idle_wait_cap(self) -> Optional[float]:
        """The longest an idle wait may last after the last probe (None: no limit): a
        probe from the claim position does not see a task due before it, so the worker
        claims from the index start by then (db/claim_position.py)."""
        return None if self.position is None else self.position.wait_cap()

    def server_free_connections(self) -> Tuple[int, int, int]:
        """(connections free now, connections an ordinary role may hold at all, the
        server's max_connections)."""
        row = self.session.fetch_one(self.q["server_free_connections"]) or {}
        return (int(row.get("livres") or 0), int(row.get("utilizaveis") or 0),
                int(row.get("maximo") or 0))

    def statement_binlog(self) -> bool:
        """MySQL: whether the server writes its binary log in STATEMENT format (InnoDB then
        refuses writes at READ COMMITTED); False when the server cannot tell (no such
        variables).  A lost connection still raises DatabaseUnavailable."""
        try:
            return bool(self.session.fetch_value(self.q["server_binlog_statement"]))
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            logger.debug("Formato do log binário não lido: %s", exc)
            return False

    def task_has_due(self) -> bool:
        return bool(self.session.fetch_value(self.q["task_has_due"]))

    def task_list_running(self, after_id: int, limit: int) -> List[int]:
        rows = self.session.fetch_all(self.q["task_list_running"],
                                      {"after_id": after_id, "limit": limit})
        return [r["id"] for r in rows]

    def task_promote_scheduled(self, limit: int) -> int:
        if self.legacy:
            return self.session.execute(self.q["task_promote_scheduled_compat"],
                                        {"limit": limit})
        return self.session.execute(self.q["task_promote_scheduled"], {"limit": limit})

    def task_has_lost_pending(self, seconds: float) -> bool:
        return bool(self.session.fetch_value(self.q["task_has_lost_pending"],
                                             {"seconds": seconds}))

    def task_purge(self, days: int, limit: int) -> int:
        return self.session.execute(self.q["task_purge"], {"days": days, "limit": limit})

    # -- admin jobs' last runs --------------------------------------------
    def admin_slot_get(self, rotina: str) -> Optional[_dt.datetime]:
        """The slot (naive UTC minute) job `rotina` last ran for; None: never."""
        return self.session.fetch_value(self.q["admin_slot_get"], {"rotina": rotina})

    def admin_slot_set(self, rotina: str, horario: _dt.datetime, por: str) -> None:
        """Record that `rotina` ran for slot `horario` (the caller holds the job's admin
        lock, so no other worker writes this row meanwhile)."""
        params = {"rotina": rotina, "horario": horario, "por": por[:150]}
        if not self.session.execute(self.q["admin_slot_update"], params):
            self.session.execute(self.q["admin_slot_insert"], params)

    # -- pub/sub ----------------------------------------------------------
    def subscriber_fanout(self, publication_id: int) -> int:
        if self.legacy:
            return self.session.execute(self.q["subscriber_fanout_compat"],
                                        {"id": publication_id})
        return self.session.execute(self.q["subscriber_fanout"], {"id": publication_id})

    def subscriber_get(self, subscriber_id: str) -> Optional[dict]:
        row = self.session.fetch_one(self.q["subscriber_get"], {"id": subscriber_id})
        if row is not None and row.get("ativo") is not None:
            row["ativo"] = bool(row["ativo"])  # MySQL: TINYINT(1)
        return row
