"""One connection per task thread: a worker holds 1 database connection (N + 1 with
QUEUE_CONCURRENCY=N), across its start-up and its admin slots, and the admin jobs still
do their work on it.

Real worker processes (PostgreSQL: database mode with 1 and 3 task threads, client/server
mode; MySQL native) log in as a role (PostgreSQL) or user (MariaDB) of their own
whose connection limit the server enforces (CONNECTION LIMIT / MAX_USER_CONNECTIONS):
a second connection, however short-lived, is refused by the server, and the job that
needed it is not done.  The server's session list is also sampled throughout.
"""

from __future__ import annotations

import datetime as _dt
import threading
import uuid
from typing import Any, Dict, List, Optional

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from tests.fixtures.processes import WorkerProc, wait_ready
from tests.fixtures.queue import Queue
from tests.fixtures.waiting import eventually
from tests.ops.test_metrics import parse, scrape, total
from tests.server.socket_server_helpers import free_port

SLOT_WAIT = 75.0  # seconds: the next clock minute, plus the jobs themselves


def _far_minute() -> str:
    return str((_dt.datetime.now().minute + 30) % 60)


class Limited:
    """A database login of its own, limited to `limit` connections by the server."""

    def __init__(self, queue: Queue, limit: int) -> None:
        self.queue = queue
        self.limit = limit
        self.name = f"nsjq_conn_{uuid.uuid4().hex[:8]}"
        if queue.is_mysql:
            self.hosts = ("%", "localhost", "127.0.0.1")
            for host in self.hosts:
                queue.sql(f"CREATE USER '{self.name}'@'{host}' "
                          f"WITH MAX_USER_CONNECTIONS {int(limit)}")
                queue.sql(f"GRANT ALL PRIVILEGES ON `{queue.schema}`.* "
                          f"TO '{self.name}'@'{host}'")
        else:
            schema = queue.quote(queue.schema)
            queue.sql(f'CREATE ROLE "{self.name}" LOGIN CONNECTION LIMIT {int(limit)}')
            queue.sql(f'GRANT USAGE, CREATE ON SCHEMA {schema} TO "{self.name}"')
            queue.sql(f'GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO "{self.name}"')
            queue.sql(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO "{self.name}"')

    def env(self) -> Dict[str, str]:
        return {"DB_USER": self.name, "DB_PASS": ""}

    def sessions(self, conn: Any = None) -> int:
        """The login's sessions now (on `conn`: the sampler's own connection)."""
        sql = ("SELECT count(*) AS n FROM information_schema.processlist WHERE user = %s"
               if self.queue.is_mysql else
               "SELECT count(*) AS n FROM pg_stat_activity WHERE usename = %s")
        if conn is None:
            return int(self.queue.value(sql, (self.name,)))
        with conn.cursor() as cur:
            cur.execute(sql, (self.name,))
            return int(cur.fetchone()[0])

    def backends(self) -> List[Any]:
        """The sessions' identities (pid and start on PostgreSQL, id on MariaDB)."""
        if self.queue.is_mysql:
            return sorted(r["id"] for r in self.queue.sql(
                "SELECT id FROM information_schema.processlist WHERE user = %s", (self.name,)))
        return sorted((r["pid"], str(r["backend_start"])) for r in self.queue.sql(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE usename = %s",
            (self.name,)))

    def drop(self) -> None:
        if self.queue.is_mysql:
            for host in self.hosts:
                self.queue.sql(f"DROP USER IF EXISTS '{self.name}'@'{host}'")
        else:
            self.queue.sql(f'DROP OWNED BY "{self.name}"')
            self.queue.sql(f'DROP ROLE IF EXISTS "{self.name}"')


class Sampler:
    """Samples a login's session count on a thread of its own until stopped."""

    def __init__(self, logins: List[Limited]) -> None:
        self.logins = logins
        self.most = {login.name: 0 for login in logins}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conns = [login.queue.server.connect() for login in self.logins]
        try:
            while not self._stop.is_set():
                for login, conn in zip(self.logins, conns):
                    self.most[login.name] = max(self.most[login.name], login.sessions(conn))
                self._stop.wait(0.01)
        finally:
            for conn in conns:
                conn.close()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _raw(queue: Queue, status: str, data_hora: Any, payload: str) -> None:
    queue.sql(f"INSERT INTO {queue.qtable} (status, data_hora, payload) VALUES (%s, %s, %s)",
              (status, data_hora, payload))


class Scenario:
    """A queue with a task orphaned by kill -9 after the limited worker started, a due
    'agendada' task, an old finished chain, and the queue paused (so the worker claims
    nothing: what changes in the table is the admin jobs' work)."""

    def __init__(self, queue: Queue, tmp_path: Any, concurrency: int) -> None:
        self.queue = queue
        self.port = free_port()
        far = _far_minute()
        self.victim = queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD=far,
                                               QUEUE_MINUTE_NOTIFY_THREAD=far,
                                               QUEUE_MINUTE_PURGE_THREAD=far)
        started = tmp_path / f"started-{queue.schema}"
        self.orphan = queue.insert({"efeito": "orfa", "started_file": str(started),
                                    "wait_file": str(tmp_path / "never")})
        eventually(started.exists, 15, message="tarefa da vítima iniciada")
        QueueAdmin(queue.conn, queue.table).pause(motivo="teste", por="teste")
        now = queue.db_now()
        _raw(queue, "agendada", now - _dt.timedelta(hours=1), "agendada-devida")
        _raw(queue, "sucesso", now - _dt.timedelta(days=100), "antiga")
        # (after the pause: its control table is granted too)
        self.login = Limited(queue, concurrency + (1 if concurrency > 1 else 0))
        # PostgreSQL: with the 1.2.2 compatibility on, the start-up check reads the
        # server's sessions too (on the worker's connection).
        compat = {} if queue.is_mysql else {"QUEUE_COMPAT_1_2_2": "true"}
        self.worker: WorkerProc = queue.start_worker(
            QUEUE_CONCURRENCY=str(concurrency), QUEUE_MINUTE_RETRY_THREAD="*",
            QUEUE_MINUTE_NOTIFY_THREAD="*", QUEUE_MINUTE_PURGE_THREAD="*",
            METRICS_PORT=str(self.port), METRICS_DB_INTERVAL="0.2",
            **compat, **self.login.env())
        wait_ready(self.worker)

    def start_slot_work(self) -> None:
        """Orphan the victim's task once the limited worker runs (its start-up rescue saw
        the task's lock held: only its admin slot can rescue it now)."""
        assert self.queue.row(self.orphan)["status"] == "processando"
        self.victim.kill9()

    def done(self) -> Optional[Dict[str, Any]]:
        q = self.queue
        chain = q.chain(self.orphan)
        state = {
            "resgatada": ([r["status"] for r in chain][:1] == ["falha"] and len(chain) == 2
                          and chain[1]["status"] in ("pendente", "agendada")),
            "promovida": q.count("payload = 'agendada-devida' AND status = 'pendente'") == 1,
            "expurgada": q.count("payload = 'antiga'") == 0,
        }
        self.last_state = state
        return state if all(state.values()) else None

    def close(self) -> None:
        self.worker.stop(timeout=20)
        self.login.drop()


def _check(scenarios: List[Scenario], sampler: Sampler, before: Dict[str, Any]) -> None:
    for s in scenarios:
        log = s.worker.log()
        assert s.worker.proc.poll() is None, log
        for refused in ("too many connections", "max_user_connections",
                        "Resgate inicial não executado", "indisponível"):
            assert refused not in log, log
        assert sampler.most[s.login.name] <= s.login.limit, sampler.most
        assert sampler.most[s.login.name] == s.login.limit  # (the sampler saw them)
        # The same sessions all along: nothing was reopened in between.
        assert s.login.backends() == before[s.login.name]
        [old, _retry] = s.queue.chain(s.orphan)
        assert old["mensagem"].startswith(WORKER_STOPPED)
        # The queue gauges of /metrics were read on the worker's own connection.
        samples = parse(scrape(s.port)[2], histogram=False)
        assert total(samples, "nsj_queue_db_read_ok") == 1

        def gauges_match(s: Scenario = s) -> bool:
            got = parse(scrape(s.port)[2], histogram=False)
            return all(total(got, "nsj_queue_depth", status=st) ==
                       s.queue.count("status = %s", (st,))
                       for st in ("agendada", "pendente", "processando"))

        eventually(gauges_match, message="gauges vs table")


def _run(scenarios: List[Scenario]) -> None:
    before = {}
    for s in scenarios:
        eventually(lambda s=s: s.login.sessions() == s.login.limit, 15,
                   message="worker connected")
        before[s.login.name] = s.login.backends()
    with Sampler([s.login for s in scenarios]) as sampler:
        for s in scenarios:
            s.start_slot_work()
        for s in scenarios:
            try:
                eventually(s.done, SLOT_WAIT, interval=0.2, message="admin jobs")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {s.last_state}\n{s.worker.log()}") from None
        _check(scenarios, sampler, before)


def test_postgres_worker_holds_one_connection_per_task_thread_across_admin_slots(
        pg_server, tmp_path):
    # Database mode with 1 and 3 task threads, and client/server mode (the locks live on
    # the queue server; the worker's database connection is still one).
    queues = [Queue.create(pg_server, log_dir=tmp_path) for _ in range(2)]
    queues.append(Queue.create(pg_server, mode="cs", log_dir=tmp_path))
    scenarios: List[Scenario] = []
    try:
        queues[2].start_server()
        scenarios = [Scenario(queues[0], tmp_path, 1), Scenario(queues[1], tmp_path, 3),
                     Scenario(queues[2], tmp_path, 1)]
        _run(scenarios)
    finally:
        for s in scenarios:
            s.close()
        for q in queues:
            q.destroy()


@pytest.mark.mysql
def test_mysql_native_worker_holds_one_connection_across_admin_slots(mysql_server, tmp_path):
    queue = Queue.create(mysql_server, log_dir=tmp_path)
    scenarios: List[Scenario] = []
    try:
        scenarios = [Scenario(queue, tmp_path, 1)]
        _run(scenarios)
    finally:
        for s in scenarios:
            s.close()
        queue.destroy()
