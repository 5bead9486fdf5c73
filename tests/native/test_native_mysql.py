"""MySQL native mode on MariaDB (DB_DRIVER=MYSQL, no CLIENT_SERVER_MODE, no socket server):
real worker processes; the claim (SKIP LOCKED + named locks), probe wake-ups, rescue after
kill -9 and the admin locks."""

from __future__ import annotations

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.mysql.backend import (
    HaltWatch,
    MysqlBackend,
    MysqlGuard,
    MysqlLocker,
    check_server_version,
    lock_name,
    lock_prefix,
)
from nsj_queue_lib.exceptions import ConfigError, ControlTableMissing
from tests.fixtures.database import statements_per_task
from tests.fixtures.deadlock import check_deadlock_in_finish_is_a_failure
from tests.fixtures.queue import effects_by_key
from tests.fixtures.routers import (
    check_failure_after_success_rolls_back,
    in_process_runner,
    insert_effect,
)
from tests.fixtures.waiting import eventually


def test_every_named_lock_is_released_with_its_task_while_the_worker_stays_connected(mariadb_queue):
    # (Success, retry, dead letter and priority order themselves: tests/contract on
    # every backend.)  A named lock not released would only end with the session.
    worker = mariadb_queue.start_ready_worker(QUEUE_MAX_RETRY="2")
    ok = mariadb_queue.insert({"efeito": "ok"})
    retry = mariadb_queue.insert({"efeito": "retry", "fail_until": 2})
    dead = mariadb_queue.insert({"efeito": "dead", "fail": True})
    for task_id in (ok, retry, dead):
        mariadb_queue.wait_chain_done(task_id)
    mariadb_queue.wait_idle()
    assert effects_by_key(mariadb_queue) == {"ok": 1, "retry": 1}
    assert mariadb_queue.count() == 6  # ok; retry x 2; dead x 2 + its dead letter
    prefix = lock_prefix(mariadb_queue.settings())
    for row in mariadb_queue.rows():
        name = lock_name(prefix, mariadb_queue.task_key(row["id"]))
        assert mariadb_queue.value("SELECT IS_USED_LOCK(%s)", (name,)) is None, row["id"]
    assert worker.proc.poll() is None


def test_named_locks_belong_to_their_session(mariadb_queue):
    settings = mariadb_queue.settings()
    one, two = DbSession.open(settings), DbSession.open(settings)
    try:
        a, b = MysqlLocker(one, lock_prefix(settings)), MysqlLocker(two, lock_prefix(settings))
        key = mariadb_queue.task_key(7)
        assert a.try_lock(key) and a.try_lock(key)  # re-entrant
        assert b.try_lock(key) is False
        assert b.unlock(key) is False  # not the owner: no effect
        assert a.unlock(key) and b.try_lock(key) is False  # one hold left
        one.close()  # the session ends: its locks go with it (once the server has seen it)
        eventually(lambda: b.try_lock(key), 5, interval=0.01, message="lock liberado")
    finally:
        one.close()
        two.close()


def test_halt_is_a_control_row_obeyed_only_by_workers_started_before_it(mariadb_queue):
    settings = mariadb_queue.settings()
    session = DbSession.open(settings)
    now = [0.0]
    watch = lambda: HaltWatch(clock=lambda: now[0])  # noqa: E731
    try:
        admin = QueueAdmin(session, settings.queue_table)
        old = watch()
        old.start(admin.control)
        assert old.requested(admin.control) is False
        MysqlBackend(settings).wake_workers(session, "HALT")
        assert old.requested(admin.control) is False  # read at most every HALT_CHECK seconds
        now[0] += 1
        assert old.requested(admin.control) is True
        control = (f"{mariadb_queue.quote(mariadb_queue.schema)}."
                   f"{mariadb_queue.quote(mariadb_queue.fila + '_controle')}")
        assert mariadb_queue.sql(f"SELECT id, pausada, motivo FROM {control}") == [
            {"id": 2, "pausada": 0, "motivo": "HALT"}]
        assert admin.is_paused() is False

        later = watch()
        later.start(admin.control)
        now[0] += 1
        assert later.requested(admin.control) is False  # started after the request
        admin.halt(por="dba")
        now[0] += 1
        assert later.requested(admin.control) is True
        assert mariadb_queue.value(f"SELECT alterado_por FROM {control} WHERE id = 2") == "dba"

        mariadb_queue.sql(f"DROP TABLE {control}")  # a queue created before 2.1
        with pytest.raises(ControlTableMissing, match="schema upgrade"):
            admin.halt()
        legacy = watch()
        legacy.start(admin.control)
        now[0] += 1
        assert legacy.requested(admin.control) is False
    finally:
        session.close()


@pytest.mark.parametrize("version, singlestore, accepted", [
    ("10.11.19-MariaDB-0+deb12u1", False, True),
    ("10.6.0-MariaDB", False, True),
    ("10.5.22-MariaDB", False, False),
    ("8.0.36", False, True),
    ("5.7.44-log", False, False),
    ("8.0.32", True, False),
])
def test_server_version_check(version, singlestore, accepted):
    if accepted:
        check_server_version(version, singlestore)
        return
    with pytest.raises(ConfigError, match="CLIENT_SERVER_MODE=true"):
        check_server_version(version, singlestore)


def test_the_next_task_is_claimed_with_the_previous_success_and_returned_on_stop(mariadb_queue):
    settings = mariadb_queue.settings()
    first, second = mariadb_queue.insert({"n": 1}, prioridade=90), mariadb_queue.insert({"n": 2})
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    guard = MysqlGuard(repo, settings.queue_table, lock_prefix(settings))
    try:
        [tarefa] = guard.claim()
        assert tarefa["id"] == first
        session.begin()
        assert guard.finish(tarefa, "feito")
        session.commit()  # one COMMIT: the success of `first` and the claim of `second`
        guard.release(tarefa)
        assert mariadb_queue.row(second)["status"] == "processando"
        name = lock_name(lock_prefix(settings), mariadb_queue.task_key(second))
        assert mariadb_queue.value("SELECT IS_USED_LOCK(%s)", (name,)) is not None
        guard.close()  # a stop before running it: back to waiting, lock released
        assert mariadb_queue.row(second)["status"] == "pendente"
        assert mariadb_queue.value("SELECT IS_USED_LOCK(%s)", (name,)) is None
        # A claim whose transaction rolled back is not used: the row is claimed anew.
        third = mariadb_queue.insert({"n": 3})
        [again] = guard.claim()
        assert again["id"] == second
        session.begin()
        assert guard.finish(again, "feito")  # claims `third` in this transaction
        session.rollback()
        guard.release(again)
        assert mariadb_queue.row(third)["status"] == "pendente"
        session.begin()  # another transaction commits (as a failure record does) ...
        session.commit()  # ... which must not make the rolled-back claim count
        [fresh] = guard.claim()
        assert fresh["id"] == third and mariadb_queue.row(third)["status"] == "processando"
    finally:
        session.close()


def test_the_task_claimed_ahead_is_a_due_scheduled_one_when_it_comes_first(mariadb_queue):
    # The claim-ahead orders both waiting statuses by priority and age, as the first claim
    # does: a due scheduled task (or retry) of higher priority comes before a 'pendente' one,
    # one not due yet does not.
    settings = mariadb_queue.settings()
    first = mariadb_queue.insert({"n": 1}, prioridade=99)
    plain = mariadb_queue.insert({"n": 2}, prioridade=50)
    later = mariadb_queue.insert({"n": 3}, prioridade=90)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.qtable} SET status = 'agendada', "
                      "data_hora = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = %s", (later,))
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    guard = MysqlGuard(repo, settings.queue_table, lock_prefix(settings))
    try:
        [tarefa] = guard.claim()
        assert tarefa["id"] == first
        session.begin()
        assert guard.finish(tarefa, "feito")  # the scheduled one is not due yet
        session.commit()
        guard.release(tarefa)
        assert guard.claimed_ahead() == [plain]
        due = mariadb_queue.insert({"n": 4}, prioridade=90)
        mariadb_queue.sql(f"UPDATE {mariadb_queue.qtable} SET status = 'agendada', "
                          "data_hora = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = %s", (due,))
        other = mariadb_queue.insert({"n": 5}, prioridade=50)
        [tarefa] = guard.claim()
        assert tarefa["id"] == plain
        session.begin()
        assert guard.finish(tarefa, "feito")
        session.commit()
        guard.release(tarefa)
        assert guard.claimed_ahead() == [due]  # not `other`, of a lower priority
        assert mariadb_queue.row(due)["status"] == "processando"
        assert mariadb_queue.row(other)["status"] == "pendente"
        assert mariadb_queue.row(later)["status"] == "agendada"
        guard.close()
    finally:
        session.close()


def test_an_open_claim_ahead_does_not_hold_up_urgent_tasks_nor_retries(mariadb_queue):
    # The claim-ahead locks its row inside the finishing task's transaction, reading
    # ix_claim with FOR UPDATE.  It must not lock index gaps (REPEATABLE READ would): an
    # INSERT of a task of a higher priority, or a task becoming a retry ('agendada'), goes
    # into the gap before the first waiting entry, and would wait for that commit.  The
    # native worker's session runs at READ COMMITTED (its guard sets it).
    settings = mariadb_queue.settings()
    first = mariadb_queue.insert({"n": 1})
    mariadb_queue.insert({"n": 2})
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    try:
        MysqlBackend(settings).guard(session, repo)
        assert session.fetch_value("SELECT @@SESSION.tx_isolation") == "READ-COMMITTED"
        session.begin()
        ahead, scheduled = repo.task_claim_ahead_pending(1)
        assert [r["id"] for r in ahead] == [first] and not scheduled
        mariadb_queue.sql("SET SESSION innodb_lock_wait_timeout = 1")  # a wait fails (1205)
        urgent = mariadb_queue.insert({"n": 3}, prioridade=99)
        retry = mariadb_queue.insert({"n": 4})
        mariadb_queue.sql(f"UPDATE {mariadb_queue.qtable} SET status = 'agendada', "
                          "data_hora = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id = %s",
                          (retry,))
        assert mariadb_queue.row(urgent)["status"] == "pendente"
        assert mariadb_queue.row(retry)["status"] == "agendada"
        session.rollback()
    finally:
        session.close()


def test_success_message_the_column_cannot_store_keeps_the_work_and_the_next_claim(mariadb_queue):
    # A `mensagem` column in a narrower charset (latin1, strict mode): the success UPDATE
    # fails once and is repeated with the characters escaped, inside the same transaction
    # that also claims the next task; both tasks run once and no named lock is left.
    mariadb_queue.sql(f"ALTER TABLE {mariadb_queue.qtable} MODIFY mensagem VARCHAR(500) CHARACTER "
                      f"SET latin1 NULL")
    latin = mariadb_queue.insert({"efeito": "latin", "return": "ok ✓ 😀 é", "sleep": 0.3},
                                 prioridade=90)
    after = mariadb_queue.insert({"efeito": "depois"})
    worker = mariadb_queue.start_worker()
    assert mariadb_queue.wait_status(latin, "sucesso")["mensagem"] == "ok \\u2713 \\U0001f600 \\xe9"
    mariadb_queue.wait_status(after, "sucesso")
    assert effects_by_key(mariadb_queue) == {"latin": 1, "depois": 1}
    assert [r["tentativa"] for r in mariadb_queue.rows()] == [1, 1]
    prefix = lock_prefix(mariadb_queue.settings())
    for task_id in (latin, after):
        name = lock_name(prefix, mariadb_queue.task_key(task_id))
        assert mariadb_queue.value("SELECT IS_USED_LOCK(%s)", (name,)) is None, task_id
    assert worker.proc.poll() is None


def test_with_a_backlog_a_task_costs_four_statements_and_no_begin(mariadb_queue):
    # Claim-ahead with a backlog: the task's INSERT (user code), the claim of the next
    # task, one UPDATE (this success + the next mark) and COMMIT AND CHAIN, which opens
    # the next task's transaction (no BEGIN).  Counted by the server for the session.
    settings = mariadb_queue.settings()
    ids = [mariadb_queue.insert({"n": n}) for n in range(12)]
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    guard = MysqlBackend(settings).guard(session, repo)
    # Each task but the first is claimed ahead with the last success: no statement.
    run_task = in_process_runner(settings, guard, insert_effect(mariadb_queue.qeffects))
    try:
        run_task()  # the first task claims the second ahead
        cost = statements_per_task(session, run_task)
        assert cost == {"Questions": 4, "Com_begin": 0, "Com_commit": 1}
        assert [r["status"] for r in mariadb_queue.rows()] == ["sucesso"] * 11 + ["processando"]
        assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == ids[:11]
        guard.close()  # a stop: the task claimed ahead goes back to waiting
        assert mariadb_queue.row(ids[11])["status"] == "pendente"
    finally:
        session.close()


@pytest.mark.mysql
def test_admin_slot_between_two_tasks_of_a_busy_worker_leaves_its_task_claimed_ahead(mariadb_queue):
    """MySQL native: the admin jobs run on the worker's own session between two tasks,
    where the next task, claimed ahead, is already 'processando' under a named lock of
    that very session (GET_LOCK is re-entrant): the rescue must take it for a live task,
    not for an orphan."""
    import datetime as _dt

    from nsj_queue_lib.runtime.failure import WORKER_STOPPED

    worker = mariadb_queue.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="*",
                                              QUEUE_MINUTE_PURGE_THREAD="*",
                                              QUEUE_MINUTE_NOTIFY_THREAD="*")
    # A backlog that runs through the start of the next minute: begin it late in this one.
    eventually(lambda: _dt.datetime.now().second >= 48, 65, interval=0.2,
               message="fim do minuto")
    now = mariadb_queue.db_now()
    mariadb_queue.sql(f"INSERT INTO {mariadb_queue.qtable} (status, data_hora, payload) "
                      "VALUES (%s, %s, %s)",
                      ("sucesso", now - _dt.timedelta(days=100), "antiga"))
    ids = mariadb_queue.insert_many([{"efeito": f"b{i}", "sleep": 0.05} for i in range(400)])
    # The purge ran at the slot while the backlog was still waiting: between two tasks.
    eventually(lambda: mariadb_queue.count("payload = 'antiga'") == 0, 40, interval=0.05,
               message="purge no minuto")
    assert mariadb_queue.count("status IN ('pendente', 'processando')") > 0
    mariadb_queue.wait_idle(timeout=90)
    assert mariadb_queue.count(f"mensagem LIKE '{WORKER_STOPPED[:20]}%%'") == 0, worker.log()
    assert all(mariadb_queue.row(i)["status"] == "sucesso" for i in ids)
    assert mariadb_queue.count() == len(ids)  # no retry row
    assert effects_by_key(mariadb_queue) == {f"b{i}": 1 for i in range(400)}
    assert "resgatada" not in worker.log()


def test_a_deadlock_in_the_success_update_is_a_task_failure_not_an_empty_success(mariadb_queue):
    # The rival session holds the task's own row, which the success UPDATE locks.
    # Fails before the fix: the runner repeated the UPDATE (meant for charset refusals)
    # and committed 'sucesso' with none of the task's work.
    settings = mariadb_queue.settings()
    task_id = mariadb_queue.insert({"n": 1})
    session = DbSession.open(settings)
    guard = MysqlBackend(settings).guard(session, TaskRepository(session,
                                                                 settings.queue_table))
    try:
        check_deadlock_in_finish_is_a_failure(mariadb_queue, guard, settings, [task_id], task_id)
    finally:
        session.close()


def test_a_task_failing_after_a_success_in_the_chained_transaction_leaves_no_effect(mariadb_queue):
    settings = mariadb_queue.settings()
    session = DbSession.open(settings)
    guard = MysqlBackend(settings).guard(session, TaskRepository(session,
                                                                 settings.queue_table))
    try:
        check_failure_after_success_rolls_back(mariadb_queue, guard, settings)
    finally:
        guard.close()
        session.close()
