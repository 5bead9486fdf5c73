"""MySQL native claim after a statement that fails once its named locks are taken
(MariaDB, real table, AFTER trigger).

GET_LOCK is session-scoped: the ROLLBACK after the error puts the rows back to
'pendente' but does not release the locks, and every other worker's mark
(GET_LOCK(..., 0)) would skip those tasks until this connection ends.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.mysql_driver import error_classes
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.mysql.backend import MysqlGuard, lock_name, lock_prefix


def _fail_on_nth_mark(mariadb_queue) -> None:
    """An AFTER UPDATE trigger that refuses the @nsjq_falha_em-th row marked
    'processando' by the session that set it (a session variable: other sessions and
    later statements of that session pass once it is cleared)."""
    mariadb_queue.sql(f"""CREATE TRIGGER {mariadb_queue.quote(mariadb_queue.schema)}.falha_claim
        AFTER UPDATE ON {mariadb_queue.qtable}
        FOR EACH ROW BEGIN
          IF NEW.status = 'processando' AND @nsjq_falha_em IS NOT NULL THEN
            SET @nsjq_marcadas = coalesce(@nsjq_marcadas, 0) + 1;
            IF @nsjq_marcadas >= @nsjq_falha_em THEN
              SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'claim recusado pelo teste';
            END IF;
          END IF;
        END""")


def _arm(session: DbSession, nth) -> None:
    session.execute("SET @nsjq_falha_em = %(n)s, @nsjq_marcadas = 0", {"n": nth})


def _guard(settings, session: DbSession) -> MysqlGuard:
    return MysqlGuard(TaskRepository(session, settings.queue_table), settings.queue_table,
                      lock_prefix(settings))


def _lock_users(mariadb_queue, ids) -> list:
    prefix = lock_prefix(mariadb_queue.settings())
    return [mariadb_queue.value("SELECT IS_USED_LOCK(%s)",
                                (lock_name(prefix, mariadb_queue.task_key(i)),))
            for i in ids]


def _run(session: DbSession, guard: MysqlGuard, tarefa: dict) -> None:
    session.begin()
    assert guard.finish(tarefa, "feito")
    session.commit()
    guard.release(tarefa)


@pytest.mark.parametrize("limit", [1, 2])
def test_a_claim_that_fails_after_get_lock_leaves_its_tasks_to_other_workers(mariadb_queue, limit):
    settings = mariadb_queue.settings()
    a, b = DbSession.open(settings), DbSession.open(settings)
    try:
        guard_a, guard_b = _guard(settings, a), _guard(settings, b)
        ids = [mariadb_queue.insert({"n": n}) for n in range(limit)]
        _fail_on_nth_mark(mariadb_queue)
        _arm(a, limit)  # the mark fails on its last row, every row's GET_LOCK taken

        with pytest.raises(error_classes("Error"), match="claim recusado pelo teste"):
            guard_a.claim(limit)
        assert [mariadb_queue.row(i)["status"] for i in ids] == ["pendente"] * limit
        assert _lock_users(mariadb_queue, ids) == [None] * limit
        _arm(a, None)

        # Another worker claims and runs them, once; the first one never gets them.
        claimed = guard_b.claim(limit)
        assert sorted(t["id"] for t in claimed) == ids
        assert guard_a.claim(limit) == []
        for tarefa in claimed:
            _run(b, guard_b, tarefa)
        assert guard_b.claim(limit) == [] and guard_a.claim(limit) == []
        assert [mariadb_queue.row(i)["status"] for i in ids] == ["sucesso"] * limit
        assert mariadb_queue.count() == limit
        assert _lock_users(mariadb_queue, ids) == [None] * limit
    finally:
        b.close()
        a.close()


def test_a_success_that_fails_after_marking_the_next_task_leaves_it_to_other_workers(mariadb_queue):
    """Claim-ahead: the success UPDATE takes the next task's named lock, then fails."""
    settings = mariadb_queue.settings()
    a, b = DbSession.open(settings), DbSession.open(settings)
    try:
        guard_a, guard_b = _guard(settings, a), _guard(settings, b)
        first = mariadb_queue.insert({"n": 1}, prioridade=90)
        [tarefa] = guard_a.claim()
        assert tarefa["id"] == first
        second = mariadb_queue.insert({"n": 2})
        _fail_on_nth_mark(mariadb_queue)
        a.begin()
        _arm(a, 1)
        with pytest.raises(error_classes("Error"), match="claim recusado pelo teste"):
            guard_a.finish(tarefa, "feito")
        a.rollback()
        _arm(a, None)
        assert mariadb_queue.row(second)["status"] == "pendente"
        assert _lock_users(mariadb_queue, [second]) == [None]

        [other] = guard_b.claim()
        assert other["id"] == second
        _run(b, guard_b, other)
        assert mariadb_queue.row(second)["status"] == "sucesso"
        assert mariadb_queue.row(first)["status"] == "processando"  # still a's, to finish or rescue
        assert _lock_users(mariadb_queue, [second]) == [None]
    finally:
        b.close()
        a.close()
