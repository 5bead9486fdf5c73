"""Health check for container probes: python -m nsj_queue_lib.health [--db] [--json].

The worker side is `HeartbeatService`, a background thread of every worker
(WorkerRuntime) that, every HEARTBEAT_INTERVAL seconds, checks that the
database answers (`SELECT 1` on a connection of its own, reopened when lost)
and, in client/server mode, that the queue server answers a ping; then it
writes the result to the heartbeat file, atomically:

    {"pid": ..., "fila": ..., "horario": <unix time>, "ok": true|false,
     "erro": null|"...", "consumidor_conectado": true|false, "pausada": ...,
     "frota_mista": true|false|null, "frota_mista_origem": "fila"|..., ...}

`frota_mista` is the queue's mixed-fleet mode with 1.2.2 as the worker follows it
(coordination/fleet_mode.py; null on MySQL and in client/server mode, where it does
not apply), `frota_mista_origem` where it comes from.

The file is QUEUE_HEALTH_FILE, or <temp dir>/nsj_queue_lib-<QUEUE_NAME>.health.
`ok` also requires that the worker's consumer has connected at least once
(the "Worker conectado" moment).  A worker that stops normally deletes the
file.  No task is ever run or claimed by the check.

The command reads the file and answers healthy (exit 0) when it exists, is
fresh (written in the last `--max-idade` seconds, default 3 heartbeat
intervals), says ok, and its pid is a live process.  `--db` also checks, from
the probe itself, that the database of DB_* answers.  Exit 1: not healthy;
exit 2: configuration error.  One line in Portuguese says why.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from nsj_queue_lib.cli.common import module_parser
from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.runtime.service import BackgroundService

logger = logging.getLogger(__name__)

HEALTH_FILE_VAR = "QUEUE_HEALTH_FILE"
HEARTBEAT_INTERVAL = 5.0
STALE_FACTOR = 3

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_CONFIG = 2


def health_file_path(queue_name: Optional[str],
                     env: Optional[Mapping[str, str]] = None) -> str:
    """QUEUE_HEALTH_FILE, or the default file of the queue in the temp directory."""
    env = os.environ if env is None else env
    explicit = (env.get(HEALTH_FILE_VAR) or "").strip()
    if explicit:
        return explicit
    if not queue_name:
        raise ConfigError(f"Configuração inválida: defina QUEUE_NAME ou {HEALTH_FILE_VAR}")
    # QUEUE_NAME is a validated identifier, so it is a safe file name.
    return os.path.join(tempfile.gettempdir(), f"nsj_queue_lib-{queue_name}.health")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


class HeartbeatService(BackgroundService):
    """Writes the worker's health to the heartbeat file every `interval` seconds."""

    name = "health_thread"

    def __init__(self, settings: Settings, stop_event: Optional[threading.Event] = None, *,
                 path: Optional[str] = None, interval: float = HEARTBEAT_INTERVAL,
                 tasks_done: Optional[Callable[[], int]] = None,
                 db_check: Optional[Callable[[], Optional[str]]] = None,
                 pause_check: Optional[Callable[[], Dict[str, Any]]] = None) -> None:
        super().__init__(stop_event)
        # With `pause_check` (the consumer's last read of `nsj-queue pause`) the pause is
        # reported from it; without it, read on the heartbeat's own connection.
        self.pause_check = pause_check
        # With `db_check` (the worker's consumer: None while its connection works, else
        # the problem) no connection of its own is opened; without it, SELECT 1 on one.
        self.db_check = db_check
        self.settings = settings
        self.path = path or health_file_path(settings.queue_name)
        self.interval = interval
        self.tasks_done = tasks_done
        self.consumer_connected = False
        self._first = True
        self._beat_lock = threading.Lock()
        self._closed = False
        self._session: Any = None
        self._server: Any = None
        self._last_ok: Optional[bool] = None
        self.last_state: Optional[Dict[str, Any]] = None  # read by /healthz (metrics)

    def next_delay(self) -> float:
        if self._first:
            self._first = False
            return 0.0
        return self.interval

    def mark_connected(self) -> None:
        """Called by the consumer when it is connected and listening: beat at once."""
        self.consumer_connected = True
        try:
            self.run_once()
        except Exception:
            logger.exception("%s: falha ao gravar o arquivo de saúde", self.name)

    # -- checks ---------------------------------------------------------------
    def _check_db(self) -> Optional[str]:
        from nsj_queue_lib.db.session import DbSession

        if self.db_check is not None:
            return self.db_check()
        for _ in range(2):  # the kept connection may have died: reopen once
            if self._session is None:
                try:
                    self._session = DbSession.open(
                        self.settings, application_name=f"nsj_queue_lib:{self.name}")
                except Exception as exc:
                    return f"banco indisponível: {str(exc).strip()}"
            if self._session.is_alive():
                return None
            self._session.close()
            self._session = None
        return "banco não respondeu ao SELECT 1"

    def _check_server(self) -> Optional[str]:
        if not self.settings.client_server_mode:
            return None
        from nsj_queue_lib.coordination.socket.locker import SocketLocker

        address = f"{self.settings.server_host}:{self.settings.lock_service_port}"
        try:
            if self._server is None:
                self._server = SocketLocker.from_settings(self.settings, admin=True)
            if self._server.ping():
                return None
        except ConfigError as exc:
            # (a server that now requires TLS, or a 1.2.2 one): a problem to report in the
            # heartbeat file, not a failure of the heartbeat itself (it would go stale)
            return f"servidor de filas {address} recusou a conexão: {exc}"
        return f"servidor de filas {address} não respondeu"

    def _pause_state(self) -> Dict[str, Any]:
        """The queue's pause flag (nsj-queue pause), read on the heartbeat's session."""
        from nsj_queue_lib.admin import QueueAdmin

        if self.pause_check is not None:
            return self.pause_check()
        if self._session is None:
            return {"pausada": None, "motivo": None}
        try:
            state = QueueAdmin(self._session, self.settings.queue_table).pause_state()
        except Exception as exc:  # reported, never fatal: the probe is about the worker
            logger.debug("%s: pausa da fila não lida: %s", self.name, exc)
            return {"pausada": None, "motivo": None}
        return state

    def _fleet_state(self, pause: Dict[str, Any]) -> Dict[str, Any]:
        """The queue's mixed-fleet mode with 1.2.2 (coordination/fleet_mode.py): in a
        worker (`pause_check` given), the process's own view, which its claims follow (no
        statement of its own); else from the control row `pause` just read.  None: not
        known (row not read), or not applicable (MySQL, client/server mode)."""
        from nsj_queue_lib.coordination.fleet_mode import fleet_mode

        mode = fleet_mode(self.settings)
        mixed: Optional[bool]
        if not mode.possible:
            mixed = None
        elif self.pause_check is not None:
            mixed = mode.mixed
        elif mode.override is not None:
            mixed = mode.override
        elif pause.get("pausada") is None:  # the row was not read
            mixed = None
        else:  # no row, no column or no control table: mixed-fleet
            mixed = pause.get("compat_1_2_2") is not False
        return {"frota_mista": mixed, "frota_mista_origem": mode.source}

    def state(self) -> Dict[str, Any]:
        db_problem = self._check_db()
        problems = [p for p in (db_problem, self._check_server()) if p]
        if not self.consumer_connected:
            problems.append("o worker ainda não se conectou à fila")
        pause = (self._pause_state() if db_problem is None
                 else {"pausada": None, "motivo": None})
        return {
            "pausada": pause["pausada"],
            "pausa_motivo": pause.get("motivo"),
            **self._fleet_state(pause),
            "pid": os.getpid(),
            "fila": self.settings.queue_name,
            "tabela": self.settings.queue_table,
            "horario": time.time(),
            "intervalo": self.interval,
            "ok": not problems,
            "erro": "; ".join(problems) or None,
            "consumidor_conectado": self.consumer_connected,
            "tarefas_executadas": self.tasks_done() if self.tasks_done else None,
        }

    def run_once(self) -> Dict[str, Any]:
        with self._beat_lock:
            if self._closed:
                return {}
            state = self.state()
            self._write(state)
            self.last_state = state
        if state["ok"] != self._last_ok:
            if state["ok"]:
                logger.info("%s: worker saudável (%s)", self.name, self.path)
            elif self._last_ok is not None or self.consumer_connected:
                # (not at start-up, before the consumer's first connection: it logs that)
                logger.warning("%s: worker não saudável: %s", self.name, state["erro"])
            self._last_ok = state["ok"]
        return state

    def _write(self, state: Dict[str, Any]) -> None:
        # A new file with an unpredictable name (mkstemp: O_EXCL, mode 0600) renamed over
        # the health file: nothing another user planted in a shared /tmp is followed.
        directory, name = os.path.split(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(state, fh, ensure_ascii=False)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise

    def close(self) -> None:
        """Stop writing, delete the file (if it is still this process's) and disconnect."""
        with self._beat_lock:
            self._closed = True
            with contextlib.suppress(OSError, ValueError):
                with open(self.path, encoding="utf-8") as fh:
                    owner = json.load(fh).get("pid")
                if owner == os.getpid():
                    os.remove(self.path)
            if self._session is not None:
                self._session.close()
                self._session = None
            if self._server is not None:
                with contextlib.suppress(Exception):
                    self._server.close()
                self._server = None


# -- the probe ---------------------------------------------------------------
def check(path: str, max_age: Optional[float] = None,
          now: Optional[float] = None) -> Dict[str, Any]:
    """Judge a heartbeat file: {"saudavel": bool, "motivo": str, "estado": {...}|None}."""
    now = time.time() if now is None else now
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        return {"saudavel": False, "estado": None,
                "motivo": f"nenhum worker ativo: o arquivo {path} não existe"}
    except (OSError, ValueError) as exc:
        return {"saudavel": False, "estado": None,
                "motivo": f"arquivo de saúde {path} ilegível: {exc}"}
    return judge_state(state, max_age, now, pid_alive=_pid_alive)


def judge_state(state: Optional[Dict[str, Any]], max_age: Optional[float] = None,
                now: Optional[float] = None,
                pid_alive: Callable[[int], bool] = lambda pid: True) -> Dict[str, Any]:
    """Judge a heartbeat state (the file's content, or the worker's own last beat for
    /healthz): alive pid, fresh (within `max_age`, default 3 intervals), and ok."""
    now = time.time() if now is None else now
    if state is None:
        return {"saudavel": False, "estado": None,
                "motivo": "o worker ainda não verificou a própria saúde"}
    interval = float(state.get("intervalo") or HEARTBEAT_INTERVAL)
    limit = max_age if max_age is not None else STALE_FACTOR * interval
    age = now - float(state.get("horario") or 0)
    pid = state.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        motivo = f"o processo do worker (pid {pid}) não existe mais"
    elif age > limit:
        motivo = f"o worker não atualiza o arquivo de saúde há {age:.0f} s (limite {limit:.0f} s)"
    elif not state.get("ok"):
        motivo = f"o worker informa problema: {state.get('erro')}"
    else:
        paused = ""
        if state.get("pausada"):
            why = state.get("pausa_motivo")
            paused = "; fila PAUSADA" + (f" ({why})" if why else "") + ": não pega tarefas"
        fleet = ("; modo de frota mista com a 1.2.2" if state.get("frota_mista") else "")
        return {"saudavel": True, "estado": state, "idade_segundos": round(age, 3),
                "pausada": bool(state.get("pausada")),
                "frota_mista": state.get("frota_mista"),
                "motivo": f"worker pid {pid} da fila {state.get('fila')} saudável "
                          f"(verificado há {age:.1f} s; {state.get('tarefas_executadas')} "
                          f"tarefas executadas){paused}{fleet}"}
    return {"saudavel": False, "estado": state, "idade_segundos": round(age, 3),
            "motivo": motivo}


def _check_db_from_probe(settings: Settings) -> Optional[str]:
    from nsj_queue_lib.db.session import DbSession

    try:
        session = DbSession.open(settings, application_name="nsj_queue_lib:health")
    except Exception as exc:
        return f"banco indisponível: {str(exc).strip()}"
    try:
        return None if session.is_alive() else "banco não respondeu ao SELECT 1"
    finally:
        session.close()


def _check_server_from_probe(settings: Settings) -> Dict[str, Any]:
    """Ping the queue server's lock port (hello with the token, then ping)."""
    from nsj_queue_lib.client.lock_client import SocketLocker

    where = f"{settings.server_host}:{settings.lock_service_port}"
    locker = SocketLocker.from_settings(settings, admin=True)
    try:
        ok = locker.ping()
    finally:
        with contextlib.suppress(Exception):
            locker.close()
    return {"saudavel": ok, "estado": None,
            "motivo": f"servidor de filas {where} " + ("respondeu" if ok else "não respondeu")}


def check_url(url: str, timeout: float = 5.0) -> Dict[str, Any]:
    """An HTTP probe (a worker's /healthz with METRICS_PORT, or the dashboard): healthy
    when GET answers 200 within `timeout` seconds."""
    from urllib.error import HTTPError, URLError
    from urllib.request import urlopen

    def first_line(body: bytes) -> str:
        text = body.decode("utf-8", "replace").strip()
        return text.splitlines()[0][:200] if text else ""

    try:
        with urlopen(url, timeout=timeout) as resp:  # scheme checked by main()
            status, body = resp.status, resp.read(4096)
    except HTTPError as exc:
        status, body = exc.code, exc.read(4096)
    except (URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"saudavel": False, "estado": None, "motivo": f"{url} não respondeu: {reason}"}
    detail = first_line(body)
    return {"saudavel": status == 200, "estado": None,
            "motivo": f"{url} respondeu {status}" + (f" ({detail})" if detail else "")}


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    parser = module_parser(
        "health", prog=prog,
        description="Verifica se um worker da fila está vivo e com conexões utilizáveis "
        "(pelo arquivo de saúde que o worker atualiza), sem executar tarefas. Saída 0: "
        "saudável; 1: não saudável; 2: configuração inválida.")
    parser.add_argument("--db", action="store_true",
                        help="também consulta o banco (DB_*) a partir desta verificação")
    parser.add_argument("--max-idade", type=float, default=None, metavar="SEGUNDOS",
                        help="idade máxima do arquivo de saúde (padrão: 3 intervalos do "
                        "worker, 15 s)")
    parser.add_argument("--json", action="store_true", help="resultado em JSON")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--servidor", action="store_true",
                        help="verifica o servidor de filas (SERVER_HOST:LOCK_SERVICE_PORT, "
                        "ping com SERVER_AUTH_TOKEN) em vez de um worker")
    target.add_argument("--somente-banco", dest="only_db", action="store_true",
                        help="verifica só o banco (DB_*), sem worker")
    target.add_argument("--url", metavar="URL",
                        help="verifica um endpoint HTTP (saudável se GET responde 200): o "
                        "/healthz de um worker com METRICS_PORT ou o painel")
    args = parser.parse_args(argv)
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        parser.error(f"--url: use http:// ou https:// ({args.url!r})")
    try:
        settings = Settings.from_env(require=("db",) if args.db or args.only_db else ())
        probe_only = args.servidor or args.only_db or args.url
        path = None if probe_only else health_file_path(settings.queue_name)
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.url:
        result = check_url(args.url)
    elif args.servidor:
        result = _check_server_from_probe(settings)
    elif args.only_db:
        problem = _check_db_from_probe(settings)
        result = {"saudavel": problem is None, "estado": None,
                  "motivo": problem or f"banco {settings.db_host}:{settings.db_port}/"
                  f"{settings.db_name} respondeu"}
    else:
        result = check(path, args.max_idade)
    if result["saudavel"] and args.db:
        problem = _check_db_from_probe(settings)
        if problem:
            result.update(saudavel=False, motivo=problem)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, sort_keys=True))
    else:
        print(("saudável: " if result["saudavel"] else "não saudável: ") + result["motivo"])
    return EXIT_HEALTHY if result["saudavel"] else EXIT_UNHEALTHY


if __name__ == "__main__":
    sys.exit(main())
