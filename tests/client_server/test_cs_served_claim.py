"""Protocol version 2 `claim`: the server hands out due task ids already locked for the
worker's session (no candidates query nor lock request of the worker), with the worker's
own claim as the fallback.  Real server (process, or in this process when the test must
hold the server's candidate list still), real databases, real worker processes."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from nsj_queue_lib.engine.socket import protocol as p
from tests.fixtures.database import statements_per_task
from tests.fixtures.deadlock import check_deadlock_in_finish_is_a_failure
from tests.fixtures.queue import TOKEN, effects_by_key
from tests.fixtures.routers import (
    check_failure_after_success_rolls_back,
    in_process_runner,
    insert_effect,
)
from tests.fixtures.servers import InProcessServer
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import RawClient


@pytest.fixture
def inproc(socket_queue) -> Iterator[InProcessServer]:
    srv = InProcessServer(socket_queue)
    yield srv
    srv.close()


def _run(guard: Any, tarefa: dict, message: str = "ok") -> bool:
    session = guard.repo.session
    session.begin()
    assert guard.begin(tarefa)
    done = guard.finish(tarefa, message)
    session.commit()
    guard.release(tarefa)
    return done


def test_the_server_hands_out_the_task_with_its_lock(socket_queue, inproc):
    low = socket_queue.insert({"n": "low"}, prioridade=10)
    high = socket_queue.insert({"n": "high"}, prioridade=90)
    guard = inproc.guard()
    [tarefa] = guard.claim()
    assert tarefa["id"] == high and socket_queue.row(high)["status"] == "processando"
    # One round trip: the lock came with the id; no lock request, no candidates query.
    assert (inproc.requests("claim"), inproc.requests("try_lock")) == (1, 0)
    assert inproc.server.locks.holder(socket_queue.task_key(high)) is not None
    admin = socket_queue.locker(admin=True)
    assert admin.try_lock(socket_queue.task_key(high)) is False  # the rescue sees a live worker
    session = guard.repo.session
    session.begin()
    assert guard.begin(tarefa) and guard.finish(tarefa, "ok")
    # The next claim went ahead with the 'sucesso' mark, before the COMMIT: `low` is
    # locked for this session already, and still waiting.
    eventually(lambda: inproc.server.locks.holder(socket_queue.task_key(low)) is not None, 5,
               message="próxima tarefa pedida adiantada")
    assert inproc.requests("claim") == 2 and socket_queue.row(low)["status"] == "pendente"
    session.commit()
    guard.release(tarefa)
    eventually(lambda: inproc.server.locks.holder(socket_queue.task_key(high)) is None, 5,
               message="lock liberado após a tarefa")
    [second] = guard.claim()  # the answer was there: no third request
    assert second["id"] == low and inproc.requests("claim") == 2
    assert inproc.requests("try_lock") == 1  # the admin's only


def _finish_ahead(socket_queue, inproc, guard) -> tuple[dict, int]:
    """Claim and finish (uncommitted) the first of two tasks; return it and the second."""
    first = socket_queue.insert({"n": "first"}, prioridade=90)
    second = socket_queue.insert({"n": "second"}, prioridade=10)
    [tarefa] = guard.claim()
    assert tarefa["id"] == first
    guard.repo.session.begin()
    assert guard.begin(tarefa) and guard.finish(tarefa, "ok")
    eventually(lambda: inproc.server.locks.holder(socket_queue.task_key(second)) is not None, 5,
               message="segunda tarefa pedida adiantada")
    return tarefa, second


def test_the_next_task_is_marked_in_the_finishing_transaction(socket_queue, inproc):
    guard = inproc.guard()
    tarefa, second = _finish_ahead(socket_queue, inproc, guard)
    assert socket_queue.row(second)["status"] == "pendente"  # not committed yet
    guard.repo.session.commit()
    guard.release(tarefa)
    # One COMMIT made both durable (PostgreSQL too, since session 14: before, its mark
    # came at the next claim, two statements more per task).
    assert socket_queue.row(second)["status"] == "processando"
    [nxt] = guard.claim()
    assert nxt["id"] == second and inproc.requests("claim") == 2
    assert _run(guard, nxt) and socket_queue.count("status = 'sucesso'") == 2


def test_a_next_task_marked_in_a_rolled_back_transaction_is_claimed_again(socket_queue, inproc):
    guard = inproc.guard()
    tarefa, second = _finish_ahead(socket_queue, inproc, guard)
    guard.repo.session.rollback()  # e.g. the COMMIT failed: both marks undone
    guard.release(tarefa)
    assert socket_queue.row(second)["status"] == "pendente"
    claimed = guard.claim()  # the first task is 'processando' (its own claim committed)
    assert [t["id"] for t in claimed] == [second]
    assert socket_queue.row(second)["status"] == "processando"
    assert _run(guard, claimed[0]) and socket_queue.row(second)["status"] == "sucesso"


def test_a_stop_puts_a_task_marked_ahead_back_to_waiting(socket_queue, inproc):
    guard = inproc.guard()
    tarefa, second = _finish_ahead(socket_queue, inproc, guard)
    guard.repo.session.commit()
    guard.release(tarefa)
    guard.close()  # a graceful stop before the next claim
    assert socket_queue.row(second)["status"] == "pendente"
    eventually(lambda: inproc.server.locks.holder(socket_queue.task_key(second)) is None, 5,
               message="lock da tarefa adiantada liberado")
    [again] = inproc.guard().claim()
    assert again["id"] == second


def test_on_mariadb_a_served_task_costs_five_statements_and_no_begin(mariadb_socket_queue):
    # With a backlog: the row fence, the task's INSERT (user code), the served next row
    # read and locked, one UPDATE (this success + the next mark) and COMMIT AND CHAIN,
    # which opens the next task's transaction (no BEGIN).  Counted by the server.
    q = mariadb_socket_queue
    ids = [q.insert({"n": n}) for n in range(12)]
    srv = InProcessServer(q)
    try:
        guard = srv.guard()
        session = guard.repo.session
        run_task = in_process_runner(srv.settings, guard, insert_effect(q.qeffects))
        run_task()  # the first task is claimed alone; it marks the second ahead
        cost = statements_per_task(session, run_task)
        assert cost == {"Questions": 5, "Com_begin": 0, "Com_commit": 1}
        assert [r["status"] for r in q.rows()] == ["sucesso"] * 11 + ["processando"]
        assert sorted(e["tarefa_id"] for e in q.effects()) == ids[:11]
        assert srv.requests("try_lock") == 0  # every task came from the server's claim
    finally:
        srv.close()
    assert q.row(ids[11])["status"] == "pendente"  # the stop put it back


def test_on_mariadb_a_served_task_failing_after_a_success_leaves_no_effect(mariadb_socket_queue):
    srv = InProcessServer(mariadb_socket_queue)
    try:
        check_failure_after_success_rolls_back(mariadb_socket_queue, srv.guard(), srv.settings)
        assert srv.requests("try_lock") == 0  # served claims all along
    finally:
        srv.close()


def test_on_mariadb_a_deadlock_locking_the_served_row_is_a_task_failure(mariadb_socket_queue):
    # The rival session holds the row the server handed out ahead, which the finish
    # reads FOR UPDATE before the success + mark UPDATE.
    q = mariadb_socket_queue
    ids = [q.insert({"n": 1}, prioridade=90), q.insert({"n": 2})]
    srv = InProcessServer(q)
    try:
        check_deadlock_in_finish_is_a_failure(q, srv.guard(), srv.settings, ids, ids[1])
    finally:
        srv.close()


def test_a_served_task_taken_meanwhile_falls_back_without_running_twice(socket_queue, inproc):
    taken = socket_queue.insert({"n": "taken"}, prioridade=90)
    other = socket_queue.insert({"n": "other"}, prioridade=10)
    assert inproc.server.claims.refresh()  # the server's list: [taken, other]
    # Another worker (version 1, or on its own fallback) claims, runs and releases
    # `taken` outside the server's list, which still names it.
    rival = inproc.guard()
    key = socket_queue.task_key(taken)
    assert rival.locker.try_lock(key)
    assert rival.repo.task_mark_processing(taken) is not None
    with rival.repo.session.transaction():
        assert rival.repo.task_lock_row(taken)
        assert rival.repo.task_finish(taken, "pelo rival")
    assert rival.locker.unlock(key)
    guard = inproc.guard()
    [tarefa] = guard.claim()  # served `taken` (stale): unlocked, fallback claims `other`
    assert tarefa["id"] == other
    assert (socket_queue.row(taken)["status"] == "sucesso"
            and socket_queue.row(taken)["mensagem"] == "pelo rival")
    assert inproc.requests("claim") == 1 and inproc.requests("try_lock") == 2
    eventually(lambda: inproc.server.locks.holder(key) is None, 5,
               message="lock da tarefa velha devolvido")
    assert inproc.server.locks.holder(socket_queue.task_key(other)) is not None
    assert _run(guard, tarefa) and guard.claim() == []
    assert socket_queue.count("status = 'sucesso'") == 2


def test_a_version_1_server_is_spoken_to_in_version_1_and_the_worker_claims_alone(
        socket_queue, monkeypatch):
    # A server of an earlier 2.x release accepts only version 1 (no `claim`).
    monkeypatch.setattr(p, "SUPPORTED_VERSIONS", (1,))
    srv = InProcessServer(socket_queue)
    try:
        task = socket_queue.insert({"n": 1})
        guard = srv.guard()
        [tarefa] = guard.claim()
        assert tarefa["id"] == task and guard.locker._conn.version == 1
        assert (srv.requests("claim"), srv.requests("try_lock")) == (0, 1)
        assert _run(guard, tarefa)
    finally:
        srv.close()


def test_claim_is_refused_to_version_1_sessions_and_producers(socket_queue, inproc):
    socket_queue.insert({"n": 1})
    ns = p.check_key(socket_queue.task_key(1))[0]
    with RawClient(socket_queue.lock_port) as raw:
        assert raw.hello(TOKEN)["ok"]  # version 1
        assert raw.call("claim", ns=ns, limit=1)["error"]["code"] == p.ERR_UNKNOWN_OP
    with RawClient(socket_queue.lock_port) as raw:
        assert raw.call("hello", version=2, token=TOKEN)["result"] == "welcome"
        assert raw.call("claim", ns=ns, limit=0)["error"]["code"] == p.ERR_BAD_REQUEST
        assert raw.call("claim", ns=ns + 1, limit=1)["result"] is None  # another table
        served = raw.call("claim", ns=ns, limit=5)["result"]
        assert len(served) == 1
        assert inproc.server.locks.holder(socket_queue.task_key(served[0])) is not None
    eventually(lambda: inproc.server.locks.holder(socket_queue.task_key(served[0])) is None, 5,
               message="locks do cliente que saiu liberados")


def test_workers_run_every_task_once_through_served_claims(socket_queue):
    socket_queue.start_server()
    workers = [socket_queue.start_ready_worker() for _ in range(3)]
    ids = socket_queue.insert_many([{"efeito": f"s{i}"} for i in range(60)])
    socket_queue.wait_idle()
    assert effects_by_key(socket_queue) == {f"s{i}": 1 for i in range(60)}
    assert sorted(e["tarefa_id"] for e in socket_queue.effects()) == sorted(ids)
    status = socket_queue.server_status()
    # Nearly every task came locked with the server's answer; a lock request of a
    # worker is only the fallback (a served id already taken, or an empty answer).
    assert status["claimed"] >= 50, status
    assert status["requests"].get("try_lock", 0) < 20, status
    assert all(w.proc.poll() is None for w in workers)
