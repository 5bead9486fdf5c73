"""MySQL native claim-ahead under concurrency (real MariaDB, 4 real worker processes):
tasks of three priorities arriving steadily, a fifth of them failing once (their retries
are 'agendada' rows), must each run to one committed success, and no attempt may fail
for the claim's own sake (a deadlock between the workers' claim-ahead and success
UPDATEs)."""

from __future__ import annotations

import json
import random
import time

from tests.fixtures.processes import wait_all_ready
from tests.fixtures.queue import effects_by_key

TASKS = 1000
RATE = 250.0  # tasks per second: a small backlog, the claim-ahead path of every task


def test_workers_claiming_ahead_never_fail_a_task_by_deadlock(mariadb_queue):
    # Before 2ffb8a2 the claim-ahead read ix_claim with locks at REPEATABLE READ: next-key
    # locks on every entry it passed, which the other workers' success UPDATEs waited
    # for; 1 to 8 attempts per run failed with 1213 (and ran again: effects outside the
    # database twice).
    workers = [mariadb_queue.start_worker(QUEUE_MAX_RETRY="5") for _ in range(4)]
    wait_all_ready(workers)
    rnd = random.Random(1)
    conn = mariadb_queue.new_conn()
    client = mariadb_queue.client(conn)
    started = time.monotonic()
    try:
        for i in range(TASKS):
            payload = {"efeito": f"k{i}"}
            if rnd.random() < 0.2:
                payload["fail_until"] = 2
            client.insert_task("t", "t", "t", None, json.dumps(payload),
                               prioridade=rnd.choice([40, 50, 60]))
            conn.commit()
            delay = started + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the arrival schedule (not a wait for a result)
    finally:
        conn.close()
    mariadb_queue.wait_idle(180)
    effects = effects_by_key(mariadb_queue)
    assert len(effects) == TASKS and set(effects.values()) == {1}, {
        k: n for k, n in effects.items() if n != 1}
    unplanned = mariadb_queue.rows("status = 'falha' AND mensagem NOT LIKE %s",
                                   ("%falha programada%",))
    assert unplanned == [], (len(unplanned), [r["mensagem"] for r in unplanned[:3]])
    assert all(w.proc.poll() is None for w in workers)
