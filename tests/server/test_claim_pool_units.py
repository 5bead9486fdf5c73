"""ClaimPool (the server's side of `claim`) on its own: the candidate reader is a plain
callable here, the lock table the server's real one."""

from __future__ import annotations

import threading
import time

import pytest

from nsj_queue_lib.engine.keys import task_lock_key
from nsj_queue_lib.server.claim_pool import READ_WAIT, ClaimPool
from nsj_queue_lib.server.locks import LockLimitExceeded, LockTable

TABLE = "esquema.fila"


def _key(task_id: int):
    return task_lock_key(TABLE, task_id)


def test_ids_are_handed_out_locked_in_order_skipping_held_ones() -> None:
    locks = LockTable()
    reads: list[int] = []

    def candidates(limit: int) -> list[int]:
        reads.append(limit)
        return [5, 3, 9, 1]

    pool = ClaimPool(candidates, TABLE, locks, max_age=60)
    assert locks.try_lock(99, _key(3))  # running elsewhere
    assert pool.take(1, 2) == [5, 9]
    assert locks.holder(_key(5)) == 1 and locks.holder(_key(9)) == 1
    assert pool.take(2, 5) == [1] and len(reads) == 1  # one read served both
    assert pool.handed_out == 3
    assert pool.namespace == _key(0)[0]


def test_the_lock_cap_is_kept() -> None:
    locks = LockTable()
    pool = ClaimPool(lambda limit: [1, 2, 3], TABLE, locks, max_age=60)
    assert pool.take(1, 3, max_locks=2) == [1, 2]  # stops at the cap, keeps the rest
    with pytest.raises(LockLimitExceeded):
        pool.take(1, 1, max_locks=2)
    assert pool.take(2, 1) == [3]


def test_a_failing_read_answers_empty_and_is_not_retried_at_once() -> None:
    calls: list[int] = []

    def broken(limit: int) -> list[int]:
        calls.append(limit)
        raise RuntimeError("banco fora do ar")

    pool = ClaimPool(broken, TABLE, LockTable())
    assert pool.take(1, 1) == [] and pool.take(1, 1) == []
    assert len(calls) == 1  # the claims back off; the probe keeps reading
    with pytest.raises(RuntimeError):
        pool.refresh()


def test_a_claim_never_waits_long_for_a_slow_read() -> None:
    release, reading = threading.Event(), threading.Event()

    def slow(limit: int) -> list[int]:
        reading.set()
        release.wait(10)
        return [7]

    pool = ClaimPool(slow, TABLE, LockTable())
    probe = threading.Thread(target=pool.refresh)
    probe.start()
    try:
        assert reading.wait(5)  # the probe's read is under way
        started = time.monotonic()
        assert pool.take(1, 1) == []
        assert time.monotonic() - started < READ_WAIT + 0.5
    finally:
        release.set()
        probe.join(5)
    assert pool.take(1, 1) == [7]
