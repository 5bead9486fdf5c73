"""MySQL native mode on a MariaDB that writes its binary log in STATEMENT format.

InnoDB refuses every write of a session at READ COMMITTED while the binary log is on in
STATEMENT format (error 1665: a READ COMMITTED write can only be logged row by row), so
the worker must not switch its session to READ COMMITTED there.  The shared MariaDB of
the tests has no binary log and its global variables are not ours to change: this test
starts a private mariadbd (a scratch data directory, its own port) with the binary log
in STATEMENT format, and runs a real worker process against it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pymysql
import pytest

from tests.fixtures.database import MySqlServer
from tests.fixtures.processes import wait_ready
from tests.fixtures.queue import Queue

pytestmark = pytest.mark.mysql


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def statement_binlog_server(tmp_path: Path) -> Iterator[MySqlServer]:
    """A private MariaDB with log-bin and binlog_format=STATEMENT."""
    missing = [p for p in ("mariadbd", "mariadb-install-db") if shutil.which(p) is None
               and not Path("/usr/sbin", p).exists()]
    if missing:
        message = f"MariaDB privado indisponível (faltam {', '.join(missing)})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    work = tmp_path / "mariadb"
    data = work / "data"
    work.mkdir()
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    port = _free_port()
    cnf = work / "my.cnf"
    cnf.write_text(f"[mariadbd]\ndatadir={data}\nport={port}\nbind-address=127.0.0.1\n"
                   f"socket={work}/mysqld.sock\npid-file={work}/mysqld.pid\nuser=root\n"
                   f"log-bin={work}/binlog\nbinlog-format=STATEMENT\nserver-id=1\n"
                   "innodb_buffer_pool_size=32M\nskip-name-resolve\n")
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen([mariadbd, f"--defaults-file={cnf}"], stdout=log,
                            stderr=subprocess.STDOUT)
    server = MySqlServer(host="127.0.0.1", port=port, user="root", password="")
    try:
        deadline = time.monotonic() + 60
        while server.reachable() is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("mariadbd privado não subiu:\n"
                                     + (work / "server.log").read_text(errors="replace"))
            time.sleep(0.2)
        conn = server.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format")
            assert cur.fetchone() == (1, "STATEMENT")
        conn.close()
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


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
