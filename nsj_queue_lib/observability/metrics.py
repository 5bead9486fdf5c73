"""Prometheus metrics and a /healthz probe over HTTP, per worker process and for the server.

Opt-in: nothing listens unless METRICS_PORT is set.  The endpoint binds to
METRICS_BIND_HOST (127.0.0.1 by default: expose it on purpose, e.g. 0.0.0.0
inside a pod) and answers:

* ``GET /metrics``: the Prometheus text exposition format (version 0.0.4),
  written here with the standard library (no new dependency: the format is a
  few lines of text, and a worker that imports prometheus-client would carry
  its global registry and default collectors for ten numbers);
* ``GET /healthz``: 200 ``ok: ...`` or 503 ``erro: <motivo>``, from the same
  facts as ``python -m nsj_queue_lib.health`` (the worker's last heartbeat:
  database answers, queue server answers, consumer connected, heartbeat fresh).

The queue gauges (depth by status, age of the oldest due task, dead letters
waiting, the pause flag) are read with index-range queries (db/sql/<dialect>/status.sql,
``metrics_*`` and ``status_due_count``) at most once every METRICS_DB_INTERVAL
seconds whatever the scrape rate: in a worker, by the worker itself on its own
connection between two tasks when a scrape asked (`GaugeJob`; a scrape answers the
last read); in the queue server, on a connection of their own.

``nsj_queue_compat_1_2_2`` (PostgreSQL only) is the queue's mixed-fleet mode with
1.2.2 (engine/fleet_mode.py): in a worker, the mode the worker follows at the
scrape (its in-process view, refreshed with the pause flag before its claims: no
statement of its own; an idle worker reads the row before its next claim, and the
gauges' own read of the pause flag refreshes it too); in the queue server, the control
row read with the pause flag.

The HTTP side is nsj_queue_lib.observability.http_guard's (`METRICS_LIMITS`): read timeouts and a
deadline per request, small requests only, at most 8 connections served at once (503
beyond), errors in Portuguese, clients that leave logged at DEBUG.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.observability.http_guard import (
    DISCONNECTS,
    GuardedHandler,
    GuardedServer,
    Limits,
)

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ACTIVE_STATUSES = ("pendente", "agendada", "processando")

Labels = Dict[str, str]
# (name, type, help, [(labels, value), ...])
Family = Tuple[str, str, str, List[Tuple[Labels, float]]]


# -- exposition format -----------------------------------------------------------
def _escape_help(value: str) -> str:
    """HELP text: backslash and line feed escaped (quotes stay as they are)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _escape(value: str) -> str:
    """A label value: backslash, line feed and double quote escaped."""
    return _escape_help(value).replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def histogram_family(name: str, help_text: str, labels: Labels,
                     hist: Tuple[Tuple[float, ...], List[int], int, float]) -> List[Family]:
    """A histogram as its _bucket/_sum/_count samples (one family with TYPE histogram)."""
    buckets, counts, total, total_sum = hist
    samples: List[Tuple[Labels, float]] = []
    for bound, count in zip(buckets, counts):
        samples.append(({**labels, "le": _number(float(bound))}, count))
    samples.append(({**labels, "le": "+Inf"}, total))
    lines = [(f"{name}_bucket", labels_, value) for labels_, value in samples]
    lines += [(f"{name}_sum", labels, total_sum), (f"{name}_count", labels, total)]
    # The text format wants one HELP/TYPE for the base name and the suffixed samples after.
    return [(name, "histogram", help_text, []),
            *[(n, "", "", [(lab, v)]) for n, lab, v in lines]]


def render(families: Iterable[Family]) -> str:
    """Families of samples as Prometheus text (HELP and TYPE, then one line per sample;
    a family with an empty type continues the previous one, as histogram samples do)."""
    out: List[str] = []
    for name, kind, help_text, samples in families:
        if kind:
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{_labels(labels)} {_number(value)}")
    return "\n".join(out) + "\n"


# -- queue gauges read from the database -------------------------------------------
class GaugeJob:
    """The gauges' read as a job of the worker (runtime/maintenance.AdminJobs)."""

    name = "metrics_gauges"
    on_demand = True

    def __init__(self, gauges: QueueGauges) -> None:
        self.gauges = gauges
        self.wanted = True  # read once at start, then when a scrape asked

    def next_delay(self) -> float:
        if not self.wanted:
            return float("inf")
        age = time.monotonic() - self.gauges._read_at
        return max(0.0, self.gauges.interval - age)

    def run_slot(self, session: Any, busy: Any = ()) -> None:
        """(Job) Read the gauges on the worker's `session`."""
        self.run_on(session)

    def run_on(self, session: Any, busy: Any = ()) -> None:
        self.wanted = False
        try:
            value = self.gauges.query_on(session)
        except Exception as exc:
            if session.in_transaction:
                session.rollback()
            value = self.gauges._failed(exc)
            with self.gauges._lock:
                self.gauges._store(value)  # (reported by the gauges; no traceback)
            return
        with self.gauges._lock:
            self.gauges._store(value)


class QueueGauges:
    """Depth, due count, oldest due age and dead letters of one queue, cached."""

    def __init__(self, settings: Settings, interval: Optional[float] = None,
                 fleet: Any = None) -> None:
        self.settings = settings
        # A worker's FleetMode (engine/fleet_mode.py): the mixed-fleet gauge is the
        # mode the worker follows now (no statement); without it, the control row's value.
        self.fleet = fleet
        self.interval = settings.metrics_db_interval if interval is None else interval
        self._lock = threading.Lock()
        self._session: Any = None
        self._queries: Dict[str, Any] = {}  # by dialect
        self._job: Optional[GaugeJob] = None  # set when a worker reads them (worker_job)
        self._no_breakers = False  # the queue has no breaker table (schema before 5)
        self._value: Dict[str, Any] = {}
        self._read_at = 0.0  # monotonic
        self.reads = 0

    def read(self) -> Dict[str, Any]:
        """The gauges, from the database at most every `interval` seconds ("ok": False and
        "erro" when the read failed; the next call tries again).

        Fed by a worker (`worker_job()`): the last value the worker read on its own
        connection; this call only asks for a fresh read at its next chance."""
        with self._lock:
            if self._job is not None:
                self._job.wanted = True
                return self._value or {"ok": False, "erro": "ainda não lidas pelo worker",
                                       "lido_em": time.time()}
            if self._value and time.monotonic() - self._read_at < self.interval:
                return self._value
            try:
                value = self._query()
            except Exception as exc:
                self.close_session()
                value = self._failed(exc)
            self._store(value)
            return value

    def _failed(self, exc: BaseException) -> Dict[str, Any]:
        value = {"ok": False, "erro": str(exc).strip().splitlines()[0] if str(exc)
                 else type(exc).__name__}
        logger.warning("Métricas: falha ao ler a fila %s: %s",
                       self.settings.queue_table, value["erro"])
        return value

    def _store(self, value: Dict[str, Any]) -> None:
        value.setdefault("ok", True)
        value["lido_em"] = time.time()
        self._value, self._read_at = value, time.monotonic()
        self.reads += 1

    def worker_job(self) -> GaugeJob:
        """A job for the worker's `AdminJobs`: the gauges are read on the worker's own
        connection (no connection of the endpoint's own), when scraped, at most every
        `interval` seconds."""
        if self._job is None:
            self._job = GaugeJob(self)
        return self._job

    def _query(self) -> Dict[str, Any]:
        from nsj_queue_lib.db.session import DbSession

        if self._session is None:
            self._session = DbSession.open(self.settings,
                                           application_name="nsj_queue_lib:metrics")
        return self.query_on(self._session)

    def query_on(self, s: Any) -> Dict[str, Any]:
        """Read the gauges on session `s`."""
        from nsj_queue_lib.admin import QueueAdmin
        from nsj_queue_lib.db.queries import Queries

        q = self._queries.get(s.dialect.name)
        if q is None:
            q = self._queries[s.dialect.name] = Queries(s.dialect, self.settings.queue_table,
                                                        filename="status.sql")
        depth = {status: 0 for status in ACTIVE_STATUSES}
        for row in s.fetch_all(q["metrics_depth"]):
            depth[row["status"]] = int(row["n"] or 0)
        oldest = s.fetch_one(q["metrics_oldest_due"])
        pause = QueueAdmin(s, self.settings.queue_table).pause_state()
        if self.fleet is not None and self.fleet.possible:
            # A fresh read of the control row, as the worker's pause gate makes before a
            # claim: an idle worker's mode (and so this gauge and its heartbeat) follows a
            # change at the next scrape-driven read, not only at its next wake-up.
            self.fleet.note(pause.get("compat_1_2_2"))
        breakers = None
        if not self._no_breakers:
            from nsj_queue_lib.pubsub.webhook_store import breaker_summary

            breakers = breaker_summary(s, self.settings.queue_table)
            self._no_breakers = breakers is None  # schema before 5: not asked again
        from nsj_queue_lib.scheduling.store import ScheduleStore

        schedules = ScheduleStore(s, self.settings.queue_table).overview()
        from nsj_queue_lib.db.limits import LimitStore

        limits = LimitStore(s, self.settings.queue_table).overview()
        from nsj_queue_lib.db.limits import ordering_overview

        ordering = ordering_overview(s, self.settings.queue_table)
        return {
            "limits": limits,
            "ordering": ordering,
            "breakers": breakers,
            "schedules": None if schedules is None else len(schedules["agendamentos"]),
            "schedule_lag": None if schedules is None else schedules["atraso_segundos"],
            "paused": bool(pause["pausada"]),
            # (the same row: None when the queue keeps no value, i.e. mixed-fleet)
            "compat": (pause.get("compat_1_2_2") is not False
                       if s.dialect.mixed_fleet else None),
            "depth": depth,
            "due": int(s.fetch_value(q["status_due_count"]) or 0),
            "oldest_due_age": float(oldest["atraso"] or 0) if oldest else 0.0,
            "dead_waiting": int(s.fetch_value(q["metrics_dead_waiting"]) or 0),
        }

    def close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()

    def _compat(self, g: Dict[str, Any]) -> Optional[bool]:
        """The mixed-fleet mode for the gauge (None: not applicable, no gauge)."""
        if self.fleet is not None:
            return self.fleet.mixed if self.fleet.possible else None
        return g.get("compat") if g["ok"] else None

    def families(self, labels: Labels) -> List[Family]:
        g = self.read()
        compat = self._compat(g)
        compat_family: List[Family] = [] if compat is None else [
            ("nsj_queue_compat_1_2_2", "gauge",
             "1 se a fila está em modo de frota mista com a 1.2.2 (nsj-queue compat)",
             [(labels, 1 if compat else 0)])]
        out: List[Family] = [
            ("nsj_queue_db_read_ok", "gauge",
             "1 se a última leitura das medidas da fila no banco funcionou",
             [(labels, 1 if g["ok"] else 0)]),
            ("nsj_queue_db_read_timestamp_seconds", "gauge",
             "Horário (unix) da última leitura das medidas da fila no banco",
             [(labels, g["lido_em"])]),
        ]
        if not g["ok"]:
            return out + compat_family
        out += [
            ("nsj_queue_depth", "gauge", "Tarefas aguardando ou em execução, por status",
             [({**labels, "status": st}, n) for st, n in g["depth"].items()]),
            ("nsj_queue_due_tasks", "gauge", "Tarefas devidas (data_hora já passou) aguardando",
             [(labels, g["due"])]),
            ("nsj_queue_oldest_due_age_seconds", "gauge",
             "Há quantos segundos a tarefa devida mais antiga espera (0 sem nenhuma)",
             [(labels, g["oldest_due_age"])]),
            ("nsj_queue_paused", "gauge", "1 se a fila está pausada (nsj-queue pause)",
             [(labels, 1 if g["paused"] else 0)]),
            *compat_family,
            ("nsj_queue_dead_letters_waiting", "gauge",
             "Cadeias da fila de mortos não resolvidas (sem sucesso e não reenfileiradas)",
             [(labels, g["dead_waiting"])]),
        ]
        breakers = g.get("breakers")
        if breakers is not None:
            # Per-endpoint series only for the (at most 20) endpoints failing or not closed.
            out += [
                ("nsj_queue_webhook_breakers_open", "gauge",
                 "Endpoints de webhook com o disjuntor aberto ou meio-aberto",
                 [(labels, breakers["abertos"])]),
                ("nsj_queue_webhook_breaker_open", "gauge",
                 "1 se o disjuntor do endpoint está aberto ou meio-aberto (endpoints com falhas)",
                 [({**labels, "endpoint": b["endpoint"]}, 0 if b["estado"] == "fechado" else 1)
                  for b in breakers["endpoints"]]),
                ("nsj_queue_webhook_endpoint_failures", "gauge",
                 "Falhas seguidas do endpoint de webhook",
                 [({**labels, "endpoint": b["endpoint"]}, b["falhas"])
                  for b in breakers["endpoints"]]),
            ]
        if g.get("schedules") is not None:
            out += [
                ("nsj_queue_schedules", "gauge",
                 "Tarefas periódicas da fila (nsj-queue schedule)", [(labels, g["schedules"])]),
                ("nsj_queue_schedule_lag_seconds", "gauge",
                 "Há quantos segundos o horário mais atrasado de uma tarefa periódica espera "
                 "um worker (0 sem atraso)", [(labels, g["schedule_lag"])]),
            ]
        if g.get("ordering") is not None:
            out.append(("nsj_queue_ordering_keys", "gauge",
                        "Chaves de ordem (ordering_key) com tarefas esperando ou em execução",
                        [(labels, g["ordering"]["chaves"])]))
            out.append(("nsj_queue_due_tenants", "gauge",
                        "Tenants com tarefas devidas (QUEUE_FAIR_TENANTS alterna entre eles)",
                        [(labels, g["ordering"]["tenants_devidos"])]))
        if g.get("limits"):
            out += [
                ("nsj_queue_limit", "gauge",
                 "Limite de concorrência do processo (nsj-queue limit)",
                 [({**labels, "processo": r["processo"]}, int(r["maximo"]))
                  for r in g["limits"]]),
                ("nsj_queue_limit_running", "gauge",
                 "Tarefas do processo limitado em execução agora",
                 [({**labels, "processo": r["processo"]}, int(r["em_execucao"]))
                  for r in g["limits"]]),
            ]
        return out


# -- what a worker exposes ------------------------------------------------------------
def worker_families(observer: Any, labels: Labels, now: Optional[float] = None) -> List[Family]:
    """Counters of a TaskObserver (nsj_queue_lib.observability.observe) as metric families."""
    now = time.time() if now is None else now
    snap = observer.snapshot()
    out: List[Family] = [
        ("nsj_queue_tasks_finished_total", "counter",
         "Tarefas terminadas por este processo, por resultado",
         [({**labels, "outcome": k}, v) for k, v in snap["finished"].items()]),
        ("nsj_queue_tasks_taken_over_total", "counter",
         "Tarefas que deixaram de estar 'processando' antes do fim (resgatadas por outro)",
         [(labels, snap["taken_over"])]),
        ("nsj_queue_claims_total", "counter", "Tarefas pegas (claims com sucesso)",
         [(labels, snap["claims"])]),
        ("nsj_queue_empty_wakeups_total", "counter",
         "Tentativas de pegar tarefa que não encontraram nenhuma",
         [(labels, snap["empty_claims"])]),
        ("nsj_queue_reconnects_total", "counter",
         "Conexões perdidas pelo consumidor (seguidas de reconexão)",
         [(labels, snap["reconnects"])]),
        ("nsj_queue_process_start_time_seconds", "gauge", "Início do processo (unix)",
         [(labels, snap["started"])]),
    ]
    if snap["last_claim"] is not None:
        out.append(("nsj_queue_seconds_since_last_claim", "gauge",
                    "Segundos desde a última tarefa pega por este processo",
                    [(labels, max(0.0, now - snap["last_claim"]))]))
    out += histogram_family("nsj_queue_task_duration_seconds",
                            "Duração das tarefas terminadas (sucesso ou falha)", labels,
                            snap["histogram"])
    return out


# -- HTTP ---------------------------------------------------------------------------------
HealthFn = Callable[[], Tuple[bool, str]]


# A scraper or a probe needs few connections, small requests and no body.
METRICS_LIMITS = Limits(read_timeout=10.0, request_deadline=15.0, max_header_bytes=8 * 1024,
                        max_body_bytes=0, max_threads=8)


class _Handler(GuardedHandler):
    server_version = "nsj_queue_lib-metrics"
    log_name = "Métricas"
    endpoint: MetricsEndpoint  # set on the subclass made per endpoint

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._send(200, self.endpoint.metrics_text(), CONTENT_TYPE)
            elif path in ("/healthz", "/health"):
                ok, reason = self.endpoint.health()
                self._send(200 if ok else 503, ("ok: " if ok else "erro: ") + reason + "\n")
            else:
                self._send(404, "não encontrado: use /metrics ou /healthz\n")
        except DISCONNECTS:
            raise  # the client left: logged at DEBUG by GuardedHandler
        except Exception as exc:
            logger.exception("Métricas: erro ao responder %s", path)
            with contextlib.suppress(Exception):
                self._send(500, f"erro interno: {type(exc).__name__}\n")

    def _send(self, code: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_HEAD = do_GET


class MetricsEndpoint:
    """A small threaded HTTP server in a daemon thread serving /metrics and /healthz."""

    def __init__(self, host: str, port: int, collect: Callable[[], List[Family]],
                 health: HealthFn, close: Optional[Callable[[], None]] = None,
                 limits: Optional[Limits] = None) -> None:
        self.host = host
        self.limits = limits or METRICS_LIMITS
        self.close = close
        self.requested_port = port
        self.collect = collect
        self.health = health
        self._httpd: Optional[GuardedServer] = None
        self._thread: Optional[threading.Thread] = None

    def metrics_text(self) -> str:
        return render(self.collect())

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd else self.requested_port

    def start(self) -> None:
        """Bind (ConfigError when the port is taken) and serve in a daemon thread."""
        handler = type("Handler", (_Handler,), {"endpoint": self})
        try:
            self._httpd = GuardedServer((self.host, self.requested_port), handler,
                                        self.limits, name="Métricas")
        except OSError as exc:
            raise ConfigError(f"METRICS_PORT: não foi possível escutar em {self.host}:"
                              f"{self.requested_port}: {exc}") from exc
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics_http",
                                        kwargs={"poll_interval": 0.5}, daemon=True)
        self._thread.start()
        logger.info("Métricas em http://%s:%s/metrics (saúde em /healthz)", self.host, self.port)

    def stop(self) -> None:
        """Stop serving and release the gauges' database session."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self.close is not None:
            self.close()


def worker_endpoint(settings: Settings, observer: Any, heartbeat: Any) -> MetricsEndpoint:
    """The endpoint of a worker process: its counters, the queue gauges, its heartbeat."""
    from nsj_queue_lib.engine.fleet_mode import fleet_mode
    from nsj_queue_lib.observability.health import judge_state

    labels = {"queue": settings.queue_name}
    gauges = QueueGauges(settings, fleet=fleet_mode(settings))
    gauges.worker_job()  # read on the worker's own connection (see runtime/supervisor.py)

    def health() -> Tuple[bool, str]:
        verdict = judge_state(heartbeat.last_state)
        return verdict["saudavel"], verdict["motivo"]

    def collect() -> List[Family]:
        ok, _ = health()
        return [*worker_families(observer, labels), *gauges.families(labels),
                ("nsj_queue_healthy", "gauge", "1 se /healthz responde 200",
                 [(labels, 1 if ok else 0)])]

    endpoint = MetricsEndpoint(settings.metrics_bind_host, settings.metrics_port or 0,
                               collect, health, close=gauges.close_session)
    endpoint.gauges = gauges  # type: ignore[attr-defined]
    return endpoint


def server_endpoint(settings: Settings, server: Any) -> MetricsEndpoint:
    """The endpoint of the socket server: its connections and locks, the queue gauges.

    Healthy while the server is running and the database of DB_* answers the (cached)
    gauge reads, i.e. while it can tell workers about due tasks."""
    labels = {"queue": settings.queue_name}
    gauges = QueueGauges(settings)

    def health() -> Tuple[bool, str]:
        if not server._started or server.wait(0):
            return False, "o servidor de filas não está no ar"
        g = gauges.read()
        if not g["ok"]:
            return False, f"banco indisponível: {g.get('erro')}"
        stats = server.stats()
        return True, (f"servidor da fila {settings.queue_name} no ar ({stats['clients']} "
                      f"clientes, {stats['listeners']} workers escutando)")

    def collect() -> List[Family]:
        stats = server.stats()
        ok, _ = health()
        return [
            ("nsj_queue_server_clients", "gauge", "Conexões de clientes abertas",
             [(labels, stats["clients"])]),
            ("nsj_queue_server_listeners", "gauge", "Workers escutando o canal da fila",
             [(labels, stats["listeners"])]),
            ("nsj_queue_server_locks_held", "gauge", "Locks de tarefa concedidos agora",
             [(labels, stats["locks"])]),
            *gauges.families(labels),
            ("nsj_queue_healthy", "gauge", "1 se /healthz responde 200",
             [(labels, 1 if ok else 0)]),
        ]

    return MetricsEndpoint(settings.metrics_bind_host, settings.metrics_port or 0, collect,
                           health, close=gauges.close_session)
