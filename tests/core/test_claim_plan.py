"""The one-row claim's cached plan on a queue table that was empty when it was made (#23).

The claim is a prepared statement: once PostgreSQL settles on its generic plan, the
session keeps it until the table is analyzed again.  Made on a new (or quiet) queue, that
plan must still find the claimed row through the primary key, not scan the whole table on
every claim as the table grows.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import task_lock_key


@pytest.mark.parametrize("legacy", [False, True], ids=["plain", "compat"])
def test_one_row_claim_reads_the_row_by_its_key_on_a_growing_table(pg_queue, legacy):
    session = DbSession.open(pg_queue.settings())
    try:
        # (the generic plan at once, as a session reaches it after five executions)
        session.execute("SET plan_cache_mode = force_generic_plan")
        repo = TaskRepository(session, pg_queue.table, pg_queue.sub_table, legacy=legacy)
        lock_ns = task_lock_key(pg_queue.table, 0)[0]
        assert repo.task_claim_locked(lock_ns) == []  # prepared on the empty table
        # The table grows (finished tasks), and is not analyzed.
        pg_queue.sql(f"INSERT INTO {pg_queue.table} (processo, payload, status) "
                     "SELECT 'p', '{}', 'sucesso' FROM generate_series(1, 2000)")
        [task_id] = [r["id"] for r in pg_queue.sql(
            f"INSERT INTO {pg_queue.table} (processo, payload) VALUES ('p', '{{}}') "
            "RETURNING id")]
        claim = repo.claim_call(lock_ns, 1)
        text, args = session.prepared_text(claim.name, claim.params) or ("", ())
        assert text.startswith("EXECUTE ")
        plan = "\n".join(r["QUERY PLAN"] for r in session.fetch_all(
            "EXPLAIN (ANALYZE, COSTS OFF) " + text.replace("%", "%%") % args
            if args else "EXPLAIN (ANALYZE, COSTS OFF) " + text, None))
        table = pg_queue.table.split(".")[-1].strip('"')
        assert f"Seq Scan on {table} t" not in plan, plan
        assert "Index Scan using" in plan and "Index Cond: (id = $" in plan, plan
        # ... and the claim it ran took the task (the EXPLAIN ANALYZE executed it)
        [row] = pg_queue.sql(f"SELECT status FROM {pg_queue.table} WHERE id = %s", (task_id,))
        assert row["status"] == "processando"
    finally:
        session.close()
