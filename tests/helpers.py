"""Test helpers: queue schema per test, SQL helpers, polling, worker subprocesses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.schema import render_schema
from nsj_queue_lib.queue_client import QueueClient

ROOT = Path(__file__).resolve().parent.parent


def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
               message: str = "") -> Any:
    """Poll `check` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timeout after {timeout}s: {message or check} (last={last!r})")


def holds(check: Callable[[], Any], duration: float, interval: float = 0.05,
          message: str = "") -> None:
    """Poll `check` for `duration` seconds; fail as soon as it is falsy (a property that
    must stay true, such as "nothing is claimed while the server is down")."""
    deadline = time.monotonic() + duration
    while True:
        value = check()
        if not value:
            raise AssertionError(f"deixou de valer: {message or check} ({value!r})")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def log_since(proc: Any, offset: int) -> str:
    """What `proc` logged after `offset` characters (see `len(proc.log())`)."""
    return proc.log()[offset:]


class WorkerProc:
    """A worker running as a real process (python -m <module>)."""

    def __init__(self, module: str, env: Dict[str, str], log_path: Path,
                 drop_env: Sequence[str] = (), cwd: Optional[Path] = None) -> None:
        self.module = module
        self.log_path = log_path
        self._log = open(log_path, "wb")
        full_env = {k: v for k, v in os.environ.items()}
        full_env.update(env)
        for name in drop_env:
            full_env.pop(name, None)
        full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", module], env=full_env,
                                     cwd=str(cwd or ROOT),
                                     stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout)


READY_MARK = "Worker conectado"


def wait_ready(proc: WorkerProc, timeout: float = 20.0) -> None:
    """Until the worker logged that it is connected and listening (fail if it exits first)."""

    def ready() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"worker saiu com {proc.proc.returncode}:\n{proc.log()}")
        return READY_MARK in proc.log()

    eventually(ready, timeout, interval=0.05, message="worker ready")


def run_python(args: Sequence[str], env: Optional[Dict[str, str]] = None,
               cwd: Optional[Path] = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run `python <args>` with exactly `env` (plus PYTHONPATH=ROOT); capture text output."""
    full_env = dict(env if env is not None else os.environ)
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], env=full_env, cwd=str(cwd or ROOT),
                          capture_output=True, text=True, timeout=timeout)


def _sql_name(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else f'"{name}"'


class Queue:
    """One queue (in its own schema) of the test database."""

    def __init__(self, server: Any, schema: str, fila: str) -> None:
        self.server = server
        self.schema = schema
        self.fila = fila
        # Written as SQL: names that are not plain lower case are quoted (exact case).
        self.table = f"{_sql_name(schema)}.{_sql_name(fila)}"
        self.sub_table = f"{_sql_name(schema)}.{_sql_name(fila + '_subscriber')}"
        self.conn = server.connect()
        self.workers: List[WorkerProc] = []
        self.log_dir = Path(os.environ.get("NSJQ_TEST_LOG_DIR", "/tmp/nsjq-test-logs"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, server: Any, schema: str, fila: str) -> Queue:
        q = cls(server, schema, fila)
        q.sql(f'CREATE SCHEMA "{schema}"')
        q.sql(render_schema(POSTGRES, f'"{schema}"', f'"{fila}"'))  # exact names
        q.sql(f'CREATE TABLE "{schema}".efeitos (id serial PRIMARY KEY, tarefa_id bigint, '
              f"chave text, tipo text, pid int, criado timestamptz DEFAULT clock_timestamp())")
        return q

    def destroy(self) -> None:
        for w in self.workers:
            w.stop(timeout=10)
        try:
            self.sql(f'DROP SCHEMA "{self.schema}" CASCADE')
        finally:
            self.conn.close()

    # -- SQL ------------------------------------------------------------
    def sql(self, text: str, params: Any = None) -> List[dict]:
        with self.conn.cursor() as cur:
            cur.execute(text, params)
            if cur.description is None:
                return []
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def value(self, text: str, params: Any = None) -> Any:
        rows = self.sql(text, params)
        return next(iter(rows[0].values())) if rows else None

    def rows(self, where: str = "true", params: Any = None) -> List[dict]:
        return self.sql(f'SELECT * FROM "{self.schema}"."{self.fila}" WHERE {where} ORDER BY id',
                        params)

    def row(self, task_id: int) -> dict:
        return self.rows("id = %s", (task_id,))[0]

    def effects(self, where: str = "true") -> List[dict]:
        return self.sql(f'SELECT * FROM "{self.schema}".efeitos WHERE {where} ORDER BY id')

    def count(self, where: str = "true") -> int:
        return int(self.value(f'SELECT count(*) FROM "{self.schema}"."{self.fila}" '
                              f"WHERE {where}"))

    # -- producing --------------------------------------------------------
    def client(self, conn: Any = None) -> QueueClient:
        return QueueClient(conn or self.conn, self.table, self.sub_table)

    def insert(self, payload: Any = None, **kwargs: Any) -> int:
        """Insert one task (committed) through QueueClient."""
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        conn = self.server.connect(autocommit=False)
        try:
            task_id = QueueClient(conn, self.table, self.sub_table).insert_task(
                kwargs.pop("origem", "teste"), kwargs.pop("destino", "teste"),
                kwargs.pop("processo", "teste"), kwargs.pop("chave_externa", None), payload,
                **kwargs)
            conn.commit()
            return task_id
        finally:
            conn.close()

    # -- workers ------------------------------------------------------------
    def worker_env(self, **extra: Any) -> Dict[str, str]:
        env = dict(self.server.env())
        env.update({
            "QUEUE_NAME": _sql_name(self.fila),
            "QUEUE_TABLE": self.table,
            "QUEUE_SUBSCRIBER_TABLE": self.sub_table,
            "QUEUE_MAX_RETRY": "3",
            "QUEUE_BASE_INTERVAL_RETRY": "0.01",  # minutes: 0.6 s x tentativa
            "QUEUE_WAIT_NOTIFY_INTERVAL": "30",
            "LOG_DEBUG": "false",
            # The 2.x-only behaviour (no 1.2.2 worker here); tests/compat runs the
            # default (true) beside the real 1.2.2.
            "QUEUE_COMPAT_1_2_2": "false",
        })
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start_worker(self, module: str = "tests.workers.scripted", *,
                     drop_env: Sequence[str] = (), cwd: Optional[Path] = None,
                     **extra: Any) -> WorkerProc:
        """Start a worker subprocess; `extra` are env variables, `drop_env` names to remove."""
        n = len(self.workers)
        proc = WorkerProc(module, self.worker_env(**extra),
                          self.log_dir / f"{self.schema}-w{n}.log", drop_env=drop_env, cwd=cwd)
        self.workers.append(proc)
        return proc

    def start_ready_worker(self, module: str = "tests.workers.scripted",
                           **extra: Any) -> WorkerProc:
        """Start a worker and wait until it listens on the queue's channel."""
        proc = self.start_worker(module, **extra)
        wait_ready(proc)
        return proc

    def settings(self, **extra: Any) -> Any:
        """Settings of this queue (as a worker would read them), for in-process services."""
        from nsj_queue_lib.config import Settings

        return Settings.from_env(self.worker_env(**extra), load_dotenv=False)

    def db_now(self) -> Any:
        return self.value("SELECT clock_timestamp()")

    def task_lock_held(self, task_id: int) -> bool:
        """True while some session holds the advisory lock of task `task_id`."""
        from nsj_queue_lib.coordination.base import task_lock_key

        ns, obj = task_lock_key(self.table, task_id)
        return bool(self.value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 2",
            (ns & 0xFFFFFFFF, obj & 0xFFFFFFFF)))

    def chain(self, first_id: int) -> List[dict]:
        """The attempts of one task (first attempt and its retries), in order."""
        return self.rows("id = %s OR id_inicial = %s", (first_id, first_id))

    def wait_status(self, task_id: int, status: str, timeout: float = 20.0) -> dict:
        return eventually(lambda: next((r for r in self.rows("id = %s", (task_id,))
                                        if r["status"] == status), None),
                          timeout, message=f"task {task_id} -> {status}")

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no task is waiting or running."""
        eventually(lambda: self.count("status IN ('pendente','agendada','processando')") == 0,
                   timeout, interval=0.1, message="queue drained")
