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
(engine/fleet_mode.py; null on MySQL and in client/server mode, where it does
not apply), `frota_mista_origem` where it comes from.

Which file.  By default each worker process writes its own file in the temp
directory (TMPDIR), named after the queue and the worker:

    <temp dir>/nsj_queue_lib-<QUEUE_NAME>-<chave>-<pid>-<início>.health

`chave` is a hash of what makes a queue unique on a host: DB_DRIVER, DB_HOST, DB_PORT,
DB_BASE and QUEUE_TABLE (as configured); `pid` and `início` (the process's start time,
from /proc/<pid>/stat) identify the worker, so a reused pid is never taken for it.  The
content also carries `chave_fila`, `banco`, `inicio_processo` (keys added to the old
ones).  Two queues with the same QUEUE_NAME in two databases (or schemas) of one host
never share a file, and no worker ever writes another worker's file.

QUEUE_HEALTH_FILE keeps its meaning: that one file, written by the worker and read by
the probe (one worker per file: two workers given the same file take turns in it).

A worker writes nothing before its consumer first connects (the "Worker conectado"
moment): a worker that fails at start (bad configuration, exit 2) leaves no file and
touches no other worker's file.  Until then (and afterwards) /healthz reports its state.
`ok` requires that the consumer has connected.  A worker that stops normally deletes its
file.  No task is ever run or claimed by the check.

The command, with the default files, judges the live workers of exactly the configured
queue (the same `chave`): a file whose process is gone (no /proc/<pid>, a zombie, or
another start time: a reused pid) is ignored and removed; the worker also removes such
files of its queue when it first writes.  Healthy (exit 0) when at least one live worker
exists and EVERY live worker is healthy: its file is fresh (written in the last
`--max-idade` seconds, default 3 heartbeat intervals) and says ok.  Each worker is
reported (`workers` in --json).  Why all and not any: the probe is a liveness probe of
one container, normally running one worker, where this is that worker's own verdict; a
container that runs several worker processes of one queue can only be fixed by a
restart, and "any" would keep a hung worker forever behind a healthy one.  A worker that
died is not "unhealthy": its file is gone, and with no live worker left the answer is
"nenhum worker ativo".  With QUEUE_HEALTH_FILE: that file, its process alive (same start
time), fresh and ok.  `--db` also checks, from the probe itself, that the database of
DB_* answers.  Exit 1: not healthy; exit 2: configuration error.  One line in Portuguese
says why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from nsj_queue_lib.cli.common import module_parser
from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError, CoordinationError, ServerFull
from nsj_queue_lib.runtime.service import BackgroundService

logger = logging.getLogger(__name__)

HEALTH_FILE_VAR = "QUEUE_HEALTH_FILE"
HEARTBEAT_INTERVAL = 5.0
STALE_FACTOR = 3

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_CONFIG = 2


PREFIX = "nsj_queue_lib-"
SUFFIX = ".health"


def explicit_health_file(settings: Optional[Settings] = None,
                         env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """QUEUE_HEALTH_FILE (the environment, else the settings), or None."""
    env = os.environ if env is None else env
    explicit = (env.get(HEALTH_FILE_VAR) or "").strip()
    if not explicit and settings is not None:
        explicit = (settings.queue_health_file or "").strip()
    return explicit or None


def queue_key(settings: Settings) -> str:
    """What makes a queue unique on a host (driver, database host/port/name, table),
    hashed: the `chave` of its workers' default health files."""
    missing = [name for name, value in (
        ("QUEUE_NAME", settings.queue_name), ("QUEUE_TABLE", settings.queue_table),
        ("DB_HOST", settings.db_host), ("DB_PORT", settings.db_port),
        ("DB_BASE", settings.db_name)) if not value]
    if missing:
        raise ConfigError(
            "Configuração inválida: o arquivo de saúde padrão identifica a fila por "
            "QUEUE_NAME, QUEUE_TABLE e DB_HOST/DB_PORT/DB_BASE; faltam "
            f"{', '.join(missing)} (ou defina {HEALTH_FILE_VAR})")
    ident = "\x1f".join((str(settings.db_driver or "").upper(),
                         str(settings.db_host).strip().lower(), str(settings.db_port),
                         str(settings.db_name).strip(), str(settings.queue_table).strip()))
    return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:16]


def _queue_label(settings: Settings) -> str:
    """The queue as people name it: 'pedidos (tabela s.pedidos em h:5432/base)'."""
    return (f"{settings.queue_name} (tabela {settings.queue_table} em "
            f"{settings.db_host}:{settings.db_port}/{settings.db_name})")


def worker_file_name(settings: Settings, pid: int, start: Optional[int]) -> str:
    # QUEUE_NAME is only there for people; the queue is `chave`.
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(settings.queue_name))[:63]
    return f"{PREFIX}{name}-{queue_key(settings)}-{pid}-{start or 0}{SUFFIX}"


def health_file_path(settings: Settings, env: Optional[Mapping[str, str]] = None, *,
                     pid: Optional[int] = None, start: Optional[int] = None,
                     directory: Optional[str] = None) -> str:
    """The heartbeat file of the worker `pid` (default: this process): QUEUE_HEALTH_FILE,
    or its own file in the temp directory (see the module's docstring)."""
    explicit = explicit_health_file(settings, env)
    if explicit:
        return explicit
    if pid is None:
        pid, start = os.getpid(), process_start(os.getpid())
    return os.path.join(directory or tempfile.gettempdir(),
                        worker_file_name(settings, pid, start))


_WORKER_FILE = re.compile(r"-(?P<key>[0-9a-f]{16})-(?P<pid>[0-9]+)-(?P<start>[0-9]+)"
                          + re.escape(SUFFIX) + "$")


def queue_files(key: str, directory: Optional[str] = None) -> List[Tuple[str, int, int]]:
    """(path, pid, start) of every default health file of the queue `key`."""
    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        match = _WORKER_FILE.search(name) if name.startswith(PREFIX) else None
        if match and match["key"] == key:
            found.append((os.path.join(directory, name), int(match["pid"]),
                          int(match["start"])))
    return found


def process_start(pid: int) -> Optional[int]:
    """The start time of `pid` (clock ticks since boot, /proc/<pid>/stat field 22), or
    None where /proc does not say (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: Any, start: Optional[int] = None) -> bool:
    """True while `pid` runs and, when `start` is known (and /proc is there), is the
    process that started then (not another that reused the pid).  A zombie is dead."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if not os.path.isdir("/proc/self"):  # no /proc: only whether the pid exists
        return _pid_alive(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(b")") + 2:].split()
    except (OSError, ValueError):
        return False
    if fields and fields[0] in (b"Z", b"X"):
        return False
    return not start or int(fields[19]) == int(start)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def remove_dead_files(key: str, directory: Optional[str] = None) -> List[int]:
    """Remove the default health files of the queue `key` whose process is gone; their
    pids.  (Another user's file in a sticky /tmp may stay: it is ignored anyway.)"""
    removed = []
    for path, pid, start in queue_files(key, directory):
        if not process_alive(pid, start):
            with contextlib.suppress(OSError):
                os.remove(path)
            removed.append(pid)
    return removed


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
        self.pid = os.getpid()
        self.start_time = process_start(self.pid)
        # `path` (tests) or QUEUE_HEALTH_FILE: that one file; else this worker's own.
        self.explicit = bool(path or explicit_health_file(settings))
        self.key = None if self.explicit else queue_key(settings)
        self.queue_key = self.key
        if self.queue_key is None:
            with contextlib.suppress(ConfigError):
                self.queue_key = queue_key(settings)
        self.path = path or health_file_path(settings, pid=self.pid, start=self.start_time)
        self._written = False
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
        from nsj_queue_lib.engine.socket.locker import SocketLocker

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
        """The queue's mixed-fleet mode with 1.2.2 (engine/fleet_mode.py): in a
        worker (`pause_check` given), the process's own view, which its claims follow (no
        statement of its own); else from the control row `pause` just read.  None: not
        known (row not read), or not applicable (MySQL, client/server mode)."""
        from nsj_queue_lib.engine.fleet_mode import fleet_mode

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
            "pid": self.pid,
            "inicio_processo": self.start_time,
            "fila": self.settings.queue_name,
            "tabela": self.settings.queue_table,
            "banco": f"{self.settings.db_host}:{self.settings.db_port}/{self.settings.db_name}",
            "chave_fila": self.queue_key,
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
            # Nothing on disk before the consumer first connects: a worker that fails at
            # start (bad configuration) leaves no file and touches no other worker's.
            if self.consumer_connected:
                if not self._written:
                    self._first_write()
                self._write(state)
                self._written = True
            self.last_state = state
        if state["ok"] != self._last_ok:
            if state["ok"]:
                logger.info("%s: worker saudável (%s)", self.name, self.path)
            elif self._last_ok is not None or self.consumer_connected:
                # (not at start-up, before the consumer's first connection: it logs that)
                logger.warning("%s: worker não saudável: %s", self.name, state["erro"])
            self._last_ok = state["ok"]
        return state

    def _first_write(self) -> None:
        if self.key is not None:  # the files of this queue's dead workers go
            removed = remove_dead_files(self.key, os.path.dirname(self.path))
            if removed:
                logger.info("%s: removidos arquivos de saúde de workers mortos (pids %s)",
                            self.name, ", ".join(map(str, removed)))
            return
        owner = _read_owner(self.path)
        if owner is not None and owner[0] != self.pid and process_alive(*owner):
            logger.warning("%s: o arquivo de saúde %s (QUEUE_HEALTH_FILE) é também de outro "
                           "worker vivo (pid %s): um arquivo por worker, ou deixe "
                           "QUEUE_HEALTH_FILE sem valor", self.name, self.path, owner[0])

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
            owner = _read_owner(self.path)
            if owner is not None and owner[0] == self.pid \
                    and owner[1] in (None, self.start_time):
                with contextlib.suppress(OSError):
                    os.remove(self.path)
            if self._session is not None:
                self._session.close()
                self._session = None
            if self._server is not None:
                with contextlib.suppress(Exception):
                    self._server.close()
                self._server = None


def _read_owner(path: str) -> Optional[Tuple[Any, Optional[int]]]:
    """(pid, start time) a heartbeat file names, or None (no file, not readable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        return state.get("pid"), state.get("inicio_processo")
    except (OSError, ValueError, AttributeError):
        return None


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
    if not isinstance(state, dict):
        return {"saudavel": False, "estado": None,
                "motivo": f"arquivo de saúde {path} ilegível: não é um objeto JSON"}
    start = state.get("inicio_processo")
    return judge_state(state, max_age, now,
                       pid_alive=lambda pid: process_alive(pid, start))


def check_queue(settings: Settings, max_age: Optional[float] = None,
                now: Optional[float] = None, directory: Optional[str] = None) -> Dict[str, Any]:
    """Judge the live workers of the configured queue by their default health files
    (removing those of dead processes): healthy when there is at least one and every
    one is healthy.  Same keys as `check` (from the worst worker), plus `workers` (each
    worker's verdict) and `removidos` (pids whose files were removed)."""
    now = time.time() if now is None else now
    key = queue_key(settings)
    label = _queue_label(settings)
    verdicts: List[Dict[str, Any]] = []
    removed: List[int] = []
    for path, pid, start in queue_files(key, directory):
        if not process_alive(pid, start):
            with contextlib.suppress(OSError):
                os.remove(path)
            removed.append(pid)
            continue
        verdict = check(path, max_age, now)
        state = verdict.get("estado")
        if state is not None and (state.get("chave_fila") != key or state.get("pid") != pid):
            continue  # not a file this library wrote for this queue's worker
        if verdict["estado"] is None and not os.path.exists(path):
            continue  # (the worker stopped and removed it meanwhile)
        verdict["pid"] = pid
        verdicts.append(verdict)
    gone = (f"; arquivos de workers mortos removidos (pid {', '.join(map(str, removed))})"
            if removed else "")
    if not verdicts:
        return {"saudavel": False, "estado": None, "workers": [], "removidos": removed,
                "motivo": f"nenhum worker ativo da fila {label}{gone}"}
    sick = [v for v in verdicts if not v["saudavel"]]
    result = dict(sick[0] if sick else verdicts[0])
    result.pop("pid", None)
    result.update(saudavel=not sick, workers=verdicts, removidos=removed)
    if len(verdicts) > 1:
        each = "; ".join(v["motivo"] if v["saudavel"] else f"pid {v['pid']}: {v['motivo']}"
                         for v in verdicts)
        head = (f"{len(sick)} de {len(verdicts)} workers vivos da fila {settings.queue_name} "
                "não saudáveis" if sick else
                f"os {len(verdicts)} workers vivos da fila {settings.queue_name} saudáveis")
        result["motivo"] = f"{head}: {each}"
    result["motivo"] += gone
    return result


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
        ok = locker.check()
    except ServerFull:
        # It answered a valid hello with "full": serving its workers, alive.
        return {"saudavel": True, "estado": None,
                "motivo": f"servidor de filas {where} respondeu (sem vagas para mais clientes)"}
    except CoordinationError:
        ok = False
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
        path = None if probe_only else explicit_health_file(settings)
        if not probe_only and path is None:
            queue_key(settings)  # the queue must be identified (else exit 2)
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
    elif path is not None:
        result = check(path, args.max_idade)
    else:
        result = check_queue(settings, args.max_idade)
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
