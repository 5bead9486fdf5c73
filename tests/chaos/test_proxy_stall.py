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
  connection; the rescue must recognise them by their row lock (the runner's
  SELECT ... FOR UPDATE fence) and leave them alone: they finish with
  'sucesso' once, never re-queued.

Right before the replacement starts, the driver probes the locks of the long
tasks still 'processando' ("exposed" = running without their lock): 0 is
expected on PostgreSQL, at least 1 in client/server mode.

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
# (stall seconds, probe/replace the direct worker after, long task seconds) per mode.
# In client/server mode the server drops a silent session within heartbeat + timeout
# (2 + 2 s) of its last answer; the driver waits for that, then the replacement's
# rescue runs while the long tasks still run without their locks.
TIMINGS = {"db": (5.0, 2.5, 4.0), "cs": (8.0, 4.0, 8.5)}


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
        exposed = 0
        for i in run.faults(every=stall + 3.0, first=2.5, jitter=0.0, max_faults=2):
            run.enqueue_now([{"k": f"longa-{i}-{j}", "s": long_task, "p": 90}
                             for j in range(3)])
            time.sleep(0.5)  # let the long tasks be claimed
            for proxy in proxies:
                proxy.stall()
            stalled_at = time.monotonic()
            time.sleep(replace_after)
            found = _exposed_long_tasks(q, f"longa-{i}-%")
            while mode == "cs" and not found and time.monotonic() < stalled_at + stall - 2.5:
                time.sleep(0.1)  # the server drops silent sessions after heartbeat + timeout
                found = _exposed_long_tasks(q, f"longa-{i}-%")
            exposed += found
            direct = run.restart_worker(direct)  # its start-up rescue runs mid-stall
            time.sleep(max(0.0, stalled_at + stall - time.monotonic()))
            if i == 0:
                for proxy in proxies:
                    proxy.resume()
            else:
                run.notes.append(f"connections cut={sum(proxy.cut() for proxy in proxies)}")
            run.healed()
        run.notes.append(f"tasks running without their lock when the rescuer started={exposed}")
        outcome = run.finish()
        run.assert_workers_alive()
        outcome.assert_clean()
        if mode == "cs":
            assert exposed >= 1, "nenhuma tarefa longa ficou sem lock durante a paralisação"
        else:
            assert exposed == 0, "sessões paralisadas perderam o advisory lock"
        assert outcome.faults == 2
    finally:
        for proxy in proxies:
            proxy.close()


def _exposed_long_tasks(q, pattern: str) -> int:
    """Long tasks still 'processando' whose task lock is free right now (probed and
    released at once, through the same lock service the workers use)."""
    from nsj_queue_lib.config import Settings
    from nsj_queue_lib.engine.base import task_lock_key

    ids = [int(r["id"]) for r in q.db.sql(
        f"SELECT id FROM {q.qtable} WHERE chave_externa LIKE %s AND status = 'processando'",
        (pattern,))]
    free = 0
    if q.mode == "cs":
        from nsj_queue_lib.client.lock_client import SocketLocker

        locker = SocketLocker.from_settings(Settings.from_env(q.env(), load_dotenv=False),
                                            admin=True)
        try:
            for task_id in ids:
                key = task_lock_key(q.table, task_id)
                if locker.try_lock(key):
                    free += 1
                    locker.unlock(key)
        finally:
            locker.close()
        return free
    for task_id in ids:
        ns, obj = task_lock_key(q.table, task_id)
        if q.db.value("SELECT pg_try_advisory_lock(%s, %s) AS ok", (ns, obj)):
            free += 1
            q.db.value("SELECT pg_advisory_unlock(%s, %s) AS ok", (ns, obj))
    return free
