"""Scenario 6 (PostgreSQL): a long open transaction pins xmin during the run.

Two runs of the same load on fresh queues: a baseline, then one with another
session holding a REPEATABLE READ snapshot (and an xid) for the whole run, so
no dead tuple of the queue can be removed.  Both record throughput and table
growth (pg_total_relation_size of the queue with its indexes and TOAST); the
pinned run also shows that VACUUM keeps the dead tuples until the transaction
ends, and frees them soon after: within a few listener-turn slices, the longest an
idle worker's wait for the turn holds a snapshot (the workers run with the default
30 s QUEUE_WAIT_NOTIFY_INTERVAL, so a wait pinning xmin for the whole interval
fails).  A slowdown is recorded, not asserted (shared CPU); loss and duplicates are
asserted as everywhere.
"""

from __future__ import annotations

import time

from nsj_queue_lib.engine.postgres.listener_turn import TURN_SLICE
from tests.chaos import report
from tests.chaos.harness import ChaosRun

SIZE = "SELECT pg_total_relation_size(%s::regclass) AS n"
DEAD = "SELECT n_dead_tup AS n FROM pg_stat_user_tables WHERE relid = %s::regclass"


def _load(q, label: str, pinned: bool) -> dict:
    relation = q.qtable
    run = ChaosRun(q, label, window=0.5)
    # The default poll interval: an idle wait must not hold its snapshot that long.
    run.start_workers(3, QUEUE_WAIT_NOTIFY_INTERVAL="30")
    before = int(q.db.value(SIZE, (relation,)))
    run.start_producer(run.items(sleep=(0.0, 0.01), fail_fraction=0.1), spread=0.0)
    run.healed()  # no fault: "recovery" is the time to drain the whole load
    if pinned:
        run.notes.append("xmin pinned by a REPEATABLE READ transaction")
    outcome = run.finish()
    growth = int(q.db.value(SIZE, (relation,))) - before
    q.db.sql(f"VACUUM {relation}")
    return {"outcome": outcome, "growth": growth,
            "throughput": outcome.tasks / max(outcome.elapsed_s, 1e-6),
            "dead_after_vacuum": int(q.db.value(DEAD, (relation,)) or 0)}


def _vacuum_after_pin(q, kept: int) -> int:
    """Dead tuples left by VACUUM once the pin ended, polled for a few slices: the idle
    workers' waits that began during the pin hold its xmin until their slice ends."""
    deadline = time.monotonic() + 5 * TURN_SLICE
    while True:
        q.db.sql(f"VACUUM {q.qtable}")
        freed = int(q.db.value(DEAD, (q.qtable,)) or 0)
        if freed < kept or time.monotonic() >= deadline:
            return freed
        time.sleep(0.2)


def test_long_transaction_pinning_xmin(make_queue):
    base = _load(make_queue("postgres", "db"), "6a. baseline for 6b (no long transaction)",
                 pinned=False)
    base["outcome"].assert_clean()

    q = make_queue("postgres", "db")
    pin = q.target.connect(autocommit=False)
    try:
        with pin.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT txid_current(), count(*) FROM pg_class")
        xmin = q.db.value("SELECT backend_xmin::text AS x FROM pg_stat_activity "
                          "WHERE pid = %s", (pin.get_backend_pid(),))
        assert xmin is not None, "a transação longa não segurou o xmin"
        pinned = _load(q, "6b. long transaction pinning xmin", pinned=True)
        kept = pinned["dead_after_vacuum"]
    finally:
        pin.rollback()
        pin.close()
    freed = _vacuum_after_pin(q, kept)

    ratio = pinned["throughput"] / base["throughput"]
    for result, row in ((base, report.ROWS[-2]), (pinned, report.ROWS[-1])):
        row["notes"] += (f"; {result['throughput']:.0f} tasks/s; table +"
                         f"{result['growth'] / 1024:.0f} KiB; dead tuples after VACUUM="
                         f"{result['dead_after_vacuum']}")
    report.ROWS[-1]["notes"] += (f"; throughput {ratio:.0%} of baseline; after the "
                                 f"transaction ended VACUUM left {freed} dead tuples")
    report.write()
    pinned["outcome"].assert_clean()
    assert kept > 0, "com o xmin preso o VACUUM não deveria remover as tuplas mortas"
    assert freed < kept
