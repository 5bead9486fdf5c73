"""One contract for every coordination backend: the claim (TaskGuard), the wake-ups
(Notifier) and the locks (Locker), run against PostgreSQL, MySQL native on MariaDB, and the
socket server on PostgreSQL and on MariaDB (real databases, real server process). A
difference between backends is skipped or shaped only through its `Capabilities` flags (each
of them is read here: wakes_on_insert, notify_is_transactional, batch_claim,
lock_on_task_session, leases).  The harness (`backend_harness`, over the `each_backend_queue` queue
of each backend) is in tests/contract/harness.py and conftest.py."""

from __future__ import annotations

import time
from typing import Any

from nsj_queue_lib.engine.base import task_lock_key
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.runtime.batch import BatchClaimer
from tests.contract.harness import Harness, listening, wait_for
from tests.fixtures.waiting import eventually


def _run(h: Harness, guard: Any, tarefa: dict, message: str = "ok") -> bool:
    session = guard.repo.session
    session.begin()
    assert guard.begin(tarefa)
    done = guard.finish(tarefa, message)
    session.commit()
    guard.release(tarefa)
    return done


def test_claim_follows_priority_then_age_and_never_hands_out_a_task_twice(backend_harness):
    low = backend_harness.q.insert({"n": "low"}, prioridade=10)
    high = backend_harness.q.insert({"n": "high"}, prioridade=90)
    mid = backend_harness.q.insert({"n": "mid"})
    one, two = backend_harness.guard(), backend_harness.guard()
    [first] = one.claim()
    [second] = two.claim()
    assert (first["id"], second["id"]) == (high, mid)
    assert first["status"] == "processando" and first["payload"] == '{"n": "high"}'
    assert backend_harness.q.row(high)["status"] == "processando"
    [third] = one.claim(5)
    assert third["id"] == low and two.claim() == []
    for guard, tarefa in ((one, first), (two, second), (one, third)):
        assert _run(backend_harness, guard, tarefa)
    assert backend_harness.q.count("status = 'sucesso'") == 3


def test_claim_with_a_limit_returns_several_tasks_in_claim_order(backend_harness):
    ids = [backend_harness.q.insert({"n": i}, prioridade=50 + i) for i in range(4)]
    claimed = backend_harness.guard().claim(3)
    assert [t["id"] for t in claimed] == [ids[3], ids[2], ids[1]]


def test_batch_claim_takes_tasks_in_claim_order_inside_the_callers_transaction(backend_harness):
    backend_harness.require("batch_claim")
    ids = [backend_harness.q.insert({"n": i}, prioridade=50 + i) for i in range(4)]
    one, two = backend_harness.guard(), backend_harness.guard()
    # (its transaction, its session)
    claimer = BatchClaimer(one, backend_harness.backend.capabilities, 3)
    batch = claimer.claim()
    assert [t["id"] for t in batch.tasks] == [ids[3], ids[2], ids[1]]
    assert all(t["status"] == "processando" for t in batch.tasks)
    # Nothing of the batch is visible before its commit; its rows are not claimable.
    assert backend_harness.q.count("status = 'processando'") == 0
    # (MariaDB: the candidates the batch's claim read stay row-locked too, so a concurrent
    # claim may find nothing; it never gets a task of the batch.)
    other = BatchClaimer(two, backend_harness.backend.capabilities, 3).claim()
    taken = [t["id"] for t in other.tasks] if other is not None else []
    assert taken in ([ids[0]], [])
    two.repo.session.commit()
    one.repo.session.rollback()  # a crashed batch: every task is waiting again
    assert backend_harness.q.count("status = 'pendente'") == 4 - len(taken)
    claimer.size = 5
    assert [t["id"] for t in claimer.claim().tasks] == [ids[3], ids[2], ids[1]] + (
        [] if taken else [ids[0]])
    one.repo.session.commit()
    assert backend_harness.q.count("status = 'processando'") == 4


def _lease_outlives_the_session(h: Harness, guard: Any, task_id: int) -> None:
    """leases: the rescue leaves a live worker's task alone; once the worker is gone (no
    heartbeat), its lease expires and the rescue fails and re-queues the task, once."""
    from nsj_queue_lib.runtime.maintenance import rescue_expired_leases

    rescuer = h.session()
    assert rescue_expired_leases(rescuer, h.settings, h.backend) == 0
    assert h.q.row(task_id)["status"] == "processando"
    guard.close()
    guard.repo.session.close()  # the worker dies
    started = time.monotonic()
    eventually(lambda: rescue_expired_leases(rescuer, h.settings, h.backend) == 1,
               h.settings.queue_lease_seconds + 5, interval=0.2, message="concessão vencida")
    assert time.monotonic() - started <= h.settings.queue_lease_seconds + 1
    assert h.q.row(task_id)["status"] == "falha"
    assert [r["status"] for r in h.q.chain(task_id)] == ["falha", "agendada"]
    assert rescue_expired_leases(rescuer, h.settings, h.backend) == 0


def test_the_task_lock_is_held_until_release_and_dies_with_the_session(backend_harness):
    task_id = backend_harness.q.insert({"n": 1})
    guard = backend_harness.guard()
    [tarefa] = guard.claim()
    if backend_harness.backend.capabilities.leases:
        _lease_outlives_the_session(backend_harness, guard, task_id)
        return
    admin = backend_harness.backend.admin_locker(backend_harness.session())
    key = task_lock_key(backend_harness.settings.queue_table, task_id)
    assert admin.try_lock(key) is False  # the rescue sees a live worker
    guard.close()
    guard.repo.session.close()  # the worker dies: its lock goes with its session
    deadline = time.monotonic() + 5
    while not admin.try_lock(key):
        assert time.monotonic() < deadline, "lock não liberado com a sessão"
        time.sleep(0.02)
    assert admin.unlock(key)
    assert tarefa["id"] == task_id


def test_admin_locks_are_owned_by_their_session(backend_harness):
    a = backend_harness.backend.admin_locker(backend_harness.session())
    b = backend_harness.backend.admin_locker(backend_harness.session())
    backend_harness.closers += [a, b]
    key = (12345, 6)
    assert a.try_lock(key) and a.try_lock(key)  # re-entrant
    assert b.try_lock(key) is False and b.unlock(key) is False
    assert a.unlock(key) and b.try_lock(key) is False  # one hold left
    assert a.unlock(key) and b.try_lock(key) is True


def test_an_idle_worker_is_woken_by_an_insert_without_producer_notify(backend_harness):
    backend_harness.require("wakes_on_insert")
    notifier = backend_harness.backend.notifier(backend_harness.session())
    backend_harness.closers.append(notifier)
    notifier.listen()
    time.sleep(0.3)  # registered (socket) and any stale wake-up drained
    notifier.wait(0.2)
    started = time.monotonic()
    backend_harness.q.insert({"n": "novo"})
    woke = []
    while not woke and time.monotonic() - started < 3:
        woke = notifier.wait(0.5)
    assert woke, "nenhum aviso"
    assert time.monotonic() - started < 1.0


def test_notify_wakes_a_listening_worker_and_a_transactional_one_only_at_commit(backend_harness):
    listener = listening(backend_harness)
    producer = backend_harness.session()
    sender = backend_harness.backend.notifier(producer)
    backend_harness.closers.append(sender)
    producer.begin()
    producer.execute(f"INSERT INTO {backend_harness.q.qtable} (payload) VALUES ('novo')")
    sender.notify("")
    if backend_harness.backend.capabilities.notify_is_transactional:
        assert listener.wait(0.5) == []  # held with the transaction
    producer.commit()
    assert [n.payload for n in wait_for(listener, "")][-1] == ""


def test_wake_workers_wakes_a_listening_worker(backend_harness):
    listener = listening(backend_harness)
    backend_harness.q.insert({"n": "novo"})
    wait_for(listener, "")  # (the insert's own wake-up, where there is one)
    listener.wait(0.3)
    # a due task is waiting: work to announce
    backend_harness.backend.wake_workers(backend_harness.session(), "")
    wait_for(listener, "")


def test_halt_reaches_every_listener_listening_then_and_no_later_one(backend_harness):
    first, second = listening(backend_harness), listening(backend_harness)
    backend_harness.backend.wake_workers(backend_harness.session(), "HALT")
    for notifier in (first, second):
        wait_for(notifier, "HALT")
    # a worker process started later
    later = listening(backend_harness, make_backend(backend_harness.settings))
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert all(n.payload != "HALT" for n in later.wait(0.5))


def test_a_task_taken_over_is_refused_by_begin_or_finish(backend_harness):
    """The row left 'processando' behind the worker's back (as a rescue does): where the
    lock lives on the task's own session nobody else can take the task, so begin() is
    True and finish() finds the row changed; elsewhere begin() says so at once."""
    task_id = backend_harness.q.insert({"n": 1})
    guard = backend_harness.guard()
    [tarefa] = guard.claim()
    backend_harness.q.sql(f"UPDATE {backend_harness.q.qtable} SET status = 'pendente' WHERE id = "
                          f"%s", (task_id,))
    session = guard.repo.session
    session.begin()
    caps = backend_harness.backend.capabilities
    if caps.lock_on_task_session or caps.leases:  # (leases: fenced at the finish)
        assert guard.begin(tarefa) is True
        assert guard.finish(tarefa, "ok") is False
    else:
        assert guard.begin(tarefa) is False
    session.rollback()
    guard.release(tarefa)
    assert backend_harness.q.row(task_id)["status"] == "pendente"
    # Free for another worker.  (Socket server, protocol version 3: the server's list no
    # longer has it and an empty answer is trusted for up to 50 ms, so it comes at the
    # next read, within a probe interval; the other backends claim it at once.)
    other = backend_harness.guard()
    [again] = eventually(other.claim, 2, interval=0.02,
                         message="tarefa devolvida reivindicada por outro worker")
    assert again["id"] == task_id


def test_close_hands_back_a_task_claimed_ahead(backend_harness):
    first = backend_harness.q.insert({"n": 1}, prioridade=90)
    second = backend_harness.q.insert({"n": 2})
    guard = backend_harness.guard()
    [tarefa] = guard.claim()
    assert tarefa["id"] == first and _run(backend_harness, guard, tarefa)
    ahead = guard.claimed_ahead()
    assert ahead in ([], [second])
    if ahead:
        assert backend_harness.q.row(second)["status"] == "processando"
    guard.close()  # a stop before running it
    assert backend_harness.q.row(second)["status"] == "pendente"
    [other] = backend_harness.guard().claim()  # no lock of the closed guard left on it
    assert other["id"] == second
    assert backend_harness.q.row(first)["status"] == "sucesso"


def test_the_task_lock_lives_where_the_capability_says(backend_harness):
    """lock_on_task_session: the task's lock ends with its database session alone;
    otherwise (socket server) it outlives that session until the guard closes; with
    leases, until the lease expires."""
    task_id = backend_harness.q.insert({"n": 1})
    guard = backend_harness.guard()
    guard.claim()
    if backend_harness.backend.capabilities.leases:
        _lease_outlives_the_session(backend_harness, guard, task_id)
        return
    admin = backend_harness.backend.admin_locker(backend_harness.session())
    backend_harness.closers.append(admin)
    key = task_lock_key(backend_harness.settings.queue_table, task_id)
    guard.repo.session.close()  # the database session only
    deadline = time.monotonic() + 5
    if backend_harness.backend.capabilities.lock_on_task_session:
        while not admin.try_lock(key):
            assert time.monotonic() < deadline, "lock não liberado com a sessão"
            time.sleep(0.02)
    else:
        assert admin.try_lock(key) is False
        guard.close()
        while not admin.try_lock(key):
            assert time.monotonic() < deadline, "lock não liberado com o guard"
            time.sleep(0.02)
    assert admin.unlock(key)
