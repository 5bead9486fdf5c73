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


def test_the_claim_is_prepared_once_and_executed_each_time(repo, mariadb_queue):
    low = _insert(repo, mariadb_queue, prioridade=10)
    high = _insert(repo, mariadb_queue, prioridade=90)
    prepared, executed = (_status(repo, "Com_prepare_sql"), _status(repo, "Com_execute_sql"))
    assert [_claim(repo) for _ in range(3)] == [[high]] * 3  # rolled back: the same row
    assert _status(repo, "Com_prepare_sql") - prepared == 1
    assert _status(repo, "Com_execute_sql") - executed == 3
    repo.session.begin()
    rows = repo.task_claim_skip_locked(5, 16)  # another limit: the same statement
    repo.session.rollback()
    assert [r["id"] for r in rows] == [high, low]
    assert rows[0]["prioridade"] == 90 and rows[0]["payload"] == "p"


def test_a_claim_deallocated_by_task_code_is_prepared_again(repo, mariadb_queue):
    task_id = _insert(repo, mariadb_queue)
    assert _claim(repo) == [task_id]
    repo.session.execute("DEALLOCATE PREPARE nsjq_claim_skip_locked")
    assert _claim(repo) == [task_id]


def test_the_prepared_claim_skips_rows_another_session_holds(repo, mariadb_queue, settings):
    from nsj_queue_lib.db.session import DbSession

    first, second = _insert(repo, mariadb_queue), _insert(repo, mariadb_queue)
    other = TaskRepository(DbSession.open(settings), settings.queue_table)
    try:
        other.session.begin()
        assert [r["id"] for r in other.task_claim_skip_locked(1, 16)] == [first]
        assert _claim(repo) == [second]  # SKIP LOCKED inside the prepared statement
        other.session.rollback()
    finally:
        other.session.close()


def test_the_claim_ahead_and_the_finish_are_prepared_once_and_give_their_row_counts(
        repo, mariadb_queue, settings):
    # Each task's statements in a backlog: the claim-ahead, then the success with the mark
    # of the next task (or the success alone): parsed once per connection, same effects.
    from nsj_queue_lib.engine.base import task_lock_key
    from nsj_queue_lib.engine.mysql.backend import lock_name, lock_prefix

    prefix, table = lock_prefix(settings), f"`{mariadb_queue.database}`.`{mariadb_queue.fila}`"

    def lock(task_id: int) -> str:
        return lock_name(prefix, task_lock_key(settings.queue_table, task_id))

    ids = [_insert(repo, mariadb_queue, prioridade=90 - i) for i in range(4)]
    ns_prefix = f"{prefix}{task_lock_key(settings.queue_table, 0)[0]}:"
    repo.session.execute(f"UPDATE {table} SET status = 'processando' WHERE id = %(i)s",
                         {"i": ids[0]})
    assert repo.session.fetch_value("SELECT GET_LOCK(%(n)s, 0)", {"n": lock(ids[0])}) == 1
    prepared, executed = (_status(repo, "Com_prepare_sql"), _status(repo, "Com_execute_sql"))
    current = ids[0]
    for expected in ids[1:]:
        repo.session.begin()
        ahead, scheduled = repo.task_claim_ahead_pending(1)
        assert [r["id"] for r in ahead] == [expected] and not scheduled
        assert ahead[0]["payload"] == "p" and ahead[0]["status"] == "pendente"
        assert repo.task_finish_release_mark(current, "feito", lock(current), [expected],
                                             ns_prefix) == 2
        repo.session.commit()
        current = expected
    repo.session.begin()
    assert repo.task_claim_ahead_pending(1) == ([], False)
    assert repo.task_finish_release(current, "fim", lock(current))
    repo.session.commit()
    assert _status(repo, "Com_prepare_sql") - prepared == 3  # claim-ahead, mark, release
    assert _status(repo, "Com_execute_sql") - executed == 3 + 3 + 1 + 1
    rows = mariadb_queue.sql(f"SELECT status, mensagem FROM {table} ORDER BY id")
    assert [(r["status"], r["mensagem"]) for r in rows] == [("sucesso", "feito")] * 3 + [
        ("sucesso", "fim")]
    for task_id in ids:  # each named lock taken by the mark, released by the success
        assert repo.session.fetch_value("SELECT IS_USED_LOCK(%(n)s)",
                                        {"n": lock(task_id)}) is None
