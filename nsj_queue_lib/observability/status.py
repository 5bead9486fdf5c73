"""Queue status for people and machines: python -m nsj_queue_lib.status [--json] [--watch [s]].

Reads only DB_* and QUEUE_TABLE (from the environment or `.env`) and prints:
the pause flag and the mixed-fleet mode with 1.2.2 (PostgreSQL; both from the control
row), attempts per status, the current state of the chains (a task and its retries)
and of the dead-letter chains, the oldest task that is due and waiting, the
tasks running and for how long, and the dead letters of the last 24 hours.

Ages are computed by the database (its clock, not this machine's).  "For how
long" a task runs: on PostgreSQL, the start of the transaction of the session
holding the task's advisory lock (what the worker opened right after the
claim); when that is not visible (client/server mode, MySQL, or a database
user without access to other sessions) it is the time since the attempt's
`data_hora`, an upper bound, flagged `"estimado": true`.

Exit codes: 0 ok, 1 database or table unavailable, 2 configuration error.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from typing import Any, Dict, List, Optional

from nsj_queue_lib.cli.common import (
    driver_error_text,
    module_parser,
    queue_settings,
)
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.dialect import Dialect
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import task_lock_key
from nsj_queue_lib.exceptions import ConfigError, DatabaseRefused, DatabaseUnavailable
from nsj_queue_lib.text import duration

EXIT_OK = 0
EXIT_UNAVAILABLE = 1
EXIT_CONFIG = 2

RUNNING_LIMIT = 50
DEAD_LIMIT = 10
DEAD_WINDOW_HOURS = 24

def _iso(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, _dt.datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)  # MySQL columns hold UTC
    return value.isoformat()


def _num(value: Any) -> Optional[float]:
    return None if value is None else round(float(value), 3)


def fleet_state(dialect: Dialect, pause: Dict[str, Any]) -> Dict[str, Any]:
    """The queue's mixed-fleet mode with nsj-queue-lib 1.2.2 (engine/fleet_mode.py),
    from the control row already read for the pause flag: "misto" is True when the queue
    keeps no value (no row, no column, no control table).  Not on MySQL (None)."""
    if not dialect.mixed_fleet:
        return {"aplica": False, "misto": None, "gravado": None, "desde": None, "por": None}
    stored = pause.get("compat_1_2_2")
    return {"aplica": True, "misto": stored is not False,
            "gravado": None if stored is None else bool(stored),
            "desde": _iso(pause.get("compat_alterado_em")),
            "por": pause.get("compat_alterado_por")}


def fleet_detail(fleet: Dict[str, Any]) -> str:
    """Why and since when, in Portuguese (after "ligado"/"desligado")."""
    if not fleet.get("misto"):
        text = "(só workers 2.x)"
    elif fleet.get("gravado") is None:
        text = "(a fila não grava o modo: esquema anterior ou sem tabela de controle)"
    else:
        text = "(workers 1.2.2 podem usar a fila)"
    if fleet.get("desde"):
        text += f" desde {fleet['desde']}" + (f" por {fleet['por']}" if fleet.get("por") else "")
    return text


def fleet_text(fleet: Dict[str, Any]) -> str:
    """The mode in one Portuguese line (status)."""
    if not fleet.get("aplica"):
        return "não se aplica (só PostgreSQL)"
    return ("ligado " if fleet.get("misto") else "desligado ") + fleet_detail(fleet)


class StatusReader:
    """Runs the status queries (db/sql/<dialect>/status.sql) of one queue on one session."""

    def __init__(self, session: DbSession, queue_table: str) -> None:
        self.session = session
        self.queue_table = queue_table
        self.dialect = session.dialect
        self.q = Queries(self.dialect, queue_table, filename="status.sql")

    def _counts(self, name: str, params: Optional[dict] = None) -> Dict[str, int]:
        rows = self.session.fetch_all(self.q[name], params)
        return {r["status"]: int(r["n"]) for r in sorted(rows, key=lambda r: r["status"])}

    def read(self) -> Dict[str, Any]:
        s, q = self.session, self.q
        now = s.fetch_value(q["status_now"])
        oldest = s.fetch_one(q["status_oldest_due"])
        due = s.fetch_value(q["status_due_count"])
        params = {"hours": DEAD_WINDOW_HOURS}
        dead_rows = s.fetch_all(q["status_dead_recent"], {**params, "limit": DEAD_LIMIT})
        dead_counts = self._counts("status_dead_counts", params)
        from nsj_queue_lib.admin import QueueAdmin

        pause = QueueAdmin(s, self.queue_table).pause_state()
        from nsj_queue_lib.pubsub.webhook_store import breaker_summary

        breakers = breaker_summary(s, self.queue_table)
        if breakers is not None:
            for b in breakers["endpoints"]:
                b["aberto_ate"] = _iso(b["aberto_ate"])
        from nsj_queue_lib.scheduling.store import ScheduleStore

        schedules = ScheduleStore(s, self.queue_table).overview()
        from nsj_queue_lib.db.limits import LimitStore

        limits = LimitStore(s, self.queue_table).overview()
        from nsj_queue_lib.db.limits import ordering_overview

        ordering = ordering_overview(s, self.queue_table)
        return {
            "ordenacao": ordering,
            "fila": self.queue_table,
            "banco": self.dialect.name,
            "pausa": {"pausada": pause["pausada"], "motivo": pause["motivo"],
                      "por": pause["alterado_por"], "desde": _iso(pause["alterado_em"]),
                      "tabela_de_controle": pause["controle"]},
            "frota_mista": fleet_state(self.dialect, pause),
            "gerado_em": _iso(now),
            "por_status": self._counts("status_counts"),
            "cadeias_por_status": self._counts("status_counts_chains"),
            "mortas_por_status": self._counts("status_counts_dead_chains"),
            "devidas": int(due or 0),
            "mais_antiga_devida": None if oldest is None else {
                "id": oldest["id"], "processo": oldest["processo"], "status": oldest["status"],
                "tentativa": oldest["tentativa"], "data_hora": _iso(oldest["data_hora"]),
                "atraso_segundos": _num(oldest["atraso"]),
            },
            "agendamentos": None if schedules is None else [{
                "nome": r["nome"], "regra": r["regra"], "processo": r["processo"],
                "proximo": _iso(r["proximo"]), "ultimo_slot": _iso(r["ultimo_slot"]),
                "ultima_tarefa": r["ultima_tarefa"]} for r in schedules["agendamentos"]],
            "limites": None if limits is None else [{
                "processo": r["processo"], "maximo": int(r["maximo"]),
                "em_execucao": int(r["em_execucao"])} for r in limits],
            "em_execucao": self._running(),
            "em_execucao_total": int(s.fetch_value(q["status_running_count"]) or 0),
            "disjuntores": breakers,
            "mortas_24h": {
                "total": sum(dead_counts.values()),
                "por_status": dead_counts,
                "ultimas": [{
                    "id": r["id"], "live_id": r["live_id"], "processo": r["processo"],
                    "subscriber_id": r["subscriber_id"], "status": r["status"],
                    "tentativa": r["tentativa"], "data_hora_inicial": _iso(r["data_hora_inicial"]),
                    "mensagem": r["mensagem"],
                } for r in dead_rows],
            },
        }

    def _running(self) -> List[Dict[str, Any]]:
        rows = self.session.fetch_all(self.q["status_running"], {"limit": RUNNING_LIMIT})
        starts = self._lock_holders() if rows else {}
        out = []
        for r in rows:
            start = starts.get(r["id"] & 0xFFFFFFFF)
            item = {"id": r["id"], "processo": r["processo"], "tentativa": r["tentativa"],
                    "data_hora": _iso(r["data_hora"])}
            if start is not None and start["segundos"] is not None:
                item.update(desde=_iso(start["inicio"]), segundos=_num(start["segundos"]),
                            estimado=False, sessao=start["sessao"])
            else:
                item.update(desde=_iso(r["data_hora"]), segundos=_num(r["idade"]),
                            estimado=True, sessao=start["sessao"] if start else None)
            out.append(item)
        return out

    def _lock_holders(self) -> Dict[int, Dict[str, Any]]:
        """Task id (mod 2**32) -> start of the lock holder's transaction (PostgreSQL)."""
        ns = task_lock_key(self.queue_table, 0)[0] & 0xFFFFFFFF  # pg_locks.classid is an oid
        try:
            rows = self.session.fetch_all(self.q["status_lock_holders"], {"ns": ns})
        except DatabaseUnavailable:
            raise
        except Exception:  # no access to the catalog views: fall back to data_hora
            return {}
        return {int(r["objid"]) & 0xFFFFFFFF: r for r in rows if r["objid"] is not None}


# -- presentation ------------------------------------------------------------
def _fmt_counts(counts: Dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "nenhuma"


def render_text(status: Dict[str, Any]) -> str:
    pause = status.get("pausa") or {}
    lines = [f"Fila {status['fila']} ({status['banco']}) em {status['gerado_em']}"]
    if pause.get("pausada"):
        lines.append(f"  PAUSADA desde {pause['desde']}"
                     + (f" por {pause['por']}" if pause.get("por") else "")
                     + (f": {pause['motivo']}" if pause.get("motivo") else "")
                     + " (os workers não pegam tarefas; nsj-queue resume)")
    fleet = status.get("frota_mista")
    if fleet and fleet.get("aplica"):
        lines.append(f"  Frota mista com a 1.2.2:    {fleet_text(fleet)}")
    lines += [f"  Tentativas por status:      {_fmt_counts(status['por_status'])}",
              f"  Cadeias (estado atual):     {_fmt_counts(status['cadeias_por_status'])}",
              f"  Fila de mortos (atual):     {_fmt_counts(status['mortas_por_status'])}"]
    oldest = status["mais_antiga_devida"]
    if oldest is None:
        lines.append("  Devidas aguardando:         0")
    else:
        lines.append(f"  Devidas aguardando:         {status['devidas']}; a mais antiga é a "
                     f"#{oldest['id']} ({oldest['processo']}, tentativa {oldest['tentativa']}),"
                     f" devida há {duration(oldest['atraso_segundos'])}")
    lines.append(f"  Em execução:                {status['em_execucao_total']}")
    for r in status["em_execucao"]:
        approx = " (no máximo; desde a data_hora)" if r["estimado"] else ""
        who = f" em {r['sessao']}" if r.get("sessao") else ""
        lines.append(f"    #{r['id']} {r['processo']} tentativa {r['tentativa']}: há "
                     f"{duration(r['segundos'])}{approx}{who}")
    breakers = status.get("disjuntores")
    if breakers and breakers["endpoints"]:
        lines.append(f"  Webhooks, disjuntores:      {breakers['abertos']} aberto(s)")
        for b in breakers["endpoints"]:
            pause = f", pausa {duration(b['pausa_segundos'])}" if b["estado"] != "fechado" else ""
            lines.append(f"    {b['endpoint']} {b['estado']} ({b['falhas']} falha(s) "
                         f"seguida(s){pause})")
    schedules = status.get("agendamentos")
    if schedules:
        lines.append(f"  Tarefas periódicas:         {len(schedules)}")
        for r in schedules:
            lines.append(f"    {r['nome']}: {r['regra']}, processo {r['processo']}; próximo "
                         f"{r['proximo']}" + (f"; último {r['ultimo_slot']} (tarefa "
                                               f"#{r['ultima_tarefa']})"
                                               if r["ultimo_slot"] else ""))
    limits = status.get("limites")
    if limits:
        lines.append(f"  Limites de concorrência:    {len(limits)}")
        for r in limits:
            lines.append(f"    {r['processo']}: {r['em_execucao']} de {r['maximo']} em execução")
    ordering = status.get("ordenacao")
    if ordering and ordering["chaves"]:
        lines.append(f"  Execução ordenada:          {ordering['chaves']} chave(s), "
                     f"{ordering['tarefas']} tarefa(s) esperando ou em execução")
    if ordering and ordering.get("tenants_devidos", 0) > 1:
        lines.append(f"  Tenants com tarefas devidas: {ordering['tenants_devidos']}")
    dead = status["mortas_24h"]
    lines.append(f"  Mortas nas últimas {DEAD_WINDOW_HOURS} h:    {dead['total']}"
                 + (f" ({_fmt_counts(dead['por_status'])})" if dead["total"] else ""))
    for r in dead["ultimas"]:
        sub = f" assinante {r['subscriber_id']}" if r["subscriber_id"] else ""
        msg = f": {r['mensagem']}" if r["mensagem"] else ""
        lines.append(f"    #{r['id']} (original #{r['live_id']}) {r['processo']}{sub} "
                     f"{r['status']}{msg}")
    return "\n".join(lines)


def read_status(settings: Settings, session: Optional[DbSession] = None) -> Dict[str, Any]:
    """The status of the queue of `settings` (opens and closes a session if none is given)."""
    own = session is None
    session = session or DbSession.open(settings, application_name="nsj_queue_lib:status")
    try:
        return StatusReader(session, settings.queue_table).read()
    finally:
        if own:
            session.close()


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    parser = module_parser(
        "status", prog=prog,
        description="Mostra o estado da fila configurada (DB_* e QUEUE_TABLE): tarefas por "
        "status, a devida mais antiga, as em execução e as mortas das últimas 24 h.")
    parser.add_argument("--json", action="store_true", help="saída em JSON (uma linha por "
                        "leitura), para máquinas")
    parser.add_argument("--watch", nargs="?", type=float, const=5.0, default=None,
                        metavar="SEGUNDOS", help="repete a leitura a cada SEGUNDOS (padrão 5) "
                        "até Ctrl-C")
    parser.add_argument("--tabela", metavar="SCHEMA.FILA",
                        help="tabela da fila ('tabela' ou 'schema.tabela'); padrão: QUEUE_TABLE")
    args = parser.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        parser.error("--watch precisa de um intervalo maior que zero")
    try:
        settings = queue_settings(args)
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    session: Optional[DbSession] = None
    code = EXIT_OK
    try:
        while True:
            try:
                if session is None:
                    session = DbSession.open(settings, application_name="nsj_queue_lib:status")
                status = read_status(settings, session)
            except DatabaseUnavailable as exc:
                if session is not None:
                    session.close()
                    session = None
                print(f"Erro: {exc}", file=sys.stderr)
                # Wrong DB_USER / DB_PASS / DB_BASE is a configuration error, not an outage.
                code = EXIT_CONFIG if isinstance(exc, DatabaseRefused) else EXIT_UNAVAILABLE
            except Exception as exc:  # missing table, no privilege: a plain message
                print(f"Erro ao ler a fila {settings.queue_table}: {driver_error_text(exc)}",
                      file=sys.stderr)
                code = EXIT_UNAVAILABLE
            else:
                code = EXIT_OK
                if args.json:
                    print(json.dumps(status, ensure_ascii=False, sort_keys=True), flush=True)
                else:
                    if args.watch is not None and sys.stdout.isatty():
                        # (our own sequence: past the CLI's control-character filter)
                        getattr(sys.stdout, "raw_stream", sys.stdout).write("\033[H\033[2J")
                    print(render_text(status), flush=True)
            if args.watch is None:
                return code
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if session is not None:
            session.close()


if __name__ == "__main__":
    sys.exit(main())
