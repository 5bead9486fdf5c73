"""MySQL native mode on a MariaDB that writes its binary log in STATEMENT format.

InnoDB refuses every write of a session at READ COMMITTED while the binary log is on in
STATEMENT format (error 1665: a READ COMMITTED write can only be logged row by row), so
the worker must not switch its session to READ COMMITTED there.  The shared MariaDB of
the tests has no binary log and its global variables are not ours to change: this test
starts a private mariadbd (a scratch data directory, its own port) with the binary log
in STATEMENT format, and runs a real worker process against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pymysql
import pytest

from tests.fixtures.database import MySqlServer
from tests.fixtures.private_mariadb import private_mariadb
from tests.fixtures.processes import wait_ready
from tests.fixtures.queue import Queue

pytestmark = pytest.mark.mysql


@pytest.fixture
def statement_binlog_server(tmp_path: Path) -> Iterator[MySqlServer]:
    """A private MariaDB with log-bin and binlog_format=STATEMENT."""
    work = tmp_path / "mariadb"
    with private_mariadb(work, [f"log-bin={work}/binlog", "binlog-format=STATEMENT",
                                "server-id=1"]) as server:
        conn = server.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format")
            assert cur.fetchone() == (1, "STATEMENT")
        conn.close()
        yield server


def test_native_worker_runs_tasks_on_a_server_with_a_statement_binary_log(
        statement_binlog_server, tmp_path):
    """Every task runs once, a failing one is retried (its 'agendada' attempt) and
    succeeds.  Failed before the fix: every claim of the worker (a session at READ
    COMMITTED) failed with error 1665 and no task ever ran."""
    queue = Queue.create(statement_binlog_server, log_dir=tmp_path)
    try:
        worker = queue.start_worker()
        wait_ready(worker)
        ids = [queue.insert({"efeito": f"s{i}"}) for i in range(5)]
        retried = queue.insert({"efeito": "retry", "fail_until": 2})
        for task_id in ids:
            queue.wait_status(task_id, "sucesso", timeout=30)
        chain = queue.wait_chain_done(retried, timeout=30)
        assert [r["status"] for r in chain] == ["falha", "sucesso"], chain
        assert sorted(e["chave"] for e in queue.effects()) == sorted(
            [f"s{i}" for i in range(5)] + ["retry"])
        assert worker.proc.poll() is None
        log = worker.log()
        assert "impossible to write to binary log" not in log
        assert "formato STATEMENT" in log  # the worker says why it stays at its level
    finally:
        queue.destroy()


def test_the_binary_log_server_refuses_read_committed_writes(statement_binlog_server):
    """The premise of the test above, on the private server itself."""
    conn = statement_binlog_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE premissa")
            cur.execute("CREATE TABLE premissa.t (id int PRIMARY KEY) ENGINE=InnoDB")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            with pytest.raises(pymysql.err.MySQLError) as info:
                cur.execute("INSERT INTO premissa.t VALUES (1)")
            assert info.value.args[0] == 1665
    finally:
        conn.close()


def test_batch_mode_is_refused_at_start_on_a_server_with_a_statement_binary_log(
        statement_binlog_server, tmp_path):
    """QUEUE_BATCH_SIZE > 1 needs READ COMMITTED (at REPEATABLE READ the batch claim would
    hold the producers' INSERTs until the batch commits), which such a server refuses for
    writes: the worker stops at start with a configuration error (exit 2) that says why
    and what to do, and runs nothing; a QUEUE_BATCH_SIZE=1 worker then runs the task.
    Failed before the fix: the batch worker's claims failed with error 1665 and it
    restarted in a loop, never exiting."""
    queue = Queue.create(statement_binlog_server, log_dir=tmp_path)
    try:
        task_id = queue.insert({"efeito": "lote"})
        batch = queue.start_worker(QUEUE_BATCH_SIZE="5")
        try:
            code = batch.wait_exit(30)
        except Exception:
            raise AssertionError(f"o worker em lote não parou:\n{batch.log()}") from None
        log = batch.log()
        assert code == 2, log
        assert "formato STATEMENT" in log and "QUEUE_BATCH_SIZE=1" in log, log
        assert "binlog_format=ROW ou MIXED" in log, log
        assert "impossible to write to binary log" not in log
        assert queue.row(task_id)["status"] == "pendente"
        assert queue.effects() == []
        single = queue.start_worker()
        queue.wait_status(task_id, "sucesso", timeout=30)
        assert [e["chave"] for e in queue.effects()] == ["lote"]
        assert single.proc.poll() is None
    finally:
        queue.destroy()
