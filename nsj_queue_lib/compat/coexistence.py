"""Living beside nsj-queue-lib 1.2.2 workers: what tells they are there, and the watch.

The mode itself (mixed-fleet or not, a property of the queue) is
engine/fleet_mode.py.  Here:

* `read_signs`: what suggests that 1.2.2 workers use a queue now (their live sessions,
  recent 'falha_processando' rows), and how many sessions the role cannot see;
* `CompatWatch`: a worker's look for them, at start and once a minute (a job of
  runtime/maintenance.AdminJobs, on the worker's own connection).  It also refreshes
  the worker's view of the mode.  A live 1.2.2 session on a queue out of mixed-fleet
  mode (a rollback, a forgotten pod) draws a loud banner and puts the queue back into
  mixed-fleet mode, which every 2.x worker then follows within about a second.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Collection, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.control import read_stored_mode
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.engine.fleet_mode import FleetMode, fleet_mode
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)

WATCH_INTERVAL = 60.0  # seconds between two looks of a worker
BANNER = "!" * 78


@dataclass(frozen=True)
class LegacySigns:
    """What a look at the database saw (PostgreSQL)."""

    sessions: int = 0  # sessions of other programs sending 1.2.2's statements on this queue
    falha_processando: int = 0  # rows of the last day with the status only 1.2.2 writes
    hidden: int = 0  # sessions of other roles whose statements this role cannot see
    lock_sessions: int = 0  # sessions whose last statement is a one-bigint advisory lock

    @property
    def live(self) -> int:
        """Sessions that may be 1.2.2 workers of this queue now.  The one-number advisory
        locks name no queue, but an idle 1.2.2 worker's last statement is usually the
        unlock of the task it ran: they count (the safe side; a database where another
        program sends such locks needs QUEUE_COMPAT_1_2_2=false on its workers)."""
        return self.sessions + self.lock_sessions

    def describe(self, recent: bool = True) -> List[str]:
        """Portuguese descriptions of the signs (`recent`: the rows count too)."""
        out = []
        if self.sessions:
            out.append(f"{self.sessions} conexão(ões) de outro programa com comandos da "
                       "1.2.2 nesta fila (LISTEN do canal ou a consulta da fila \"as "
                       "tarefa\")")
        if self.lock_sessions:
            out.append(f"{self.lock_sessions} conexão(ões) de outro programa com advisory "
                       "lock de um número, como a 1.2.2 faz (pode ser um worker 1.2.2 desta "
                       "ou de outra fila, ou outro programa)")
        if recent and self.falha_processando:
            out.append(f"{self.falha_processando} tarefa(s) com status falha_processando "
                       "(só a 1.2.2 grava) nas últimas 24 h")
        return out

    def hidden_text(self) -> str:
        return (f"{self.hidden} conexão(ões) de outros usuários do banco têm os comandos "
                "ocultos para este usuário: não é possível saber se alguma é de um worker "
                "1.2.2 (conceda pg_read_all_stats para ver)")


def read_signs(session: Any, queue_table: str, channel: str) -> LegacySigns:
    """Look for 1.2.2 workers of `queue_table` (LISTEN channel `channel`) on `session`."""
    if not session.dialect.mixed_fleet:
        return LegacySigns()
    row = session.fetch_one(Queries(session.dialect, queue_table)["compat_evidence"],
                            {"channel": channel}) or {}
    return LegacySigns(int(row.get("sessoes") or 0), int(row.get("falha_processando") or 0),
                       int(row.get("ocultas") or 0), int(row.get("sessoes_lock") or 0))


def write_mode(session: Any, queue_table: str, mixed: bool, por: Optional[str]) -> None:
    """Record the queue's mode (the control table must have the column)."""
    session.execute(Queries(session.dialect, queue_table, filename="admin.sql")[
        "queue_compat_set"], {"compat": bool(mixed), "por": (por or "")[:150] or None})


class CompatWatch:
    """A worker's look for 1.2.2 workers: at start (`run_now`) and every minute."""

    name = "compat_1_2_2"
    on_demand = False

    def __init__(self, settings: Settings, mode: Optional[FleetMode] = None) -> None:
        self.settings = settings
        self.mode = mode or fleet_mode(settings)
        self._announced = False
        self._hidden_told = False

    def next_delay(self) -> float:
        return WATCH_INTERVAL

    def run_slot(self, session: Any, busy: Collection[int] = ()) -> None:
        settings, mode = self.settings, self.mode
        if not session.dialect.mixed_fleet:
            return
        if mode.possible:
            mode.note(read_stored_mode(session, settings.queue_table))
        try:
            signs = read_signs(session, settings.queue_table, settings.queue_name)
        except DatabaseUnavailable:
            raise
        except Exception as exc:  # a diagnostic: never stops the worker
            logger.debug("Verificação de workers 1.2.2 não executada: %s", exc)
            if session.in_transaction:
                session.rollback()
            signs = LegacySigns()
        if not self._announced:
            self._announced = True
            self._announce(signs)
        if mode.mixed:
            return
        if signs.live:
            self._unsafe(session, signs)
        elif signs.hidden and not self._hidden_told:
            self._hidden_told = True
            logger.warning("Fila %s fora do modo de frota mista com a 1.2.2: %s",
                           settings.queue_table, signs.hidden_text())

    def _announce(self, signs: LegacySigns) -> None:
        mode, table = self.mode, self.settings.queue_table
        if not mode.mixed:
            return
        seen = "; ".join(signs.describe())
        logger.info("Modo de frota mista com a 1.2.2 ativo na fila %s (%s): este worker "
                    "segura também as chaves da 1.2.2. %s", table,
                    "QUEUE_COMPAT_1_2_2=true" if mode.override else "gravado na fila",
                    f"Sinais de workers 1.2.2: {seen}." if seen else
                    "Sem workers 1.2.2, `nsj-queue compat off` encerra o modo (um advisory "
                    "lock a menos por tarefa).")

    def _unsafe(self, session: Any, signs: LegacySigns) -> None:
        settings, mode = self.settings, self.mode
        seen = "; ".join(signs.describe(recent=False))
        if settings.client_server_mode:
            logger.error("%s\nINSEGURO: CLIENT_SERVER_MODE=true, mas há sinais de workers "
                         "nsj-queue-lib 1.2.2 (modo PostgreSQL) na fila %s: %s.\nNo modo "
                         "cliente/servidor o worker 2.x não segura as chaves da 1.2.2, e os "
                         "dois podem executar a mesma tarefa duas vezes. Troque todos os "
                         "workers da fila de modo juntos.\n%s", BANNER, settings.queue_table,
                         seen, BANNER)
        elif mode.override is False:
            logger.error("%s\nINSEGURO: QUEUE_COMPAT_1_2_2=false, mas há sinais de workers "
                         "nsj-queue-lib 1.2.2 na fila %s: %s.\nSem o modo de frota mista, "
                         "workers 1.2.2 e 2.x podem executar a mesma tarefa duas vezes. "
                         "Retire QUEUE_COMPAT_1_2_2=false deste worker.\n%s", BANNER,
                         settings.queue_table, seen, BANNER)
        elif mode.possible:
            por = f"worker {socket.gethostname()}:{os.getpid()} (viu um worker 1.2.2)"
            write_mode(session, settings.queue_table, True, por)
            mode.note(True)
            logger.error("%s\nWorker nsj-queue-lib 1.2.2 visto na fila %s, que estava fora "
                         "do modo de frota mista: %s.\nA fila voltou ao modo de frota mista "
                         "(todos os workers 2.x seguem em até 1 s). Quando não restar "
                         "nenhum worker 1.2.2: nsj-queue compat off.\n%s", BANNER,
                         settings.queue_table, seen, BANNER)
