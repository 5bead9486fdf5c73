"""Scenario 3 (PostgreSQL only): pg_terminate_backend of worker sessions, repeatedly.

Every ~1 s the driver terminates one session running a task ('idle in
transaction' or 'active'), and every third time every session of the workers
(consumers, rescue/notify/purge jobs, heartbeats).
"""

from __future__ import annotations

from tests.chaos.harness import ChaosRun

SESSIONS = ("SELECT pid, state FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND application_name LIKE 'nsj_queue_lib:%%'")


def test_pg_terminate_backend_of_worker_sessions_repeatedly(make_queue):
    q = make_queue("postgres", "db")
    run = ChaosRun(q, "3. pg_terminate_backend of worker sessions every ~1 s")
    run.start_workers(3)
    run.start_producer(run.items())
    terminated = mid_task = 0
    for i in run.faults(every=1.0):
        sessions = q.db.sql(SESSIONS)
        busy = [s for s in sessions if s["state"] in ("idle in transaction", "active")]
        victims = sessions if i % 3 == 2 else (busy[:1] or sessions[:1])
        for victim in victims:
            q.db.sql("SELECT pg_terminate_backend(%s)", (victim["pid"],))
        terminated += len(victims)
        mid_task += sum(1 for v in victims if v in busy)
        run.healed()
    run.notes.append(f"sessions terminated={terminated} ({mid_task} mid-task)")
    outcome = run.finish()
    run.assert_workers_alive()
    outcome.assert_clean()
    assert mid_task >= 1, "nenhuma sessão foi encerrada no meio de uma tarefa"
