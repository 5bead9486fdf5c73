"""Scenario 5: a half-open network path (tests/chaos/proxy.py).

Two of the three workers reach the database (PostgreSQL) or the socket
server (client/server mode on MariaDB) through a TCP proxy; the third is
direct.  Twice, right after three long tasks were enqueued, the proxy stalls
without closing anything (no FIN, no RST: bytes just stop).  During each stall
the direct worker is killed and replaced, so its start-up rescue pass looks at
the tasks of the stalled workers:

* PostgreSQL: the stalled sessions are alive for the server, so their advisory
  locks still protect their tasks.
* Client/server: the socket server drops the silent sessions (heartbeat) and
  releases their locks while their tasks still run on a healthy database
  connection; the rescue must then wait on the task's row lock and leave it
  alone (it finishes with 'sucesso' once, never re-queued).

The first stall then resumes (the bytes flow again); the second ends with
every proxied connection reset.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.harness import SCALE, ChaosRun
from tests.chaos.proxy import ChaosProxy
from tests.server.socket_server_helpers import HOST

TARGETS = [pytest.param("postgres", "db", id="postgres"),
           pytest.param("mariadb", "cs", id="mariadb-cs", marks=pytest.mark.mysql)]
# (stall seconds, direct worker replaced after, long task seconds) per mode.  In
# client/server mode the server drops a silent session after heartbeat + timeout
# (2 + 2 s), so the replacement's rescue runs after the locks are gone and while
# the long tasks still run.
TIMINGS = {"db": (5.0, 2.5, 4.0), "cs": (7.0, 4.8, 6.5)}


@pytest.mark.parametrize("kind,mode", TARGETS)
def test_half_open_proxy_stalls_then_resumes_then_is_cut(make_queue, kind, mode):
    stall, replace_after, long_task = TIMINGS[mode]
    q = make_queue(kind, mode)
    if mode == "cs":
        q.start_server()
        proxies = [ChaosProxy((HOST, q.notify_port)).start(),
                   ChaosProxy((HOST, q.lock_port)).start()]
        overrides = {"NOTIFY_SERVICE_PORT": str(proxies[0].port),
                     "LOCK_SERVICE_PORT": str(proxies[1].port)}
        path = "workers <-> socket server"
    else:
        proxies = [ChaosProxy(q.target.socket_path).start()]
        overrides = {"DB_HOST": HOST, "DB_PORT": str(proxies[0].port)}
        path = "workers <-> PostgreSQL"
    try:
        run = ChaosRun(q, f"5. half-open proxy ({path}): stall {stall:.0f} s -> resume, "
                          f"stall {stall:.0f} s -> cut",
                       window=max(20.0 * SCALE, 4.0 + 2 * (stall + 3.0)))
        q.worker_overrides = overrides
        run.start_workers(2)
        q.worker_overrides = {}
        direct = run.start_workers(1)[0]
        run.start_producer(run.items())
        fenced = 0
        for i in run.faults(every=stall + 3.0, first=2.5, jitter=0.0, max_faults=2):
            run.enqueue_now([{"k": f"longa-{i}-{j}", "s": long_task, "p": 90}
                             for j in range(3)])
            time.sleep(0.5)  # let the long tasks be claimed
            for proxy in proxies:
                proxy.stall()
            time.sleep(replace_after)
            direct = run.restart_worker(direct)  # its start-up rescue runs mid-stall
            fenced = max(fenced, _rescue_waits(q, stall - replace_after))
            if i == 0:
                for proxy in proxies:
                    proxy.resume()
            else:
                run.notes.append(f"connections cut={sum(proxy.cut() for proxy in proxies)}")
            run.healed()
        run.notes.append(f"rescue waiting on a running task's row lock={fenced}")
        dropped = 0
        if mode == "cs":
            dropped = sum(1 for line in q.server.log().splitlines()
                          if "heartbeat" in line and "lock(s) liberado(s)" in line
                          and "; 0 lock(s)" not in line)
            run.notes.append(f"task locks dropped by heartbeat mid-task={dropped}")
        outcome = run.finish()
        run.assert_workers_alive()
        outcome.assert_clean()
        if mode == "cs":
            assert dropped >= 1, "o servidor não derrubou sessão com tarefa em curso"
            assert fenced >= 1, "o resgate não encontrou nenhuma tarefa em curso sem lock"
        assert outcome.faults == 2
    finally:
        for proxy in proxies:
            proxy.close()


def _rescue_waits(q, seconds: float) -> int:
    """Poll for `seconds`; the most rescue transactions seen waiting on a row lock
    (the fence of a task whose worker lost its socket-server lock but still runs it)."""
    if q.is_mysql:
        sql = ("SELECT count(*) AS n FROM information_schema.INNODB_TRX "
               "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s")
        params = (f"%{q.schema}%",)
    else:
        sql = ("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               "AND application_name = 'nsj_queue_lib:retry_thread'")
        params = None
    seen = 0
    deadline = time.monotonic() + seconds
    from tests.server.socket_server_helpers import RawClient
    from tests.chaos.harness import TOKEN
    while time.monotonic() < deadline:
        seen = max(seen, int(q.db.value(sql, params) or 0))
        if q.is_mysql:
            with RawClient(q.lock_port) as raw:
                raw.hello(TOKEN); st = raw.call("status")["result"]
            print("DEBUG", time.strftime("%H:%M:%S"), round(time.time() % 1, 2), st["locks"], st["clients"], q.db.sql(f"SELECT id, status FROM {q.qtable} WHERE status='processando'"), q.db.sql("SELECT trx_state, trx_query FROM information_schema.INNODB_TRX WHERE trx_state <> 'RUNNING'"))
        time.sleep(0.05)
    return seen
