"""Scenario 2: the database restarts mid-run.

PostgreSQL: the suite's embedded server is restarted with pg_ctl every ~2.7 s
(twice in the default run), alternately cleanly (-m fast) and as a crash
(-m immediate, then crash recovery).
MariaDB (client/server mode and MySQL native mode): the shared server is killed with
SIGKILL and started again; marked `restarts_shared_db` because other sessions use it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosRun, kill_process
from tests.fixtures.waiting import eventually

MARIADBD = "/usr/sbin/mariadbd"


@pytest.mark.parametrize("mode,extra", [
    pytest.param("db", {}, id="per-task"),
    pytest.param("db", {"QUEUE_BATCH_SIZE": 5}, id="batch"),
    pytest.param("db", {"QUEUE_CONCURRENCY": 4}, id="concurrency"),
    # the workers through PgBouncer (transaction pooling), which stays up meanwhile
    pytest.param("pooled", {}, id="pgbouncer")])
def test_postgres_restart_mid_run(make_queue, mode, extra):
    q = make_queue("postgres", mode)
    label = "".join(f", {k}={v}" for k, v in extra.items())
    run = ChaosRun(q, "2. database restart (pg_ctl -m fast / -m immediate, alternating)"
                      + label)
    run.start_workers(3, **extra)
    run.start_producer(run.items())
    took = {"fast": [], "immediate": []}
    for i in run.faults(every=2.7, first=2.7, jitter=0.0):  # more restarts in a soak run
        mode = "fast" if i % 2 == 0 else "immediate"
        took[mode].append(q.target.restart(mode))
        run.healed()
    for mode, times in took.items():
        run.notes.append(f"{len(times)} x {mode} (max {max(times, default=0):.1f} s)")
    outcome = run.finish()
    run.assert_workers_alive()
    outcome.assert_clean()
    assert took["fast"] and took["immediate"]


def _restart_mariadb(q) -> float:
    """SIGKILL the MariaDB server and start it again; seconds until it answers."""
    started = time.monotonic()
    command = os.environ.get("NSJQ_CHAOS_MYSQL_RESTART_CMD")
    if command:
        subprocess.run(shlex.split(command), check=True, timeout=120)
    else:
        pid_file = q.db.value("SELECT @@pid_file AS f")
        pid = int(Path(pid_file).read_text().strip())
        assert os.path.realpath(f"/proc/{pid}/exe") == MARIADBD, pid
        kill_process(pid, signal.SIGKILL)
        eventually(lambda: not Path(f"/proc/{pid}").exists(), 30, interval=0.05,
                   message="mariadbd terminou")
        subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background",
                        "--exec", MARIADBD], check=True, timeout=30)

    def answers() -> bool:
        try:
            q.target.connect().close()
            return True
        except Exception:
            return False

    eventually(answers, 120, interval=0.2, message="MariaDB de volta")
    return time.monotonic() - started


def _can_restart_mariadb() -> str:
    if os.environ.get("NSJQ_CHAOS_MYSQL_RESTART_CMD"):
        return ""
    if not os.path.exists(MARIADBD) or os.geteuid() != 0:
        return (f"sem permissão/binário para reiniciar {MARIADBD} "
                "(defina NSJQ_CHAOS_MYSQL_RESTART_CMD)")
    return ""


@pytest.mark.mysql
@pytest.mark.restarts_shared_db
@pytest.mark.parametrize("mode,extra", [
    pytest.param("cs", {}, id="client-server"),
    pytest.param("db", {}, id="native"),
    # #13 item 6 on MySQL native: batch and concurrency variants.
    pytest.param("db", {"QUEUE_BATCH_SIZE": 5}, id="native-batch"),
    pytest.param("db", {"QUEUE_CONCURRENCY": 4}, id="native-concurrency")])
def test_mariadb_restart_mid_run(make_queue, mode, extra):
    problem = _can_restart_mariadb()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    q = make_queue("mariadb", mode)
    if mode == "cs":
        q.start_server()
    label = "".join(f", {k}={v}" for k, v in extra.items())
    run = ChaosRun(q, "2. database restart (mariadbd SIGKILL + start)"
                      + (" (MySQL nativo)" if mode == "db" else "") + label)
    run.start_workers(3, **extra)
    run.start_producer(run.items())
    for _ in run.faults(every=run.window / 2, jitter=0.0, max_faults=1):
        took = _restart_mariadb(q)
        run.notes.append(f"MariaDB down {took:.1f} s")
        run.healed()
    outcome = run.finish()
    run.assert_workers_alive()
    if mode == "cs":
        assert q.server.proc.poll() is None, q.server.log()
    outcome.assert_clean()
