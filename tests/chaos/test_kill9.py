"""Scenario 1: kill -9 of a random worker every ~1.5 s, each replaced at once."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosRun

TARGETS = [pytest.param("postgres", "db", {}, id="postgres"),
           # Batch mode: a kill rolls back the whole batch of the killed worker.
           pytest.param("postgres", "db", {"QUEUE_BATCH_SIZE": 5}, id="postgres-batch"),
           # Concurrency: a kill interrupts every task thread of the process at once.
           pytest.param("postgres", "db", {"QUEUE_CONCURRENCY": 4}, id="postgres-concurrency"),
           # Through PgBouncer in transaction pooling (4 server connections, fewer than the
           # workers' connections): leases, rescued once expired (QUEUE_LEASE_SECONDS=3).
           pytest.param("postgres", "pooled", {}, id="postgres-pgbouncer"),
           # ... with 4 task threads per process: 12 tasks at once over 4 server connections
           pytest.param("postgres", "pooled", {"QUEUE_CONCURRENCY": 4},
                        id="postgres-pgbouncer-concurrency"),
           pytest.param("postgres", "pooled", {"QUEUE_BATCH_SIZE": 5},
                        id="postgres-pgbouncer-batch"),
           pytest.param("mariadb", "cs", {}, id="mariadb-cs", marks=pytest.mark.mysql),
           # MySQL native: the named lock dies with the killed connection.
           pytest.param("mariadb", "db", {}, id="mariadb-native", marks=pytest.mark.mysql),
           # #13 item 6 on MySQL native: batch and concurrency variants.
           pytest.param("mariadb", "db", {"QUEUE_BATCH_SIZE": 5}, id="mariadb-native-batch",
                        marks=pytest.mark.mysql),
           pytest.param("mariadb", "db", {"QUEUE_CONCURRENCY": 4},
                        id="mariadb-native-concurrency", marks=pytest.mark.mysql)]


@pytest.mark.parametrize("kind,mode,extra", TARGETS)
def test_kill9_random_worker_every_few_seconds(make_queue, kind, mode, extra):
    q = make_queue(kind, mode)
    if mode == "cs":
        q.start_server()
    label = "".join(f", {k}={v}" for k, v in extra.items())
    run = ChaosRun(q, f"1. kill -9 random worker every ~1.5 s (restarted){label}")
    run.start_workers(3, **extra)
    run.start_producer(run.items())
    for _ in run.faults(every=1.5):
        victim = run.rng.choice(q.workers)
        run.restart_worker(victim)
        run.healed()
    outcome = run.finish()
    run.assert_workers_alive()
    outcome.assert_clean()
    assert outcome.faults >= 3
