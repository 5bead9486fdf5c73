"""PostgreSQL: an idle worker's probes cost the same with 100,000 tasks scheduled for
later as with none (#13).  EXPLAIN (ANALYZE, BUFFERS) of each probe, and of the claim
that finds nothing (it answers the next due time too), in the generic plan a prepared
statement settles on, reads a bounded number of buffers.  (MySQL: the analogous EXPLAIN
test is tests/mysql/test_mysql_schema.py.)"""

from __future__ import annotations

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from tests.core.test_claim_position import _buffers, _explain_generic, _lock_ns, _nodes

SCHEDULED = 100_000


def _schedule(queue, n: int, status: str, prioridade: int) -> None:
    queue.sql(f"INSERT INTO {queue.table} (processo, payload, status, prioridade, data_hora) "
              "SELECT 'p', '{}', %s, %s, now() + interval '1 day' + g * interval '1 ms' "
              "FROM generate_series(1, %s) g", (status, prioridade, n))


def test_idle_probes_read_a_bounded_number_of_buffers_whatever_the_scheduled_backlog(pg_queue):
    session = DbSession.open(pg_queue.settings())
    try:
        repo = TaskRepository(session, pg_queue.table, pg_queue.sub_table)

        def probe_plans():
            return [_explain_generic(pg_queue, sql, {}) for sql in repo.idle_probe_sql()]

        def empty_claim_plan():
            params = {"lock_ns": _lock_ns(pg_queue), "unlock": None, "turn_ns": None,
                      "turn_id": None, "hand_id": None, "keep": False, "due_from": None,
                      **repo.position.claim_params()}
            sql = repo.q["task_claim_locked"].replace("%(limit)s", "1")
            return _explain_generic(pg_queue, sql, params)

        before = [_buffers(p) for p in [*probe_plans(), empty_claim_plan()]]
        # Scheduled for tomorrow, half of them at a higher priority than anything due.
        _schedule(pg_queue, SCHEDULED // 2, "pendente", 90)
        _schedule(pg_queue, SCHEDULED // 2, "agendada", 50)
        pg_queue.sql(f"ANALYZE {pg_queue.table}")
        probes, claim = probe_plans(), empty_claim_plan()
        for plan, was in zip(probes, before):
            assert _buffers(plan) <= 30, plan  # measured 6-8 (4 with an empty table)
            assert _buffers(plan) <= was + 10, (was, plan)  # a deeper index, no more
            assert {n.get("Index Name") for n in _nodes(plan)} - {None} == {
                f"ix_{pg_queue.fila}_due"}  # one range per status
        assert _buffers(claim) <= 100, claim  # measured 35 (4 with an empty table)
        assert pg_queue.count("status = 'processando'") == 0  # the claim took nothing
        assert pg_queue.count() == SCHEDULED
        # The answers: nothing due, the next task due in about a day.
        seconds, beyond_one = (session.fetch_value(sql) for sql in repo.idle_probe_sql())
        assert 86_000 < seconds <= 86_400 and beyond_one is False
    finally:
        session.close()
