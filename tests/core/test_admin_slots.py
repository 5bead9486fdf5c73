"""Admin jobs at their slots, with real worker processes and databases.

* Once per slot: a worker busy through a slot reaches the job late; when another worker
  already ran it for that slot (recorded in <fila>_rotinas), the late one skips it instead
  of repeating it.  PostgreSQL (database and client/server mode) and MariaDB (MySQL
  native).
* QUEUE_CONCURRENCY > 1: a purge blocked on a row lock the test holds runs on a task
  thread; meanwhile a new task is still picked up at once and HALT still reaches the
  process (the listener thread runs no admin job).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any, List, Optional

import pytest

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.runtime.maintenance import PurgeService
from tests.fixtures.processes import WorkerProc, wait_ready
from tests.fixtures.queue import Queue
from tests.fixtures.waiting import eventually

SLOT_WAIT = 80.0  # seconds: the next clock minute, plus the job itself
SKIPPED = "purge_thread: já executada no horário"


def _far_minute() -> str:
    return str((_dt.datetime.now().minute + 30) % 60)


def _old_row(queue: Queue, payload: str) -> None:
    """A finished chain 100 days old: what the purge deletes."""
    queue.sql(f"INSERT INTO {queue.qtable} (status, data_hora, payload) VALUES (%s, %s, %s)",
              ("sucesso", queue.db_now() - _dt.timedelta(days=100), payload))


def test_a_slot_run_is_recorded_and_a_second_run_for_it_skipped(each_db_queue, caplog):
    """In process, on each database: the slot a purge ran for is written under its lock;
    another run for the same slot does nothing; a run outside the slots (start-up, tools)
    always works; a queue without <fila>_rotinas (not upgraded) purges as before."""
    settings = each_db_queue.settings()
    fixed = _dt.datetime(2026, 5, 4, 10, 7, 30)  # local time; slots every 5 minutes
    purge = PurgeService(settings, make_backend(settings), frozenset(range(0, 60, 5)),
                         clock=lambda: fixed)
    slot = _dt.datetime(2026, 5, 4, 10, 5).astimezone(_dt.timezone.utc).replace(tzinfo=None)
    runs = (f"{each_db_queue.quote(each_db_queue.schema)}."
            f"{each_db_queue.quote(each_db_queue.fila + '_rotinas')}")
    session = DbSession.open(settings)
    try:
        _old_row(each_db_queue, "antiga-1")
        first = purge.run_slot(session)
        assert (first.skipped, first.count) == (False, 1)
        [run] = each_db_queue.sql(f"SELECT rotina, horario, executado_por FROM {runs}")
        assert (run["rotina"], run["horario"]) == ("purge_thread", slot)
        assert run["executado_por"] == f"{socket.gethostname()}:{os.getpid()}"
        _old_row(each_db_queue, "antiga-2")
        again = purge.run_slot(session)
        assert again.skipped and each_db_queue.count("payload = 'antiga-2'") == 1
        assert purge.run_on(session).count == 1  # no slot: runs
        assert not session.in_transaction
        each_db_queue.sql(f"DROP TABLE {runs}")
        caplog.set_level(logging.INFO, logger="nsj_queue_lib")
        for n in (3, 4):
            _old_row(each_db_queue, f"antiga-{n}")
            assert purge.run_slot(session).count == 1  # as before the table existed
        assert len([r for r in caplog.records if "sem a tabela das rotinas" in r.message]) == 1
    finally:
        session.close()


def test_a_role_without_grants_on_the_runs_table_still_runs_the_job(pg_queue, caplog):
    """<fila>_rotinas created by an upgrade the workers' role has no grants on: the purge
    still runs at every slot (without the once-per-slot check), with one warning."""
    role = f"nsjq_rot_{uuid.uuid4().hex[:8]}"
    schema = pg_queue.quote(pg_queue.schema)
    pg_queue.sql(f'CREATE ROLE "{role}" LOGIN')
    pg_queue.sql(f'GRANT USAGE ON SCHEMA {schema} TO "{role}"')
    pg_queue.sql(f'GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO "{role}"')
    pg_queue.sql(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO "{role}"')
    pg_queue.sql(f'REVOKE ALL ON {schema}.{pg_queue.quote(pg_queue.fila + "_rotinas")} FROM '
                 f'"{role}"')
    settings = pg_queue.settings(DB_USER=role, DB_PASS="")
    fixed = _dt.datetime(2026, 5, 4, 10, 7, 30)
    purge = PurgeService(settings, make_backend(settings), frozenset(range(60)),
                         clock=lambda: fixed)
    session = DbSession.open(settings)
    try:
        caplog.set_level(logging.INFO, logger="nsj_queue_lib")
        for n in (1, 2):
            _old_row(pg_queue, f"antiga-{n}")
            assert purge.run_slot(session).count == 1
        assert not session.in_transaction
        warned = [r for r in caplog.records if "tabela das rotinas inacessível" in r.message]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    finally:
        session.close()
        pg_queue.sql(f'DROP OWNED BY "{role}"')
        pg_queue.sql(f'DROP ROLE IF EXISTS "{role}"')


def test_a_slot_recorded_far_ahead_by_a_fast_clock_does_not_silence_the_job(each_db_queue, caplog):
    """A worker whose clock runs hours ahead records a slot in the future; the others must
    not skip the job until their clocks get there (the rescue would stop for hours): a
    record further ahead than CLOCK_SKEW_MAX is ignored, with a warning, and replaced."""
    settings = each_db_queue.settings()
    runs = (f"{each_db_queue.quote(each_db_queue.schema)}."
            f"{each_db_queue.quote(each_db_queue.fila + '_rotinas')}")
    purge = PurgeService(settings, make_backend(settings), frozenset(range(60)))
    ahead = (_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
             + _dt.timedelta(hours=3))
    each_db_queue.sql(f"INSERT INTO {runs} (rotina, horario, executado_por) VALUES (%s, %s, %s)",
                      ("purge_thread", ahead, "adiantado:1"))
    session = DbSession.open(settings)
    try:
        caplog.set_level(logging.INFO, logger="nsj_queue_lib")
        _old_row(each_db_queue, "antiga-1")
        result = purge.run_slot(session)
        assert (result.skipped, result.count) == (False, 1)
        assert each_db_queue.count("payload = 'antiga-1'") == 0
        [run] = each_db_queue.sql(f"SELECT horario, executado_por FROM {runs}")
        assert run["horario"] < ahead - _dt.timedelta(hours=2)
        assert run["executado_por"] == f"{socket.gethostname()}:{os.getpid()}"
        assert [r for r in caplog.records if "no futuro" in r.message
                and r.levelno == logging.WARNING]
        _old_row(each_db_queue, "antiga-2")  # the slot now recorded by this worker: skipped again
        assert purge.run_slot(session).skipped and each_db_queue.count("payload = 'antiga-2'") == 1
    finally:
        session.close()


def test_a_failing_admin_job_does_not_record_its_slot(each_db_queue):
    """A job that fails leaves its slot unrecorded: a late worker (or this one at its
    next try) runs it for that slot instead of skipping it."""
    settings = each_db_queue.settings()
    runs = (f"{each_db_queue.quote(each_db_queue.schema)}."
            f"{each_db_queue.quote(each_db_queue.fila + '_rotinas')}")
    fixed = _dt.datetime(2026, 5, 4, 10, 7, 30)

    class Failing(PurgeService):
        def work(self, repo, locker):
            repo.task_purge(settings.queue_purge_max_age, settings.queue_purge_limit)
            raise RuntimeError("purge falhou no meio")

    session = DbSession.open(settings)
    try:
        with pytest.raises(RuntimeError):
            Failing(settings, make_backend(settings), frozenset(range(60)),
                    clock=lambda: fixed).run_slot(session)
        assert each_db_queue.sql(f"SELECT rotina FROM {runs}") == []
        _old_row(each_db_queue, "antiga-1")
        late = PurgeService(settings, make_backend(settings), frozenset(range(60)),
                            clock=lambda: fixed).run_slot(session)
        assert (late.skipped, late.count) == (False, 1)
    finally:
        session.close()


class LateWorker:
    """Worker A runs a task through a purge slot; worker B, idle, purges at the slot."""

    def __init__(self, queue: Queue, tmp_path: Path) -> None:
        self.queue = queue
        far = _far_minute()
        env = dict(QUEUE_MINUTE_PURGE_THREAD="*", QUEUE_MINUTE_RETRY_THREAD=far,
                   QUEUE_MINUTE_NOTIFY_THREAD=far, LOG_DEBUG="true")
        self.release = tmp_path / f"release-{queue.schema}"
        started = tmp_path / f"started-{queue.schema}"
        self.a: WorkerProc = queue.start_ready_worker(**env)
        self.task = queue.insert({"started_file": str(started), "wait_file": str(self.release)})
        eventually(started.exists, 20, message="tarefa longa iniciada no worker A")
        # (only now: A is busy, so this row can only go at B's slot run)
        _old_row(queue, "antiga-1")
        self.b: WorkerProc = queue.start_ready_worker(**env)

    def purged_at_slot(self) -> bool:
        return self.queue.count("payload = 'antiga-1'") == 0

    def after_slot(self) -> None:
        """B ran the slot's purge: a new old row, then A's task ends (A is late)."""
        _old_row(self.queue, "antiga-2")
        self.release.write_text("ok")

    def late_run_over(self) -> bool:
        """A finished its task and then skipped the slot's purge (or, wrongly, ran it)."""
        return (self.queue.row(self.task)["status"] == "sucesso"
                and (SKIPPED in self.a.log()
                     or self.queue.count("payload = 'antiga-2'") == 0))

    def check(self) -> None:
        q = self.queue
        # The late worker did not purge again: the row inserted after the slot's run is
        # still there (the next slot, a minute later, takes it).
        assert q.count("payload = 'antiga-2'") == 1, self.a.log()
        assert SKIPPED in self.a.log()
        [run] = q.sql(f"SELECT rotina, horario, executado_por FROM "
                      f"{q.quote(q.schema)}.{q.quote(q.fila + '_rotinas')}")
        assert run["rotina"] == "purge_thread"
        assert run["executado_por"] == f"{socket.gethostname()}:{self.b.pid}"
        assert run["horario"].second == 0
        assert SKIPPED not in self.b.log()
        for w in (self.a, self.b):
            assert w.proc.poll() is None, w.log()

    def close(self) -> None:
        self.release.write_text("ok")
        for w in (self.a, self.b):
            w.stop(timeout=20)


def _run_late(scenarios: List[LateWorker]) -> None:
    for s in scenarios:
        eventually(s.purged_at_slot, SLOT_WAIT, interval=0.2,
                   message=f"purge do worker B no horário\n{s.b.log()}")
        s.after_slot()
    for s in scenarios:
        eventually(s.late_run_over, 30, interval=0.1,
                   message=f"rotina atrasada do worker A\n{s.a.log()}")
        s.check()


def test_postgres_late_worker_skips_a_purge_already_run_for_the_slot(pg_server, tmp_path):
    # Database mode (advisory locks) and client/server mode (the socket server's locks).
    queues = [Queue.create(pg_server, log_dir=tmp_path),
              Queue.create(pg_server, mode="cs", log_dir=tmp_path)]
    scenarios: List[LateWorker] = []
    try:
        queues[1].start_server()
        scenarios = [LateWorker(q, tmp_path) for q in queues]
        _run_late(scenarios)
    finally:
        for s in scenarios:
            s.close()
        for q in queues:
            q.destroy()


@pytest.mark.mysql
def test_mysql_native_late_worker_skips_a_purge_already_run_for_the_slot(mysql_server,
                                                                         tmp_path):
    # MySQL native (named locks).  (Client/server mode on MariaDB is left out: there a
    # running task's transaction holds its row, and the purge's read of the table waits
    # for it, so worker B's purge would wait for worker A's task.)
    queue = Queue.create(mysql_server, log_dir=tmp_path)
    scenarios: List[LateWorker] = []
    try:
        scenarios = [LateWorker(queue, tmp_path)]
        _run_late(scenarios)
    finally:
        for s in scenarios:
            s.close()
        queue.destroy()


def _blocked_purge(queue: Queue) -> Optional[int]:
    """The backend pid of a purge DELETE waiting for a row lock, if any."""
    return queue.value(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE %s AND datname = current_database() LIMIT 1",
        (f"%DELETE FROM %{queue.fila}%",))


def test_concurrency_a_blocked_purge_delays_neither_tasks_nor_halt(pg_queue, tmp_path):
    old = 5
    for i in range(old):
        _old_row(pg_queue, f"antiga-{i}")
    far = _far_minute()
    worker = pg_queue.start_worker(
        QUEUE_CONCURRENCY="2", QUEUE_MINUTE_PURGE_THREAD="*",
        QUEUE_MINUTE_RETRY_THREAD=far, QUEUE_MINUTE_NOTIFY_THREAD=far,
        QUEUE_PURGE_LIMIT="1",
        # No periodic poll that would find the task anyway: only a wake-up does.
        QUEUE_WAIT_NOTIFY_INTERVAL="600")
    holder: Any = pg_queue.new_conn()
    try:
        wait_ready(worker)
        with holder.cursor() as cur:  # every old row locked: the purge's DELETE waits
            cur.execute(f"SELECT id FROM {pg_queue.qtable} WHERE payload LIKE 'antiga-%%' "
                        "FOR UPDATE")
        eventually(lambda: _blocked_purge(pg_queue), SLOT_WAIT, interval=0.2,
                   message=f"purge bloqueado\n{worker.log()}")
        # A new task is claimed and run while the purge waits.
        task = pg_queue.insert({"efeito": "durante-o-purge"})
        pg_queue.wait_status(task, "sucesso", timeout=15)
        assert _blocked_purge(pg_queue), worker.log()
        # HALT reaches the process while the purge still waits ...
        pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
        eventually(lambda: "HALT recebido" in worker.log(), 15, interval=0.1,
                   message=f"HALT entregue\n{worker.log()}")
        assert _blocked_purge(pg_queue), worker.log()
        assert worker.proc.poll() is None
        # ... and once the lock is released the purge stops after its statement (a stop
        # ends it between two) and the process exits cleanly.
        holder.rollback()
        assert worker.wait_exit(20) == 0, worker.log()
        assert pg_queue.count("payload LIKE 'antiga-%%'") == old - 1, worker.log()
        assert [e["chave"] for e in pg_queue.effects()] == ["durante-o-purge"]
    finally:
        holder.close()
        worker.stop(timeout=20)
