"""MySQL native mode on a MariaDB whose prepared statements are all taken.

On MariaDB the native claim and the success UPDATEs are server-side prepared statements
(db/session.py).  When the server's max_prepared_stmt_count is reached (other
applications on the same server, or an operator's low setting), PREPARE fails with error
1461: the session then sends the same statements as text and keeps working.  The shared
MariaDB of the tests is not ours to reconfigure: these tests start a private mariadbd
with max_prepared_stmt_count=0 and run real workers against it.
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

WARNING = "limite de prepared statements do servidor"


@pytest.fixture(scope="module")
def no_prepare_server(tmp_path_factory) -> Iterator[MySqlServer]:
    """A private MariaDB that refuses every PREPARE (max_prepared_stmt_count=0)."""
    work = Path(tmp_path_factory.mktemp("sem_prepare")) / "mariadb"
    with private_mariadb(work, ["max-prepared-stmt-count=0"]) as server:
        yield server


@pytest.mark.parametrize("batch", ["1", "5"])
def test_native_worker_runs_tasks_when_the_server_refuses_prepare(
        no_prepare_server, tmp_path, batch):
    """A backlog (the claim-ahead path: the next task claimed in the finishing task's
    transaction), a retried task and tasks arriving one by one to an idle worker: each
    runs once and ends 'sucesso'; the worker warns once for its connection.  Failed
    before the fix: every claim failed with error 1461 and no task ran."""
    queue = Queue.create(no_prepare_server, log_dir=tmp_path)
    try:
        backlog = queue.insert_many([{"efeito": f"b{i}"} for i in range(8)])
        retried = queue.insert({"efeito": "retry", "fail_until": 2})
        worker = queue.start_worker(QUEUE_BATCH_SIZE=batch)
        wait_ready(worker)
        for task_id in backlog:
            queue.wait_status(task_id, "sucesso", timeout=30)
        chain = queue.wait_chain_done(retried, timeout=30)
        assert [r["status"] for r in chain] == ["falha", "sucesso"], chain
        late = []
        for i in range(3):  # one at a time, to the idle worker
            late.append(queue.insert({"efeito": f"l{i}"}))
            queue.wait_status(late[-1], "sucesso", timeout=30)
        assert sorted(e["chave"] for e in queue.effects()) == sorted(
            [f"b{i}" for i in range(8)] + ["retry"] + [f"l{i}" for i in range(3)])
        assert [r["status"] for r in queue.rows("id IN %(ids)s",
                                                {"ids": backlog + late})] == ["sucesso"] * 11
        assert queue.count() == 13  # no attempt but the retry's
        assert worker.proc.poll() is None
        log = worker.log()
        assert log.count(WARNING) == 1, log  # one connection, warned once
        assert "(1461," not in log, log  # no statement failed with the driver's error
    finally:
        queue.destroy()


def test_the_private_server_refuses_prepare(no_prepare_server):
    """The premise of the test above, on the private server itself."""
    conn = no_prepare_server.connect()
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.err.MySQLError) as info:
                cur.execute("PREPARE nsjq_premissa FROM 'SELECT 1'")
            assert info.value.args[0] == 1461
    finally:
        conn.close()
