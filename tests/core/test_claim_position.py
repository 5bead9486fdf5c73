"""The claim and idle probes from the session's claim position (PostgreSQL, #13 item 4).

Real sessions of the library's repository on the test PostgreSQL; the pin is a second
connection holding a REPEATABLE READ snapshot with an xid, as in the chaos scenario.
"""

from __future__ import annotations

import re
from contextlib import closing

import pytest

from nsj_queue_lib.db.claim_position import (
    FULL_SCAN_EVERY,
    PIN_AGE,
    PIN_CHECK_CLAIMS,
    SLACK,
    ClaimPosition,
)
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import task_lock_key
from tests.fixtures.waiting import eventually

NEVER = 3600.0  # full_every that keeps every claim of a test positioned
DEAD = 20_000  # tasks processed under the pin before the measured claims


@pytest.fixture(params=[False, True], ids=["plain", "compat"])
def repo(request, pg_queue):
    session = DbSession.open(pg_queue.settings())
    try:
        repository = TaskRepository(session, pg_queue.table, pg_queue.sub_table,
                                    legacy=request.param)
        # Reads from the position as under a held-back xmin horizon (whatever the other
        # sessions do): these tests check the positioned reads themselves; the horizon
        # check has tests of its own below.
        repository.position.pin_age = -1
        yield repository
    finally:
        session.close()


def _lock_ns(queue) -> int:
    return task_lock_key(queue.table, 0)[0]


def _insert(queue, n: int = 1, *, prioridade: int = 50, ago: str = "0 s") -> list:
    """n tasks committed now, with data_hora `ago` in the past (one statement)."""
    rows = queue.sql(
        f"INSERT INTO {queue.table} (processo, payload, prioridade, data_hora) "
        "SELECT 'p', '{}', %s, now() - %s::interval + g * interval '1 microsecond' "
        "FROM generate_series(1, %s) g RETURNING id", (prioridade, ago, n))
    return [r["id"] for r in rows]


def _claim(repo, queue) -> int:
    [row] = repo.task_claim_locked(_lock_ns(queue))
    return row["id"]


def test_a_straggler_behind_the_position_is_claimed_within_the_bound(repo, pg_queue):
    backlog = _insert(pg_queue, 50)
    assert _claim(repo, pg_queue) == backlog[0]  # the first claim reads from the start
    # Committed after the position, with a data_hora older than the slack.
    [straggler] = _insert(pg_queue, ago="1 hour")
    repo.position.full_every = NEVER
    assert _claim(repo, pg_queue) == backlog[1]  # from the position: not seen yet
    repo.position.full_every = FULL_SCAN_EVERY
    eventually(repo.position.full_due, timeout=FULL_SCAN_EVERY + 5,
               message="a claim from the start is due")
    assert _claim(repo, pg_queue) == straggler  # while 48 tasks ahead of it still wait
    assert pg_queue.count("status = 'pendente'") == 48
    assert pg_queue.row(straggler)["status"] == "processando"


def test_a_late_commit_within_the_slack_is_claimed_from_the_position(repo, pg_queue):
    backlog = _insert(pg_queue, 10)
    assert _claim(repo, pg_queue) == backlog[0]
    repo.position.full_every = NEVER
    [late] = _insert(pg_queue, ago=f"{SLACK / 2} s")  # older than the position, within slack
    assert _claim(repo, pg_queue) == late


def test_higher_priority_first_lower_after_from_the_position(repo, pg_queue):
    backlog = _insert(pg_queue, 3)
    assert _claim(repo, pg_queue) == backlog[0]
    repo.position.full_every = NEVER
    [low] = _insert(pg_queue, prioridade=10, ago="1 hour")
    [high] = _insert(pg_queue, prioridade=90)
    [older_high] = _insert(pg_queue, prioridade=70, ago="1 hour")
    order = [_claim(repo, pg_queue) for _ in range(5)]
    assert order == [high, older_high, backlog[1], backlog[2], low]
    assert repo.task_claim_locked(_lock_ns(pg_queue)) == []


def test_batch_claim_from_the_position_keeps_the_claim_order(repo, pg_queue):
    first = _insert(pg_queue, 2)
    session = repo.session
    session.begin()
    assert [r["id"] for r in repo.task_claim_batch(1, _lock_ns(pg_queue))] == first[:1]
    session.commit()
    repo.position.full_every = NEVER
    [straggler] = _insert(pg_queue, ago="1 hour")
    [low] = _insert(pg_queue, prioridade=10)
    [high] = _insert(pg_queue, prioridade=90, ago="1 hour")
    session.begin()
    claimed = [r["id"] for r in repo.task_claim_batch(10, _lock_ns(pg_queue))]
    session.commit()
    assert claimed == [high, first[1], low]  # the straggler waits for a read from the start
    repo.position.full_every = 0.0
    session.begin()
    assert [r["id"] for r in repo.task_claim_batch(10, _lock_ns(pg_queue))] == [straggler]
    session.commit()


def test_idle_probe_from_the_position_and_its_wait_cap(repo, pg_queue):
    [task] = _insert(pg_queue)
    assert repo.task_seconds_to_next_due() <= 0  # no position yet: from the start
    assert repo.idle_wait_cap() is None
    assert _claim(repo, pg_queue) == task
    repo.position.full_every = NEVER
    _insert(pg_queue, ago="1 hour")  # a straggler
    assert repo.task_seconds_to_next_due() is None  # it is behind the position
    assert 0 < repo.idle_wait_cap() <= NEVER  # so the idle wait ends by the next full read
    probe, more = repo.idle_probe_sql()
    assert "%" not in probe + more
    assert pg_queue.value(probe) is None and pg_queue.value(more) is False
    _insert(pg_queue, 2, prioridade=10)  # due, ahead of the position (another priority)
    assert repo.task_seconds_to_next_due() <= 0
    probe, more = repo.idle_probe_sql()
    assert pg_queue.value(probe) <= 0 and pg_queue.value(more) is True
    repo.position.full_every = 0.0
    assert repo.task_seconds_to_next_due() < -3000  # from the start: the straggler
    assert repo.idle_wait_cap() is None
    assert pg_queue.value(repo.idle_probe_sql()[0]) < -3000


# -- when the position is used ----------------------------------------------------------
def test_with_the_horizon_not_held_back_claims_keep_the_exact_order(repo, pg_queue):
    repo.position.pin_age = 10**9  # no snapshot of the database is that old
    repo.position.full_every = NEVER
    backlog = _insert(pg_queue, 10)
    assert _claim(repo, pg_queue) == backlog[0]
    [straggler] = _insert(pg_queue, ago="1 hour")
    assert _claim(repo, pg_queue) == straggler  # at once, not after a bound
    assert repo.position.pinned is False
    assert repo.task_seconds_to_next_due() <= 0 and repo.idle_wait_cap() is None


def test_a_held_back_horizon_is_detected_and_so_is_its_end(pg_queue, pg_server):
    session = DbSession.open(pg_queue.settings())
    with closing(pg_server.connect(autocommit=False)) as pin, \
            closing(pg_server.connect()) as other, other.cursor() as burn:
        try:
            repo = TaskRepository(session, pg_queue.table, pg_queue.sub_table)
            with pin.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("SELECT txid_current()")
            for _ in range(PIN_AGE + 1):  # transactions that commit while the pin holds
                burn.execute("SELECT txid_current()")
            backlog = _insert(pg_queue, 10)
            assert _claim(repo, pg_queue) == backlog[0]
            assert repo.position.pinned is True
            [straggler] = _insert(pg_queue, ago="1 hour")
            assert _claim(repo, pg_queue) == backlog[1]  # from the position
            pin.rollback()
            repo.position.full_every = 0.0  # the next read checks the horizon again
            assert _claim(repo, pg_queue) == straggler
            assert repo.position.pinned is True  # for pin_hold seconds after the end
            repo.position.pin_hold = 0.0
            assert _claim(repo, pg_queue) == backlog[2]
            assert repo.position.pinned is False
        finally:
            session.close()


def test_an_idle_session_does_not_check_the_horizon_a_held_one_does():
    now = [0.0]
    position = ClaimPosition(clock=lambda: now[0])
    assert position.pin_check_due()  # the first read
    position.pin_checked(False)
    now[0] += 10 * FULL_SCAN_EVERY
    assert not position.pin_check_due()  # idle: no claim since, no statement
    row = {"prioridade": 50, "data_hora": None, "id": 1}
    position.note([row] * (PIN_CHECK_CLAIMS - 1))
    assert not position.pin_check_due()
    position.note([row])
    assert position.pin_check_due()  # busy enough for a pin to cost
    position.pin_checked(True)
    now[0] += FULL_SCAN_EVERY
    assert position.pin_check_due()  # while held: by time alone, to see its end


# -- under a pinned xmin ----------------------------------------------------------------
def _positional(sql: str, params: dict):
    order: list = []

    def sub(match):
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", sub, sql), [params[k] for k in order]


def _explain_generic(queue, sql: str, params: dict) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of `sql` prepared with the generic plan (the plan a
    prepared claim settles on), run on a connection of its own (closed after)."""
    text, values = _positional(sql, params)
    with closing(queue.server.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute(f"PREPARE q AS {text}")
        marks = f"({', '.join(['%s'] * len(values))})" if values else ""
        cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE q{marks}", values)
        plan = cur.fetchone()[0]
    return plan[0]["Plan"]


def _buffers(plan: dict) -> int:
    return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_under_a_pin_the_positioned_claim_and_probes_read_a_bounded_number_of_buffers(
        repo, pg_queue, pg_server):
    with closing(pg_server.connect(autocommit=False)) as pin, pin.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SELECT txid_current()")
        # DEAD tasks run to the end while the pin holds: the index entries of their
        # 'pendente' versions cannot be killed.
        _insert(pg_queue, DEAD, ago="1 hour")
        pg_queue.sql(f"UPDATE {pg_queue.table} SET status = 'processando'")
        pg_queue.sql(f"UPDATE {pg_queue.table} SET status = 'sucesso'")
        live = _insert(pg_queue, 5)
        assert _claim(repo, pg_queue) == live[0]  # first claim: from the start
        lock = {"lock_ns": _lock_ns(pg_queue), "unlock": None, "turn_ns": None,
                "turn_id": None, "hand_id": None, "keep": False, "due_from": None}
        name = "task_claim_locked_compat" if repo.legacy else "task_claim_locked"
        sql = repo.q[name].replace("%(limit)s", "1")
        repo.position.full_every = NEVER
        positioned = _explain_generic(pg_queue, sql, {**lock, **repo.position.claim_params()})
        repo.position.full_every = 0.0
        from_start = _explain_generic(pg_queue, sql, {**lock, **repo.position.claim_params()})
        # Both claimed a task (the next two of the five).
        assert pg_queue.count("status = 'processando'") == 3
        assert _buffers(from_start) >= DEAD // 50, from_start  # O(N): ~600 with 20,000
        assert _buffers(positioned) <= 60, positioned
        # In the generic plan the branch from the position is an ordered range of ix_claim.
        # (The planner may read the other two branches with a bitmap and a sort while its
        # statistics show few waiting rows; ANALYZE re-plans them as the backlog grows.)
        [scan] = [n for n in _nodes(positioned) if "data_hora >=" in n.get("Index Cond", "")
                  and n.get("Index Name") != f"ix_{pg_queue.fila}_due"]  # (not the probe's)
        assert scan["Node Type"] == "Index Scan"
        assert scan["Index Name"] == f"ix_{pg_queue.fila}_claim"
        # The idle probes: from the position bounded, from the start O(N).
        repo.position.full_every = NEVER
        probes = repo.idle_probe_sql()
        repo.position.full_every = 0.0
        full_probes = repo.idle_probe_sql()
        for near, far in zip(probes, full_probes):
            plan = _explain_generic(pg_queue, near, {})
            assert _buffers(plan) <= 30, plan
            assert {n.get("Index Name") for n in _nodes(plan)} - {None} == {
                f"ix_{pg_queue.fila}_due"}  # one range per status
            assert _buffers(_explain_generic(pg_queue, far, {})) >= DEAD // 50
        pin.rollback()
    assert pg_queue.count("status = 'sucesso'") == DEAD


def test_a_claim_that_finds_nothing_answers_the_next_due_time(repo, pg_queue, pg_server):
    """The claim that finds nothing also answers the idle probe (once), read with its own
    snapshot, so the idle worker sends no probe of its own; a claim that gets a task
    answers none."""
    ns = _lock_ns(pg_queue)
    assert repo.task_claim_locked(ns) == []
    assert repo.take_empty_claim_due() == (None,)  # nothing waits
    assert repo.take_empty_claim_due() is None  # taken once
    [scheduled] = _insert(pg_queue, ago="-30 s")  # due in 30 s
    assert repo.task_claim_locked(ns) == []
    [due] = repo.take_empty_claim_due()
    assert 25 < due <= 30
    [task] = _insert(pg_queue)
    with closing(pg_server.connect(autocommit=False)) as other, other.cursor() as cur:
        cur.execute(f"SELECT id FROM {pg_queue.table} WHERE id = %s FOR UPDATE", (task,))
        assert repo.task_claim_locked(ns) == []  # due, but another session holds the row
        [due] = repo.take_empty_claim_due()
        assert due <= 0  # so the worker backs off and claims again soon
        other.rollback()
    [row] = repo.task_claim_locked(ns)
    assert row["id"] == task and "nsjq_next_due" not in row
    assert repo.take_empty_claim_due() is None
    assert pg_queue.row(scheduled)["status"] == "pendente"
