"""The queue's schedules in `<fila>_agenda`: add, list, remove, and the workers' tick.

Exactly one task per slot: a worker takes a schedule's due slots by moving `proximo` on
from the value it read (a conditional UPDATE) and inserts their tasks in that same
transaction, so two workers never both take a slot and a rolled-back insert gives the
slot back.  A slot's task is an ordinary task: processo and payload of the schedule,
chave_externa 'agenda:<nome>', data_hora the slot's time.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any, Dict, List, Optional

from nsj_queue_lib.db.names import schedule_table_name
from nsj_queue_lib.db.payload import payload_hash
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.repository import DEFAULT_PRIORITY, TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import (
    ConfigError,
    DatabaseUnavailable,
    FeatureUnavailable,
    NotFoundException,
)
from nsj_queue_lib.scheduling.hint import SCHEDULE_ORIGIN
from nsj_queue_lib.scheduling.slots import UTC, Rule
from nsj_queue_lib.task_input import INT_MAX, INT_MIN, check_int, check_text, payload_text

logger = logging.getLogger(__name__)

NAME_MAX = 100
ORIGEM = SCHEDULE_ORIGIN
CATCH_UP_MAX = 1000


def utc(value: Any) -> Optional[_dt.datetime]:
    """A datetime from the database as aware UTC (MySQL's naive ones hold UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def rule_of(row: Dict[str, Any]) -> Rule:
    every = row.get("intervalo_segundos")
    return Rule(cron=row.get("cron") or None, every=None if every is None else int(every),
                tz=row.get("fuso") or "UTC")


class ScheduleStore:
    """The schedules of one queue on one session (`queue_table` already validated)."""

    def __init__(self, session: DbSession, queue_table: str) -> None:
        self.session = session
        self.queue_table = queue_table
        self.table = schedule_table_name(queue_table)
        self.q = Queries(session.dialect, queue_table, filename="schedule.sql")

    # -- the operator's side ------------------------------------------------
    def add(self, nome: str, processo: str, rule: Rule, payload: Any = None,
            catch_up: int = 1, prioridade: Optional[int] = None,
            por: Optional[str] = None) -> Dict[str, Any]:
        """Create or replace schedule `nome` (in the caller's transaction).  Its first slot
        after now is taken here: that slot's task is inserted at once, due at the slot, so
        the workers' ordinary wake-ups bring it (and with it the next slot's time) however
        idle they are; a replaced schedule's first task still to come is cancelled."""
        codec = "utf-8"
        if not isinstance(nome, str) or not nome.strip() or len(nome) > NAME_MAX:
            raise ConfigError(f"nome do agendamento inválido: {nome!r} (de 1 a {NAME_MAX} "
                              "caracteres)")
        if not isinstance(processo, str) or not processo or len(processo) > 250:
            raise ConfigError("processo é obrigatório (até 250 caracteres)")
        check_text("nome", nome, codec)
        check_text("processo", processo, codec)
        if not isinstance(catch_up, int) or not 1 <= catch_up <= CATCH_UP_MAX:
            raise ConfigError(f"catch-up deve ser um inteiro de 1 a {CATCH_UP_MAX}")
        check_int("prioridade", prioridade, INT_MIN, INT_MAX, "int")
        now = utc(self.session.fetch_value(self.q["schedule_now"]))
        assert now is not None
        old = self.session.fetch_one(self.q["schedule_get"], {"nome": nome})
        if old is not None:
            self._cancel_first(old, "Agendamento substituído antes deste horário")
        first = rule.next_after(now)
        params = {"nome": nome, "processo": processo, "payload": payload_text(payload, codec),
                  "cron": rule.cron, "intervalo_segundos": rule.every, "fuso": rule.tz,
                  "recuperar": catch_up, "prioridade": prioridade,
                  "proximo": rule.next_after(first), "por": por}
        self.session.execute(self.q["schedule_upsert"], params)
        task_id = self._insert_slot(params, first)
        self.session.execute(self.q["schedule_first_slot"],
                             {"nome": nome, "slot": first, "id": task_id})
        self._hint()
        logger.info("Agendamento %s gravado: processo %s, %s", nome, processo, rule.describe())
        return self.get(nome)

    def _cancel_first(self, row: Dict[str, Any], why: str) -> None:
        if row.get("ultima_tarefa") is not None:
            self.session.execute(self.q["schedule_cancel_task"],
                                 {"id": row["ultima_tarefa"], "mensagem": why})

    def _hint(self) -> None:
        """The earliest next slot into the control row (scheduling/hint.py)."""
        self.session.execute(self.q["schedule_hint_set"])
        if "schedule_hint_clear" in self.q.names():  # (MySQL: a row only while one exists)
            self.session.execute(self.q["schedule_hint_clear"])

    def _insert_slot(self, row: Dict[str, Any], slot: _dt.datetime) -> int:
        """The slot's task: an ordinary task of the schedule's processo and payload."""
        text = row["payload"]
        return TaskRepository(self.session, self.queue_table).task_insert(
            origem=ORIGEM, destino=None, processo=row["processo"],
            chave_externa=f"agenda:{row['nome']}"[:100], payload=text,
            payload_hash=payload_hash(text), tenant=None, grupo_empresarial=None,
            pub_sub=False, data_hora=slot,
            prioridade=DEFAULT_PRIORITY if row["prioridade"] is None else int(row["prioridade"]))

    def get(self, nome: str) -> Dict[str, Any]:
        row = self.session.fetch_one(self.q["schedule_get"], {"nome": nome})
        if row is None:
            raise NotFoundException(f"agendamento {nome!r} não existe na fila {self.queue_table}")
        return self._shown(row)

    def list(self) -> List[Dict[str, Any]]:
        """Every schedule, with `proximo` (its next run, UTC) and the rule described."""
        return [self._shown(r) for r in self.session.fetch_all(self.q["schedule_list"])]

    def remove(self, nome: str) -> None:
        """Remove schedule `nome` (in the caller's transaction); its first task, if still to
        come, is cancelled."""
        row = self.session.fetch_one(self.q["schedule_get"], {"nome": nome})
        if row is None or not self.session.execute(self.q["schedule_delete"], {"nome": nome}):
            raise NotFoundException(f"agendamento {nome!r} não existe na fila {self.queue_table}")
        self._cancel_first(row, "Agendamento removido antes deste horário")
        self._hint()
        logger.info("Agendamento %s removido", nome)

    @staticmethod
    def _shown(row: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(row)
        for key in ("proximo", "ultimo_slot", "criado_em"):
            out[key] = utc(out.get(key))
        try:
            out["regra"] = rule_of(out).describe()
        except (ConfigError, FeatureUnavailable):  # (cron read without the extra installed)
            out["regra"] = f"cron '{out['cron']}'"
        return out

    def overview(self) -> Optional[Dict[str, Any]]:
        """For status, dashboard and metrics: {'agendamentos': list(), 'atraso_segundos':
        how long the earliest due slot waits (0: none late)}; None when the queue has no
        schedule table (not upgraded) or it cannot be read."""
        try:
            rows = self.list()
            state = self.poll()
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            if self.session.in_transaction:
                self.session.rollback()
            return None
        late = 0.0
        if state["proximo"] is not None and state["agora"] is not None:
            late = max(0.0, (state["agora"] - state["proximo"]).total_seconds())
        return {"agendamentos": rows, "atraso_segundos": late}

    # -- the workers' side --------------------------------------------------
    def poll(self) -> Dict[str, Any]:
        """{'agora', 'proximo' (the earliest next slot, or None), 'pausada'}."""
        row = self.session.fetch_one(self.q["schedule_poll"]) or {}
        return {"agora": utc(row.get("agora")), "proximo": utc(row.get("proximo")),
                "pausada": bool(row.get("pausada"))}

    def run_due(self, agora: _dt.datetime) -> int:
        """Insert the tasks of every slot due at `agora`; return how many were inserted."""
        inserted = 0
        for row in self.session.fetch_all(self.q["schedule_due"], {"agora": agora}):
            try:
                inserted += self._run_one(row, agora)
            except (ConfigError, FeatureUnavailable) as exc:  # (cron without the extra)
                logger.error("Agendamento %s ignorado: %s", row["nome"], exc)
        return inserted

    def _run_one(self, row: Dict[str, Any], agora: _dt.datetime) -> int:
        rule = rule_of(row)
        proximo = utc(row["proximo"])
        assert proximo is not None
        slots, novo = rule.due(proximo, agora, int(row["recuperar"] or 1))
        with self.session.transaction():
            taken = self.session.execute(self.q["schedule_advance"], {
                "nome": row["nome"], "proximo": row["proximo"], "novo": novo,
                "ultimo": slots[-1] if slots else None})
            if not taken:
                return 0  # another worker took these slots
            last = None
            for slot in slots:
                last = self._insert_slot(row, slot)
            if last is not None:
                self.session.execute(self.q["schedule_last_task"],
                                     {"id": last, "nome": row["nome"]})
            self._hint()
        if slots:
            logger.info("Agendamento %s: %s tarefa(s) inserida(s) (horário %s UTC; última %s)",
                        row["nome"], len(slots), f"{slots[-1]:%Y-%m-%d %H:%M:%S}", last)
        return len(slots)
