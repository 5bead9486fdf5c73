"""MySQL native mode on MariaDB (DB_DRIVER=MYSQL, no CLIENT_SERVER_MODE, no socket server):
real worker processes; the claim (SKIP LOCKED + named locks), probe wake-ups, rescue after
kill -9 and the admin locks."""

from __future__ import annotations

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.coordination.mysql import (
    HaltWatch,
    MysqlBackend,
    MysqlGuard,
    MysqlLocker,
    check_server_version,
    lock_name,
    lock_prefix,
)
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
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


def test_every_named_lock_is_released_with_its_task_while_the_worker_stays_connected(nq):
    # (Success, retry, dead letter and priority order themselves: tests/contract on
    # every backend.)  A named lock not released would only end with the session.
    worker = nq.start_ready_worker(QUEUE_MAX_RETRY="2")
    ok = nq.insert({"efeito": "ok"})
    retry = nq.insert({"efeito": "retry", "fail_until": 2})
    dead = nq.insert({"efeito": "dead", "fail": True})
    for task_id in (ok, retry, dead):
        nq.wait_chain_done(task_id)
    nq.wait_idle()
    assert effects_by_key(nq) == {"ok": 1, "retry": 1}
    assert nq.count() == 6  # ok; retry x 2; dead x 2 + its dead letter
    prefix = lock_prefix(nq.settings())
    for row in nq.rows():
        name = lock_name(prefix, nq.task_key(row["id"]))
        assert nq.value("SELECT IS_USED_LOCK(%s)", (name,)) is None, row["id"]
    assert worker.proc.poll() is None


def test_named_locks_belong_to_their_session(nq):
    settings = nq.settings()
    one, two = DbSession.open(settings), DbSession.open(settings)
    try:
        a, b = MysqlLocker(one, lock_prefix(settings)), MysqlLocker(two, lock_prefix(settings))
        key = nq.task_key(7)
        assert a.try_lock(key) and a.try_lock(key)  # re-entrant
        assert b.try_lock(key) is False
        assert b.unlock(key) is False  # not the owner: no effect
        assert a.unlock(key) and b.try_lock(key) is False  # one hold left
        one.close()  # the session ends: its locks go with it (once the server has seen it)
        eventually(lambda: b.try_lock(key), 5, interval=0.01, message="lock liberado")
    finally:
        one.close()
        two.close()


def test_halt_is_a_control_row_obeyed_only_by_workers_started_before_it(nq):
    settings = nq.settings()
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
        control = f"{nq.quote(nq.schema)}.{nq.quote(nq.fila + '_controle')}"
        assert nq.sql(f"SELECT id, pausada, motivo FROM {control}") == [
            {"id": 2, "pausada": 0, "motivo": "HALT"}]
        assert admin.is_paused() is False

        later = watch()
        later.start(admin.control)
        now[0] += 1
        assert later.requested(admin.control) is False  # started after the request
        admin.halt(por="dba")
        now[0] += 1
        assert later.requested(admin.control) is True
        assert nq.value(f"SELECT alterado_por FROM {control} WHERE id = 2") == "dba"

        nq.sql(f"DROP TABLE {control}")  # a queue created before 2.1
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


def test_the_next_task_is_claimed_with_the_previous_success_and_returned_on_stop(nq):
    settings = nq.settings()
    first, second = nq.insert({"n": 1}, prioridade=90), nq.insert({"n": 2})
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
        assert nq.row(second)["status"] == "processando"
        name = lock_name(lock_prefix(settings), nq.task_key(second))
        assert nq.value("SELECT IS_USED_LOCK(%s)", (name,)) is not None
        guard.close()  # a stop before running it: back to waiting, lock released
        assert nq.row(second)["status"] == "pendente"
        assert nq.value("SELECT IS_USED_LOCK(%s)", (name,)) is None
        # A claim whose transaction rolled back is not used: the row is claimed anew.
        third = nq.insert({"n": 3})
        [again] = guard.claim()
        assert again["id"] == second
        session.begin()
        assert guard.finish(again, "feito")  # claims `third` in this transaction
        session.rollback()
        guard.release(again)
        assert nq.row(third)["status"] == "pendente"
        session.begin()  # another transaction commits (as a failure record does) ...
        session.commit()  # ... which must not make the rolled-back claim count
        [fresh] = guard.claim()
        assert fresh["id"] == third and nq.row(third)["status"] == "processando"
    finally:
        session.close()


def test_the_task_claimed_ahead_is_a_due_scheduled_one_when_it_comes_first(nq):
    # The claim-ahead orders both waiting statuses by priority and age, as the first claim
    # does: a due scheduled task (or retry) of higher priority comes before a 'pendente' one,
    # one not due yet does not.
    settings = nq.settings()
    first = nq.insert({"n": 1}, prioridade=99)
    plain = nq.insert({"n": 2}, prioridade=50)
    later = nq.insert({"n": 3}, prioridade=90)
    nq.sql(f"UPDATE {nq.qtable} SET status = 'agendada', "
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
        due = nq.insert({"n": 4}, prioridade=90)
        nq.sql(f"UPDATE {nq.qtable} SET status = 'agendada', "
               "data_hora = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = %s", (due,))
        other = nq.insert({"n": 5}, prioridade=50)
        [tarefa] = guard.claim()
        assert tarefa["id"] == plain
        session.begin()
        assert guard.finish(tarefa, "feito")
        session.commit()
        guard.release(tarefa)
        assert guard.claimed_ahead() == [due]  # not `other`, of a lower priority
        assert nq.row(due)["status"] == "processando"
        assert nq.row(other)["status"] == "pendente"
        assert nq.row(later)["status"] == "agendada"
        guard.close()
    finally:
        session.close()


def test_an_open_claim_ahead_does_not_hold_up_urgent_tasks_nor_retries(nq):
    # The claim-ahead locks its row inside the finishing task's transaction, reading
    # ix_claim with FOR UPDATE.  It must not lock index gaps (REPEATABLE READ would): an
    # INSERT of a task of a higher priority, or a task becoming a retry ('agendada'), goes
    # into the gap before the first waiting entry, and would wait for that commit.  The
    # native worker's session runs at READ COMMITTED (its guard sets it).
    settings = nq.settings()
    first = nq.insert({"n": 1})
    nq.insert({"n": 2})
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    try:
        MysqlBackend(settings).guard(session, repo)
        assert session.fetch_value("SELECT @@SESSION.tx_isolation") == "READ-COMMITTED"
        session.begin()
        ahead, scheduled = repo.task_claim_ahead_pending(1)
        assert [r["id"] for r in ahead] == [first] and not scheduled
        nq.sql("SET SESSION innodb_lock_wait_timeout = 1")  # a wait fails (1205)
        urgent = nq.insert({"n": 3}, prioridade=99)
        retry = nq.insert({"n": 4})
        nq.sql(f"UPDATE {nq.qtable} SET status = 'agendada', "
               "data_hora = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id = %s", (retry,))
        assert nq.row(urgent)["status"] == "pendente"
        assert nq.row(retry)["status"] == "agendada"
        session.rollback()
    finally:
        session.close()


def test_success_message_the_column_cannot_store_keeps_the_work_and_the_next_claim(nq):
    # A `mensagem` column in a narrower charset (latin1, strict mode): the success UPDATE
    # fails once and is repeated with the characters escaped, inside the same transaction
    # that also claims the next task; both tasks run once and no named lock is left.
    nq.sql(f"ALTER TABLE {nq.qtable} MODIFY mensagem VARCHAR(500) CHARACTER SET latin1 NULL")
    latin = nq.insert({"efeito": "latin", "return": "ok ✓ 😀 é", "sleep": 0.3},
                      prioridade=90)
    after = nq.insert({"efeito": "depois"})
    worker = nq.start_worker()
    assert nq.wait_status(latin, "sucesso")["mensagem"] == "ok \\u2713 \\U0001f600 \\xe9"
    nq.wait_status(after, "sucesso")
    assert effects_by_key(nq) == {"latin": 1, "depois": 1}
    assert [r["tentativa"] for r in nq.rows()] == [1, 1]
    prefix = lock_prefix(nq.settings())
    for task_id in (latin, after):
        name = lock_name(prefix, nq.task_key(task_id))
        assert nq.value("SELECT IS_USED_LOCK(%s)", (name,)) is None, task_id
    assert worker.proc.poll() is None


def test_with_a_backlog_a_task_costs_four_statements_and_no_begin(nq):
    # Claim-ahead with a backlog: the task's INSERT (user code), the claim of the next
    # task, one UPDATE (this success + the next mark) and COMMIT AND CHAIN, which opens
    # the next task's transaction (no BEGIN).  Counted by the server for the session.
    settings = nq.settings()
    ids = [nq.insert({"n": n}) for n in range(12)]
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table)
    guard = MysqlBackend(settings).guard(session, repo)
    # Each task but the first is claimed ahead with the last success: no statement.
    run_task = in_process_runner(settings, guard, insert_effect(nq.qeffects))
    try:
        run_task()  # the first task claims the second ahead
        cost = statements_per_task(session, run_task)
        assert cost == {"Questions": 4, "Com_begin": 0, "Com_commit": 1}
        assert [r["status"] for r in nq.rows()] == ["sucesso"] * 11 + ["processando"]
        assert sorted(e["tarefa_id"] for e in nq.effects()) == ids[:11]
        guard.close()  # a stop: the task claimed ahead goes back to waiting
        assert nq.row(ids[11])["status"] == "pendente"
    finally:
        session.close()


@pytest.mark.mysql
def test_admin_slot_between_two_tasks_of_a_busy_worker_leaves_its_task_claimed_ahead(nq):
    """MySQL native: the admin jobs run on the worker's own session between two tasks,
    where the next task, claimed ahead, is already 'processando' under a named lock of
    that very session (GET_LOCK is re-entrant): the rescue must take it for a live task,
    not for an orphan."""
    import datetime as _dt

    from nsj_queue_lib.runtime.failure import WORKER_STOPPED

    worker = nq.start_ready_worker(QUEUE_MINUTE_RETRY_THREAD="*",
                                   QUEUE_MINUTE_PURGE_THREAD="*",
                                   QUEUE_MINUTE_NOTIFY_THREAD="*")
    # A backlog that runs through the start of the next minute: begin it late in this one.
    eventually(lambda: _dt.datetime.now().second >= 48, 65, interval=0.2,
               message="fim do minuto")
    now = nq.db_now()
    nq.sql(f"INSERT INTO {nq.qtable} (status, data_hora, payload) VALUES (%s, %s, %s)",
           ("sucesso", now - _dt.timedelta(days=100), "antiga"))
    ids = nq.insert_many([{"efeito": f"b{i}", "sleep": 0.05} for i in range(400)])
    # The purge ran at the slot while the backlog was still waiting: between two tasks.
    eventually(lambda: nq.count("payload = 'antiga'") == 0, 40, interval=0.05,
               message="purge no minuto")
    assert nq.count("status IN ('pendente', 'processando')") > 0
    nq.wait_idle(timeout=90)
    assert nq.count(f"mensagem LIKE '{WORKER_STOPPED[:20]}%%'") == 0, worker.log()
    assert all(nq.row(i)["status"] == "sucesso" for i in ids)
    assert nq.count() == len(ids)  # no retry row
    assert effects_by_key(nq) == {f"b{i}": 1 for i in range(400)}
    assert "resgatada" not in worker.log()


def test_a_deadlock_in_the_success_update_is_a_task_failure_not_an_empty_success(nq):
    # The rival session holds the task's own row, which the success UPDATE locks.
    # Fails before the fix: the runner repeated the UPDATE (meant for charset refusals)
    # and committed 'sucesso' with none of the task's work.
    settings = nq.settings()
    task_id = nq.insert({"n": 1})
    session = DbSession.open(settings)
    guard = MysqlBackend(settings).guard(session, TaskRepository(session,
                                                                 settings.queue_table))
    try:
        check_deadlock_in_finish_is_a_failure(nq, guard, settings, [task_id], task_id)
    finally:
        session.close()


def test_a_task_failing_after_a_success_in_the_chained_transaction_leaves_no_effect(nq):
    settings = nq.settings()
    session = DbSession.open(settings)
    guard = MysqlBackend(settings).guard(session, TaskRepository(session,
                                                                 settings.queue_table))
    try:
        check_failure_after_success_rolls_back(nq, guard, settings)
    finally:
        guard.close()
        session.close()
