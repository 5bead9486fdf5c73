"""The native claim as a MariaDB prepared statement: parsed once per connection, then
EXECUTE ... USING the values; same rows as the statement's text."""

from __future__ import annotations

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.queue_client import QueueClient


def _status(repo: TaskRepository, name: str) -> int:
    row = repo.session.fetch_one("SHOW SESSION STATUS LIKE %(n)s", {"n": name})
    return int(row["Value"])


def _insert(repo: TaskRepository, q, **kwargs) -> int:
    return QueueClient(repo.session.conn, q.table).insert_task(
        "o", "d", "proc", None, "p", **kwargs)


def _claim(repo: TaskRepository) -> list:
    repo.session.begin()
    try:
        return [r["id"] for r in repo.task_claim_skip_locked(1, 16)]
    finally:
        repo.session.rollback()


def test_the_claim_is_prepared_once_and_executed_each_time(repo, myqueue):
    low = _insert(repo, myqueue, prioridade=10)
    high = _insert(repo, myqueue, prioridade=90)
    prepared, executed = (_status(repo, "Com_prepare_sql"), _status(repo, "Com_execute_sql"))
    assert [_claim(repo) for _ in range(3)] == [[high]] * 3  # rolled back: the same row
    assert _status(repo, "Com_prepare_sql") - prepared == 1
    assert _status(repo, "Com_execute_sql") - executed == 3
    repo.session.begin()
    rows = repo.task_claim_skip_locked(5, 16)  # another limit: the same statement
    repo.session.rollback()
    assert [r["id"] for r in rows] == [high, low]
    assert rows[0]["prioridade"] == 90 and rows[0]["payload"] == "p"


def test_a_claim_deallocated_by_task_code_is_prepared_again(repo, myqueue):
    task_id = _insert(repo, myqueue)
    assert _claim(repo) == [task_id]
    repo.session.execute("DEALLOCATE PREPARE nsjq_claim_skip_locked")
    assert _claim(repo) == [task_id]


def test_the_prepared_claim_skips_rows_another_session_holds(repo, myqueue, settings):
    from nsj_queue_lib.db.session import DbSession

    first, second = _insert(repo, myqueue), _insert(repo, myqueue)
    other = TaskRepository(DbSession.open(settings), settings.queue_table)
    try:
        other.session.begin()
        assert [r["id"] for r in other.task_claim_skip_locked(1, 16)] == [first]
        assert _claim(repo) == [second]  # SKIP LOCKED inside the prepared statement
        other.session.rollback()
    finally:
        other.session.close()
