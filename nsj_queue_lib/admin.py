"""QueueAdmin: the operator's operations on one queue, for the CLI, dashboards and code.

List tasks, show a chain with all its attempts, redrive a failed, dead or
cancelled chain as a new attempt, cancel a waiting task, pause and resume the
queue, stop its running workers (HALT).  SQL lives in db/sql/<dialect>/admin.sql;
identifiers are validated and quoted, values are bound parameters.

Transactions: on an autocommit connection (the CLI's, or
`QueueAdmin.from_settings`) each write commits at once, atomically.  On a
connection inside a transaction (psycopg2's default) the writes join the
caller's transaction, as `QueueClient` does, and take effect at its commit.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, overload

from nsj_queue_lib.config import Settings, validate_table_name
from nsj_queue_lib.db.control import ControlRow, atomic
from nsj_queue_lib.db.names import control_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.repository import truncate_message
from nsj_queue_lib.db.session import DbSession, session_of
from nsj_queue_lib.engine.base import HALT_PAYLOAD
from nsj_queue_lib.exceptions import (
    ConfigError,
    ControlTableMissing,
    InvalidTaskState,
    LegacyWorkersSeen,
    NotFoundException,
)

logger = logging.getLogger(__name__)

WAITING = ("pendente", "agendada")
RUNNING = "processando"
REDRIVABLE = ("falha", "cancelada")
CANCELADA = "cancelada"
_BOOLEAN_COLUMNS = ("dead", "pub_sub", "reenfileirado", "estouro_tentativas", "pausada",
                    "compat_1_2_2")


class Redrive(NamedTuple):
    """What `QueueAdmin.redrive` did: the attempt's id, and whether it is the attempt
    that waited after a failure, made due now (else a new attempt)."""

    id: int
    antecipada: bool


@overload
def _normalize(row: Dict[str, Any]) -> Dict[str, Any]: ...
@overload
def _normalize(row: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]: ...
def _normalize(row: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """MySQL returns booleans as 0/1: make them bool."""
    if row is None:
        return None
    for key in _BOOLEAN_COLUMNS:
        if row.get(key) is not None:
            row[key] = bool(row[key])
    return row


class QueueAdmin:
    """Operations on one queue table.

    Parameters
    ----------
    bd_conn:
        A DB-API connection (psycopg2, pymysql or mysql-connector-python), an
        object exposing one as `.conn`, or a `DbSession`.
    queue_table:
        The queue table ('tabela' or 'schema.tabela').
    settings:
        The workers' settings (QUEUE_NAME, CLIENT_SERVER_MODE, server address):
        needed by `halt()` except on MySQL native mode; `from_settings` sets them.
    """

    def __init__(self, bd_conn: Any, queue_table: str,
                 settings: Optional[Settings] = None) -> None:
        self.settings = settings
        self.session = session_of(bd_conn)
        # As the database sees it (unquoted PostgreSQL names fold to lower case).
        queue_table = validate_table_name(queue_table, "queue_table", self.session.dialect.name)
        self.queue_table = queue_table
        self.control_table = control_table_name(queue_table)
        self.dialect = self.session.dialect
        self.q = Queries(self.dialect, queue_table, filename="admin.sql")
        self.control = ControlRow(self.session, queue_table, self.q)
        self._own_session = False

    @classmethod
    def from_settings(cls, settings: Settings, queue_table: Optional[str] = None) -> QueueAdmin:
        """Open a session of its own (autocommit) on the database of `settings`; `close()` it."""
        session = DbSession.open(settings, application_name="nsj_queue_lib:admin")
        admin = cls(session, queue_table or settings.queue_table, settings)
        admin._own_session = True
        return admin

    def close(self) -> None:
        """Close the session opened by `from_settings` (a caller's connection is left open)."""
        if self._own_session:
            self.session.close()

    def __enter__(self) -> QueueAdmin:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[None]:
        with atomic(self.session):  # the caller's transaction, if one is open
            yield

    # -- reading ----------------------------------------------------------
    def list_tasks(self, status: Optional[str] = None, processo: Optional[str] = None,
                   chave_externa: Optional[str] = None, tenant: Optional[int] = None,
                   dead: Optional[bool] = None, all_attempts: bool = False,
                   limit: int = 50, before_id: Optional[int] = None,
                   failing: Optional[bool] = None,
                   after_id: Optional[int] = None) -> List[Dict[str, Any]]:
        """Tasks, newest first: the current attempt of each chain, or every attempt.

        Filters left as None are not applied; `before_id` pages backwards
        (pass the smallest id of the previous page); `after_id` bounds the read to ids
        above it; `failing` True: only chains that failed and wait for their next attempt.
        """
        if not isinstance(limit, int) or limit <= 0:
            raise ValueError("limit deve ser um inteiro maior que zero")
        params = {"status": status, "processo": processo, "chave_externa": chave_externa,
                  "tenant": tenant, "dead": dead, "all_attempts": bool(all_attempts),
                  "before_id": before_id, "limit": limit, "failing": failing,
                  "after_id": after_id}
        return [_normalize(r) for r in self.session.fetch_all(self.q["admin_task_list"], params)]

    def max_id(self) -> Optional[int]:
        """The newest task id of the queue (None: empty)."""
        value = self.session.fetch_value(self.q["admin_max_id"])
        return None if value is None else int(value)

    def _root(self, task_id: int) -> Dict[str, Any]:
        row = _normalize(self.session.fetch_one(self.q["admin_task_root"], {"id": task_id}))
        if row is None:
            raise NotFoundException(f"Tarefa {task_id} não encontrada em {self.queue_table}")
        return row

    def show(self, task_id: int) -> Dict[str, Any]:
        """The chain of any of its attempts' ids: every attempt, in order, and its links.

        Returns {"id_inicial", "status" (of the current attempt), "tentativas": [...],
        "cadeia_viva" (for a dead-letter chain, the live chain's id),
        "cadeias_mortas": [ids], "assinaturas": [{id, subscriber_id, status, tentativa}]}.
        Raises NotFoundException for an unknown id.
        """
        root = self._root(task_id)["raiz"]
        attempts = [_normalize(r) for r in
                    self.session.fetch_all(self.q["admin_chain_attempts"], {"root": root})]
        first = attempts[0]
        current = next((a for a in reversed(attempts) if not a["reenfileirado"]), attempts[-1])
        dead = [r["id"] for r in self.session.fetch_all(self.q["admin_dead_chains"],
                                                         {"root": root})]
        subs = (self.session.fetch_all(self.q["admin_subscriber_chains"], {"root": root})
                if first["pub_sub"] else [])
        return {
            "id_inicial": root,
            "status": current["status"],
            "tentativa_atual": current["id"],
            "tentativas": attempts,
            "cadeia_viva": first["live_id"] if first["dead"] else None,
            "cadeias_mortas": dead,
            "assinaturas": subs,
        }

    # -- redrive and cancel ---------------------------------------------
    def retry(self, task_id: int, por: Optional[str] = None) -> int:
        """`redrive`, returning only the attempt's id."""
        return self.redrive(task_id, por).id

    def redrive(self, task_id: int, por: Optional[str] = None) -> Redrive:
        """Redrive a chain that ended in `falha` or `cancelada`: insert a new attempt, due
        now, with `id_anterior` pointing to the attempt it follows (Redrive(id, False)).
        A chain that failed and waits for its next attempt (back-off) has that attempt
        run now instead (Redrive(its id, True)).

        `task_id` may be any attempt of the chain.  For a dead-letter chain the
        live chain it came from (`live_id`) is redriven: the task runs `execute`
        again.  The attempt count goes on (`tentativa + 1`), so when the chain had
        exhausted QUEUE_MAX_RETRY, a new failure sends it to the dead letters again.
        Raises NotFoundException, or InvalidTaskState when the chain is waiting (not
        after a failure), running or succeeded.  Safe under concurrent calls: only one
        new attempt.
        """
        root = self._root(task_id)
        target = root["live_id"] if root["dead"] and root["live_id"] else root["raiz"]
        with self._atomic():
            last = _normalize(self.session.fetch_one(self.q["admin_last_attempt"],
                                                     {"root": target}))
            if last is None:
                raise NotFoundException(f"Tarefa {target} não encontrada em {self.queue_table} "
                                        "(talvez já apagada pelo purge)")
            if last["status"] == "agendada" and self.session.execute(
                    self.q["admin_run_now"], {"id": last["id"], "mensagem": truncate_message(
                        f"Antecipada manualmente{self._by(por)}")}) == 1:
                self._wake_workers()
                logger.info("Tarefa %s: tentativa %s antecipada manualmente%s", target,
                            last["id"], self._by(por))
                return Redrive(int(last["id"]), True)
            if last["status"] not in REDRIVABLE or not self._mark_redrive(last["id"]):
                raise InvalidTaskState(
                    f"Tarefa {target}: a tentativa atual ({last['id']}) está '{last['status']}';"
                    f" só uma tarefa em {' ou '.join(REDRIVABLE)}, ou que aguarda nova "
                    "tentativa após uma falha, pode ser reenfileirada")
            message = truncate_message(f"Reenfileirada manualmente{self._by(por)} após "
                                       f"'{last['status']}' da tentativa {last['id']}")
            new_id = self._insert_redrive(last["id"], message)
        logger.info("Tarefa %s reenfileirada manualmente%s: nova tentativa %s", target,
                    self._by(por), new_id)
        return Redrive(new_id, False)

    def _wake_workers(self) -> None:
        """Tell idle workers that a task is due now (an UPDATE sends no notification; they
        would otherwise wait for the time they armed).  PostgreSQL: NOTIFY on the queue's
        channel, at commit; client/server: through the server; MySQL native workers see
        it at their next look."""
        if self.settings is not None and self.settings.client_server_mode:
            from nsj_queue_lib.engine.socket.notifier import notify_server

            try:
                notify_server(self.settings)
            except Exception as exc:  # the task is due anyway: the next poll finds it
                logger.warning("Aviso aos workers não enviado: %s", exc)
        elif self.dialect.listen_notify:
            self.session.execute("SELECT pg_notify(%(channel)s, '')",
                                 {"channel": self._channel()})

    def _mark_redrive(self, attempt_id: int) -> bool:
        return self.session.execute(self.q["admin_redrive_mark"], {"id": attempt_id}) == 1

    def _insert_redrive(self, attempt_id: int, message: str) -> int:
        params = {"id": attempt_id, "mensagem": message}
        if self.dialect.returning:
            return int(self.session.fetch_value(self.q["admin_redrive_insert"], params))
        return int(self.session.insert_lastrowid(self.q["admin_redrive_insert"], params))

    def cancel(self, task_id: int, motivo: Optional[str] = None,
               por: Optional[str] = None) -> int:
        """Cancel the waiting attempt (`pendente` or `agendada`) of a chain; return its id.

        It becomes `cancelada` and no worker runs it; `retry` can redrive it later.
        A running task cannot be cancelled (InvalidTaskState), nor a finished one.
        """
        root = self._root(task_id)["raiz"]
        last = _normalize(self.session.fetch_one(self.q["admin_last_attempt"], {"root": root}))
        message = truncate_message(f"Cancelada{self._by(por)}" + (f": {motivo}" if motivo else ""))
        with self._atomic():
            done = last is not None and self.session.execute(
                self.q["admin_cancel"], {"id": last["id"], "mensagem": message}) == 1
        if not done:
            status = self.show(root)["status"]
            raise InvalidTaskState(
                f"Tarefa {root}: está '{status}'; só uma tarefa pendente ou agendada pode ser "
                "cancelada" + (" (uma tarefa em execução termina no seu worker)"
                               if status == RUNNING else ""))
        assert last is not None  # (done)
        logger.info("Tarefa %s cancelada%s (tentativa %s)", root, self._by(por), last["id"])
        return int(last["id"])

    @staticmethod
    def _by(por: Optional[str]) -> str:
        return f" por {por}" if por else ""

    # -- periodic tasks ---------------------------------------------------
    def _schedules(self) -> Any:
        from nsj_queue_lib.scheduling.store import ScheduleStore

        return ScheduleStore(self.session, self.queue_table)

    def add_schedule(self, nome: str, processo: str, cron: Optional[str] = None,
                     every: Any = None, payload: Any = None, tz: str = "UTC",
                     catch_up: int = 1, prioridade: Optional[int] = None,
                     por: Optional[str] = None) -> Dict[str, Any]:
        """Create (or replace) the periodic task `nome`: a task of `processo` with `payload`
        at every slot of `cron` (five fields, read in time zone `tz`; needs the extra
        nsj-queue-lib[cron]) or of `every` (seconds, or a text such as '30s', '5m', '1h').
        Workers start it within a second, from its first slot after now.  After downtime
        (or a pause) at most `catch_up` tasks are inserted for the missed slots, the most
        recent ones.  Returns the stored schedule (`proximo`: its next slot, UTC)."""
        from nsj_queue_lib.scheduling.slots import Rule, parse_every

        seconds = every if every is None or isinstance(every, int) else parse_every(str(every))
        rule = Rule(cron=cron, every=seconds, tz=tz or "UTC")
        with self._atomic():
            return self._schedules().add(nome, processo, rule, payload=payload,
                                         catch_up=catch_up, prioridade=prioridade,
                                         por=truncate_message(por, 150) if por else None)

    def list_schedules(self) -> List[Dict[str, Any]]:
        """The periodic tasks, by name, each with `proximo` (next slot, UTC), `regra`,
        `ultimo_slot` and `ultima_tarefa` (the last slot run and its task's id)."""
        return self._schedules().list()

    def remove_schedule(self, nome: str) -> None:
        """Remove the periodic task `nome` (NotFoundException when it does not exist);
        workers stop inserting its tasks within a second (tasks already inserted stay)."""
        with self._atomic():
            self._schedules().remove(nome)

    # -- concurrency limits -----------------------------------------------
    def _limits(self) -> Any:
        from nsj_queue_lib.db.limits import LimitStore

        return LimitStore(self.session, self.queue_table)

    def set_limit(self, processo: str, maximo: int,
                  por: Optional[str] = None) -> Dict[str, Any]:
        """At most `maximo` tasks of `processo` run at once across the whole fleet (native
        PostgreSQL and MySQL workers; client/server workers claim nothing while the queue
        has limits).  Workers follow within about two seconds; tasks running then go on.
        Refused in mixed-fleet mode (1.2.2 workers ignore limits).  Returns {"processo",
        "maximo", "em_execucao"} (tasks of the processo running now)."""
        from nsj_queue_lib.db.repository import TaskRepository

        mixed = TaskRepository(self.session, self.queue_table).queue_mixed_fleet()
        with self._atomic():
            return dict(self._limits().set(processo, maximo,
                                           por=truncate_message(por, 150) if por else None,
                                           mixed_fleet=mixed))

    def list_limits(self) -> List[Dict[str, Any]]:
        """The limits, by processo, each with `maximo` and `em_execucao` (running now)."""
        return list(self._limits().list())

    def clear_limit(self, processo: str) -> None:
        """Remove the limit of `processo` (NotFoundException when it has none)."""
        with self._atomic():
            self._limits().clear(processo)

    # -- pause ------------------------------------------------------------
    def has_control_table(self) -> bool:
        """Whether the queue's control table exists (queues created before 2.1 lack it)."""
        return self.control.exists()

    def pause_state(self, control_known: bool = False) -> Dict[str, Any]:
        """{"pausada": bool, "motivo", "alterado_por", "alterado_em", "controle": bool}.

        "controle" is False when the queue has no control table yet (created by
        db_gen from version 2.1, or by `nsj-queue schema upgrade`): never paused then.
        `control_known`: the caller saw the table before, so its existence is not
        checked again (one statement instead of two; a dropped table raises).
        """
        return self.control.pause_state(control_known)

    def is_paused(self) -> bool:
        """True while the queue is paused (its workers claim nothing)."""
        return bool(self.pause_state()["pausada"])

    def _write_control(self, query: str, params: Dict[str, Any]) -> None:
        self.control.write(query, params)

    def _set_paused(self, paused: bool, motivo: Optional[str], por: Optional[str]) -> None:
        self._write_control("queue_pause_set", {
            "pausada": paused, "motivo": truncate_message(motivo) if motivo else None,
            "por": truncate_message(por, 150) if por else None})

    def pause(self, motivo: Optional[str] = None, por: Optional[str] = None) -> None:
        """Pause the queue: every worker stops claiming from it within a second (the task
        each one is running finishes normally).  Tasks can still be enqueued."""
        self._set_paused(True, motivo, por)
        logger.info("Fila %s pausada%s", self.queue_table, self._by(por))

    def resume(self, por: Optional[str] = None) -> None:
        """Resume a paused queue: its workers claim again within a second."""
        self._set_paused(False, None, por)
        logger.info("Fila %s retomada%s", self.queue_table, self._by(por))

    # -- mixed-fleet mode (1.2.2 workers beside 2.x) -----------------------
    def _channel(self) -> str:
        """The LISTEN channel of the queue's workers (QUEUE_NAME; else the table's name,
        which is what the generated trigger notifies)."""
        if self.settings is not None and self.settings.queue_name and not self._other_queue():
            return self.settings.queue_name
        return self.queue_table.split(".")[-1]

    def compat_state(self) -> Dict[str, Any]:
        """The queue's mixed-fleet mode (engine/fleet_mode.py) and what a look for
        1.2.2 workers sees now: {"aplica", "misto", "gravado", "alterado_em",
        "alterado_por", "sinais", "ocultas"}.  "gravado" is None when the queue keeps no
        value (no row, or a schema before this version): mixed-fleet then."""
        from nsj_queue_lib.compat.coexistence import read_signs

        state: Dict[str, Any] = {"aplica": self.dialect.mixed_fleet, "misto": False,
                                 "gravado": None, "alterado_em": None, "alterado_por": None,
                                 "sinais": [], "ocultas": 0}
        if not state["aplica"]:
            return state
        if self.has_control_table():
            row = self.pause_state(control_known=True)
            state.update(gravado=row.get("compat_1_2_2"),
                         alterado_em=row.get("compat_alterado_em"),
                         alterado_por=row.get("compat_alterado_por"))
        state["misto"] = state["gravado"] is not False
        signs = read_signs(self.session, self.queue_table, self._channel())
        state["sinais"], state["ocultas"] = signs.describe(), signs.hidden
        return state

    def _write_compat(self, mixed: bool, por: Optional[str]) -> None:
        if not self.dialect.mixed_fleet:
            raise ConfigError("O modo de frota mista com a 1.2.2 só existe no PostgreSQL (a "
                              "1.2.2 não roda nativamente no MySQL)")
        *schema, table = self.control_table.split(".")
        missing = not self.has_control_table() or not self.session.fetch_value(
            self.q["queue_compat_column_exists"],
            {"schema": schema[0] if schema else None, "name": table})
        if missing:
            raise ControlTableMissing(
                f"A fila {self.queue_table} não grava o modo de frota mista (esquema anterior "
                "a esta versão): rode `nsj-queue schema upgrade` antes")
        with self._atomic():
            self.session.execute(self.q["queue_compat_set"], {
                "compat": mixed, "por": truncate_message(por, 150) if por else None})

    def compat_on(self, por: Optional[str] = None) -> None:
        """Put the queue in mixed-fleet mode: every 2.x worker also holds 1.2.2's keys
        within about a second (1.2.2 workers may then join the queue)."""
        self._write_compat(True, por)
        logger.info("Fila %s em modo de frota mista com a 1.2.2%s", self.queue_table,
                    self._by(por))

    def compat_off(self, por: Optional[str] = None, force: bool = False) -> List[str]:
        """End the mixed-fleet period: 2.x workers stop holding 1.2.2's keys within about
        a second.  Refused (LegacyWorkersSeen) while a look sees 1.2.2 sessions, recent
        'falha_processando' rows, or sessions this role cannot see; `force` overrides.
        Returns what the look saw."""
        from nsj_queue_lib.compat.coexistence import read_signs

        signs = (read_signs(self.session, self.queue_table, self._channel())
                 if self.dialect.mixed_fleet else None)
        seen = signs.describe() if signs is not None else []
        if signs is not None and signs.hidden:
            seen.append(signs.hidden_text())
        if seen and not force:
            raise LegacyWorkersSeen(
                f"A fila {self.queue_table} continua em modo de frota mista: "
                + "; ".join(seen) + ". Pare os workers 1.2.2 (ou, se já pararam, use "
                "--force)")
        self._write_compat(False, por)
        logger.info("Fila %s fora do modo de frota mista%s%s", self.queue_table,
                    self._by(por), f" (forçado; visto: {'; '.join(seen)})" if seen else "")
        return seen

    # -- halt -------------------------------------------------------------
    def halt(self, por: Optional[str] = None) -> None:
        """Stop every worker of the queue running now: each finishes its task and exits
        cleanly; workers started later are not affected.  PostgreSQL: NOTIFY 'HALT' on
        QUEUE_NAME (at commit, in a caller's transaction); client/server: through the
        server; MySQL native: the request is written to the control table and the
        workers see it within about a second."""
        # without LISTEN/NOTIFY (MySQL native) the workers read the request from the
        # control row
        by_row = not self.dialect.listen_notify
        if by_row and not (self.settings is not None and self.settings.client_server_mode):
            self.control.request_halt(truncate_message(por, 150) if por else None)
        elif self.settings is None:
            raise ConfigError("halt() precisa das configurações dos workers (QUEUE_NAME e, no "
                              "modo cliente/servidor, o servidor): use QueueAdmin.from_settings "
                              "ou passe settings=")
        elif not self.settings.queue_name or self._other_queue():
            # The workers listen on QUEUE_NAME: a table alone does not name their channel.
            raise ConfigError("halt() no PostgreSQL e no modo cliente/servidor vai pelo canal "
                              "QUEUE_NAME dos workers: defina QUEUE_NAME e QUEUE_TABLE da fila "
                              f"{self.queue_table} (QUEUE_TABLE atual: "
                              f"{self.settings.queue_table or 'não definida'})")
        elif self.settings.client_server_mode:
            from nsj_queue_lib.engine.socket.notifier import notify_server

            notify_server(self.settings, payload=HALT_PAYLOAD)  # raises if unreachable
        else:
            from nsj_queue_lib.engine.select import make_backend

            make_backend(self.settings).wake_workers(self.session, HALT_PAYLOAD)
        logger.info("HALT enviado à fila %s%s", self.queue_table, self._by(por))

    def _other_queue(self) -> bool:
        """True when this admin's table is not the settings' QUEUE_TABLE."""
        configured = self.settings.queue_table if self.settings else ""
        try:
            configured = validate_table_name(configured, "QUEUE_TABLE", self.dialect.name)
        except Exception:
            return True
        return configured != self.queue_table

    # -- subscriptions (nsj_queue_lib.pubsub.subscribers) ---------------------------------
    @property
    def subscriber_table(self) -> str:
        """QUEUE_SUBSCRIBER_TABLE of the settings when they are this queue's, else the
        table `schema apply` creates (<fila>_subscriber)."""
        from nsj_queue_lib.config import default_subscriber_table

        configured = self.settings.queue_subscriber_table if self.settings else None
        if configured and not self._other_queue():
            return validate_table_name(configured, "QUEUE_SUBSCRIBER_TABLE", self.dialect.name)
        return default_subscriber_table(self.queue_table)

    def _subscribers(self) -> Any:
        from nsj_queue_lib.db.control import autocommit
        from nsj_queue_lib.pubsub.subscribers import SubscriberAdmin

        own = (autocommit(self.session.conn) and not self.session.in_transaction
               and not self.session.transaction_usable())
        return SubscriberAdmin(self.session, self.queue_table, self.subscriber_table,
                               self.settings, can_probe=own)

    def subscriber_add(self, sub_id: str, processo: str, url: Optional[str] = None,
                       method: str = "POST", headers: Optional[Dict[str, str]] = None,
                       secret: Optional[str] = None, generate_secret: bool = False,
                       tenant: Optional[int] = None,
                       grupo_empresarial: Optional[str] = None) -> Optional[str]:
        """Create a subscription (a webhook with `url`, else a @Subscriber method); return
        the generated secret when `generate_secret` (shown once, never stored in clear
        with WEBHOOK_SECRETS_KEY)."""
        subs = self._subscribers()
        subs.features  # noqa: B018 - probe before the transaction opens
        with self._atomic():
            return subs.add(sub_id, processo, url, method, headers, secret, generate_secret,
                            tenant, grupo_empresarial)

    def subscriber_list(self) -> List[Dict[str, Any]]:
        """Subscriptions (header values that look secret masked; never the secret)."""
        return self._subscribers().list()

    def subscriber_enable(self, sub_id: str) -> None:
        with self._atomic():
            self._subscribers().set_active(sub_id, True)

    def subscriber_disable(self, sub_id: str) -> None:
        with self._atomic():
            self._subscribers().set_active(sub_id, False)

    def subscriber_remove(self, sub_id: str) -> None:
        with self._atomic():
            self._subscribers().remove(sub_id)

    def subscriber_rotate_secret(self, sub_id: str, overlap_seconds: float = 24 * 3600.0,
                                 secret: Optional[str] = None) -> str:
        """New secret (returned); the old one signs beside it for `overlap_seconds`."""
        subs = self._subscribers()
        subs.features  # noqa: B018
        with self._atomic():
            return subs.rotate_secret(sub_id, overlap_seconds, secret)

    def subscriber_reencrypt(self) -> int:
        """Re-encrypt stored secrets with the first key of WEBHOOK_SECRETS_KEY."""
        subs = self._subscribers()
        subs.features  # noqa: B018
        with self._atomic():
            return subs.reencrypt()

    def subscriber_deliveries(self, sub_id: str, limit: int = 20) -> List[Dict[str, Any]]:
        """The last `limit` delivery attempts of a subscription, newest first."""
        return self._subscribers().deliveries(sub_id, limit)

    def subscriber_redeliver(self, delivery_id: int, por: Optional[str] = None) -> int:
        """Deliver again the publication of one delivery-log row; the new task's id."""
        subs = self._subscribers()
        subs.features  # noqa: B018
        with self._atomic():
            new_id, _ = subs.redeliver(delivery_id, por)
            self._wake_workers()
        return new_id

    def webhook_endpoints(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Circuit breaker of each endpoint that failed at least once, at most `limit`
        (those not closed first)."""
        subs = self._subscribers()
        return subs.endpoints(limit) if limit else subs.endpoints()

    def halt_requested_at(self) -> Any:
        """MySQL native mode: the database time of the last HALT request (None: never).
        Needs the control table (`has_control_table()`)."""
        return self.control.halt_requested_at()


__all__ = ["ControlTableMissing", "InvalidTaskState", "LegacyWorkersSeen", "NotFoundException",
           "QueueAdmin", "Redrive"]
