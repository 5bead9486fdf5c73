"""Wake-ups that do not grow with the fleet (PostgreSQL): idle workers take turns listening.

Real worker processes on the real server; what is asserted is what the server shows
(who waits for the listener-turn advisory lock, how many sessions a worker holds) and
the rows the tasks wrote.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from nsj_queue_lib.engine.base import admin_lock_key
from nsj_queue_lib.engine.postgres.listener_turn import ADMIN_LISTENER, TURN_SLICE
from tests.fixtures.counted import Counted
from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually

IDLE = 5


def _turn(queue) -> dict:
    """Sessions holding / waiting for the queue's listener-turn lock."""
    ns, obj = admin_lock_key(queue.table, ADMIN_LISTENER)
    rows = queue.sql("SELECT granted, count(*) AS n FROM pg_locks WHERE locktype = 'advisory' "
                     "AND classid = %s AND objid = %s AND objsubid = 2 GROUP BY granted",
                     (ns & 0xFFFFFFFF, obj & 0xFFFFFFFF))
    out = {True: 0, False: 0}
    for r in rows:
        out[r["granted"]] = r["n"]
    return {"holder": out[True], "waiting": out[False]}


def _socket_inodes(pid: int) -> set:
    """Inodes of the sockets process `pid` holds open (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _sessions_of(queue, pid: int) -> int:
    """Database sessions process `pid` holds, over TCP or over a unix socket.

    TCP: its local ports matched against pg_stat_activity.client_port.  Unix socket
    (the embedded server): pg_stat_activity cannot name the client, so its connected
    unix sockets are counted (a worker opens no other unix socket).
    """
    inodes = _socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            parts = line.split()
            if parts[9] in inodes:
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    if queue.server.host.startswith("/"):
        unix = 0
        for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
            parts = line.split()
            # Num RefCount Protocol Flags Type St Inode [Path]; St 03 = connected.
            if parts[6] in inodes and parts[5] == "03":
                unix += 1
        return unix
    if not ports:
        return 0
    return int(queue.value("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                           (list(ports),)))


def test_one_idle_worker_listens_the_others_wait_on_the_lock(pg_queue):
    workers = [pg_queue.start_worker() for _ in range(IDLE)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": IDLE - 1},
               message="one holder of the listener turn, the others waiting for it")
    # Waiting for the turn is a statement blocked on the lock (re-issued once per
    # slice, see the next test), not a polling loop.
    def blocked():
        return pg_queue.sql("SELECT state FROM pg_stat_activity "
                            "WHERE application_name = %s AND wait_event_type = 'Lock'",
                            (f"nsj_queue_lib:{pg_queue.fila}",))
    eventually(lambda: [r["state"] for r in blocked()] == ["active"] * (IDLE - 1),
               message="the waiting workers blocked on the lock")

    # Tasks arriving one at a time: each runs exactly once, and the turn goes round.
    ids = []
    for i in range(40):
        ids.append(pg_queue.insert({"efeito": f"t{i}"}))
        time.sleep(0.02)
    pg_queue.wait_idle(timeout=60)
    effects = pg_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)
    assert pg_queue.count("status = 'sucesso'") == 40
    assert len({e["pid"] for e in effects}) >= 2, "the turn did not move between workers"
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": IDLE - 1},
               message="back to one listener after the burst")

    # One database session per worker process (no separate heartbeat connection).
    for w in workers:
        assert _sessions_of(pg_queue, w.pid) == 1, w.log()
    assert pg_queue.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                          (f"nsj_queue_lib:{pg_queue.fila}",)) == IDLE

    # HALT reaches every idle worker, the waiting ones included (turn by turn).
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    for w in workers:
        assert w.wait_exit(30) == 0, w.log()
    assert _turn(pg_queue) == {"holder": 0, "waiting": 0}


WORKER_XMIN = """
SELECT backend_xmin::text::bigint AS x
  FROM pg_stat_activity
 WHERE application_name = %s AND backend_xmin IS NOT NULL
"""
# xid of 32 bits, as backend_xmin (a wraparound during the test is not expected).
FRESH_XMIN = "SELECT txid_snapshot_xmin(txid_current_snapshot()) % 4294967296"


def test_idle_workers_never_hold_back_xmin_for_long(pg_queue):
    """Waiting for the turn holds a snapshot (backend_xmin) for one slice at most, so an
    idle fleet never holds back the xmin horizon (what VACUUM may remove) for long.

    The age of a worker's snapshot is bounded below without trusting clocks: once a
    fresh snapshot's xmin is past the worker's backend_xmin, the worker's snapshot is
    older than that moment (another session pinning the horizon cannot fake an age).
    """
    workers = [pg_queue.start_worker() for _ in range(3)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="turn settled")
    app = f"nsj_queue_lib:{pg_queue.fila}"
    passed = []  # (time, fresh xmin): when the horizon of a new snapshot reached a value
    seen, oldest = 0, 0.0
    end = time.monotonic() + 4 * TURN_SLICE + 2
    while time.monotonic() < end:
        pg_queue.value("SELECT txid_current()")  # xids move on, so fresh snapshots move on
        rows = pg_queue.sql(WORKER_XMIN, (app,))
        now = time.monotonic()
        fresh = pg_queue.value(FRESH_XMIN)
        passed.append((now, int(fresh)))
        for r in rows:
            seen += 1
            since = next((t for t, f in passed if f > r["x"]), None)
            if since is not None:
                oldest = max(oldest, now - since)
        time.sleep(0.05)
    assert seen > 0, "the waiting workers showed no snapshot at all"
    assert oldest < 2 * TURN_SLICE + 1, f"an idle worker held its snapshot for {oldest:.1f} s"
    assert _turn(pg_queue)["holder"] == 1
    task = pg_queue.insert({"efeito": "depois"})
    pg_queue.wait_status(task, "sucesso")


def test_sigterm_stops_a_worker_waiting_for_the_turn_at_once(pg_queue):
    holder = pg_queue.start_worker()
    wait_ready(holder)
    eventually(lambda: _turn(pg_queue)["holder"] == 1, message="first worker holds the turn")
    waiting = pg_queue.start_worker()
    wait_ready(waiting)
    eventually(lambda: _turn(pg_queue)["waiting"] == 1, message="second worker waits for it")
    t0 = time.monotonic()
    waiting.signal(signal.SIGTERM)
    assert waiting.wait_exit(10) == 0, waiting.log()
    assert time.monotonic() - t0 < 5
    assert _turn(pg_queue) == {"holder": 1, "waiting": 0}
    # The holder still serves the queue.
    task = pg_queue.insert({"efeito": "after"})
    pg_queue.wait_status(task, "sucesso")
    holder.signal(signal.SIGTERM)
    assert holder.wait_exit(10) == 0


def test_scheduled_task_runs_on_time_with_waiting_workers(pg_queue):
    """The turn holder's timer (not the 30 s periodic poll) runs a scheduled task."""
    import datetime as dt

    workers = [pg_queue.start_worker() for _ in range(3)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="turn settled")
    due = pg_queue.db_now() + dt.timedelta(seconds=2)
    task = pg_queue.insert({"efeito": "agendada"}, data_hora=due)
    t0 = time.monotonic()
    pg_queue.wait_status(task, "sucesso", timeout=15)
    assert time.monotonic() - t0 < 12  # QUEUE_WAIT_NOTIFY_INTERVAL is 30 s in tests
    assert [e["tarefa_id"] for e in pg_queue.effects()] == [task]


def _raw_key_holders(queue, task_id: int) -> list:
    """pids holding 1.2.2's key of `task_id` (the one-bigint advisory lock of the raw id)."""
    rows = queue.sql("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                     "AND classid = %s AND objid = %s AND objsubid = 1",
                     (task_id >> 32, task_id & 0xFFFFFFFF))
    return [r["pid"] for r in rows]


def test_compat_key_of_a_finished_task_is_released_before_the_idle_wait(pg_queue):
    """With QUEUE_COMPAT_1_2_2 the raw-id key of a finished task is released by the next
    statement the worker sends anyway (its next claim, or the listener turn's wait), so
    never later than the start of its idle wait: seen from another session in pg_locks.
    The poll interval is 30 s: a key left for the idle wait would stay that long."""
    backlog = [pg_queue.insert({"efeito": f"b{i}", "sleep": 0.3}) for i in range(2)]
    worker = pg_queue.start_worker(QUEUE_COMPAT_1_2_2="true")
    wait_ready(worker)
    # The backlog path: a task that runs holds its key ...
    pg_queue.wait_status(backlog[0], "processando")
    eventually(lambda: len(_raw_key_holders(pg_queue, backlog[0])) == 1,
               message="the running task holds 1.2.2's key")
    pg_queue.wait_idle(timeout=30)
    # ... and after the last task of the backlog the key is gone before the idle wait.
    for task in backlog:
        eventually(lambda t=task: _raw_key_holders(pg_queue, t) == [], timeout=3,
                   message="1.2.2's key released")
    eventually(lambda: _turn(pg_queue)["holder"] == 1, message="idle: holding the turn")

    # A task taken on a wake-up (the turn path), then the wait for the turn again, with a
    # second idle worker holding the turn meanwhile.
    other = pg_queue.start_worker(QUEUE_COMPAT_1_2_2="true")
    wait_ready(other)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 1}, message="turn settled")
    woken = pg_queue.insert({"efeito": "acordada", "sleep": 0.3})
    pg_queue.wait_status(woken, "sucesso")
    eventually(lambda: _raw_key_holders(pg_queue, woken) == [], timeout=3,
               message="1.2.2's key released by the turn's wait statement")
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 1}, message="idle again")
    assert sorted(e["chave"] for e in pg_queue.effects()) == ["acordada", "b0", "b1"]


def test_turn_without_the_marker_as_on_postgresql_10(pg_queue):
    """PostgreSQL < 11 (no COMMIT in DO): the granted worker drops the old notifications
    and probes with statements of its own; tasks still run once each, the turn goes
    round, a scheduled task runs on time and HALT reaches every worker."""
    import datetime as dt

    workers = [pg_queue.start_worker("tests.workers.turn_no_marker") for _ in range(3)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="turn settled")
    ids = []
    for i in range(20):
        ids.append(pg_queue.insert({"efeito": f"t{i}"}))
        time.sleep(0.02)
    pg_queue.wait_idle(timeout=60)
    assert sorted(e["tarefa_id"] for e in pg_queue.effects()) == sorted(ids)
    assert len({e["pid"] for e in pg_queue.effects()}) >= 2, "the turn did not move"
    due = pg_queue.db_now() + dt.timedelta(seconds=2)
    task = pg_queue.insert({"efeito": "agendada"}, data_hora=due)
    t0 = time.monotonic()
    pg_queue.wait_status(task, "sucesso", timeout=15)
    assert time.monotonic() - t0 < 12
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    for w in workers:
        assert w.wait_exit(30) == 0, w.log()


# -- keeping the turn through a short lone task (#13 item 3) ------------------------------
def _turn_holder_pid(queue):
    ns, obj = admin_lock_key(queue.table, ADMIN_LISTENER)
    return queue.value("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                       "AND classid = %s AND objid = %s AND objsubid = 2",
                       (ns & 0xFFFFFFFF, obj & 0xFFFFFFFF))


def _task_lock_pid(queue, task_id: int):
    from nsj_queue_lib.engine.base import task_lock_key

    ns, obj = task_lock_key(queue.table, task_id)
    return queue.value("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                       "AND classid = %s AND objid = %s AND objsubid = 2",
                       (ns & 0xFFFFFFFF, obj & 0xFFFFFFFF))


def test_statements_per_task_with_idle_workers_and_steady_arrivals(pg_queue, tmp_path):
    """8 idle workers, tasks arriving one at a time at 50/s: fewer than 5.75 statements per
    completed task, every statement of every process counted (bench/counting.py; BEGIN and
    COMMIT count).  Per task the claim, BEGIN, the task's INSERT, the finish and COMMIT;
    the holder keeps the turn through each short lone task, so the turn no longer changes
    hands (one DO statement) per task; the waiters add one statement per second each
    (0.14 per task here).  Before: 6.0 and more (a wait statement per task; 6.1 measured).
    Measured after: 5.2-5.4 at 100/s on a loaded machine, 5.67 at load 14."""
    counted = Counted(tmp_path)
    n = 8
    workers = counted.start_workers(pg_queue, n)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": n - 1}, 20,
               message="turn settled")
    counted.mark()
    rate, seconds = 50.0, 5.0
    started = time.monotonic()
    ids = pg_queue.insert_steadily(rate, seconds)
    arrival = len(ids) / (time.monotonic() - started)
    eventually(lambda: pg_queue.count("status = 'sucesso'") == len(ids), 30,
               message="every task done")
    sent = counted.stop_and_count(workers)  # one count per worker
    assert sorted(e["tarefa_id"] for e in pg_queue.effects()) == sorted(ids)  # once each
    assert arrival > 0.8 * rate, arrival
    per_task = sum(sent) / len(ids)
    assert per_task < 5.75, (per_task, sent)


def test_a_long_task_run_while_keeping_the_turn_does_not_hold_up_other_tasks(pg_queue, tmp_path):
    """The holder keeps the turn through a lone task when its tasks ran short; when that
    task then runs long, nobody listens meanwhile.  A waiter whose wait slice expires sees
    a task due for more than LATE seconds and claims it by itself: pickup degrades to a
    second or two, not to the end of the long task nor to the 30 s poll interval."""
    import datetime as dt

    from nsj_queue_lib.engine.postgres.listener_turn import LATE

    workers = [pg_queue.start_worker() for _ in range(3)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="turn settled")
    # Short tasks one at a time: each worker learns its tasks run short (the first task of
    # a worker hands the turn on, as before).
    for i in range(8):
        pg_queue.wait_status(pg_queue.insert({"efeito": f"curta{i}"}), "sucesso")
        eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="idle again")
    # Then a lone task that runs long (until `release` exists): its worker holds the turn.
    release, started = tmp_path / "release", tmp_path / "started"
    long_task = pg_queue.insert({"efeito": "longa", "started_file": str(started),
                                 "wait_file": str(release)})
    eventually(started.exists, 10, message="long task started")
    runner = _task_lock_pid(pg_queue, long_task)
    assert runner is not None and _turn_holder_pid(pg_queue) == runner, (
        "the worker of the lone short-running task did not keep the turn")
    assert _turn(pg_queue) == {"holder": 1, "waiting": 2}
    other = pg_queue.insert({"efeito": "outra"})
    committed = time.monotonic()
    row = pg_queue.wait_status(other, "sucesso", timeout=4 * LATE + 3)
    waited = time.monotonic() - committed
    assert pg_queue.rows("id = %s", (long_task,))[0]["status"] == "processando"
    assert waited < 4 * LATE + 3, waited
    assert row["status"] == "sucesso"
    release.touch()
    pg_queue.wait_status(long_task, "sucesso")
    assert sorted(e["chave"] for e in pg_queue.effects() if e["chave"] == "outra") == ["outra"]
    # Back to one holder, and a task scheduled a little later still runs on time.
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="idle again")
    due = pg_queue.db_now() + dt.timedelta(seconds=2)
    task = pg_queue.insert({"efeito": "agendada"}, data_hora=due)
    t0 = time.monotonic()
    pg_queue.wait_status(task, "sucesso", timeout=15)
    assert time.monotonic() - t0 < 12


def test_compat_key_of_a_task_run_keeping_the_turn_is_released_while_idle(pg_queue):
    """With QUEUE_COMPAT_1_2_2 the 1.2.2 key of a finished task waits for the worker's next
    statement.  A holder that kept the turn through the task sends none before its idle
    wait: it releases the key after KEPT_SETTLE seconds of waiting (seen in pg_locks), not
    at the 30 s poll."""
    from nsj_queue_lib.engine.postgres.listener_turn import KEPT_SETTLE

    workers = [pg_queue.start_worker(QUEUE_COMPAT_1_2_2="true") for _ in range(2)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 1}, message="turn settled")
    kept = 0
    for i in range(8):
        holder = _turn_holder_pid(pg_queue)
        task = pg_queue.insert({"efeito": f"c{i}"})
        pg_queue.wait_status(task, "sucesso")
        eventually(lambda t=task: _raw_key_holders(pg_queue, t) == [], timeout=KEPT_SETTLE + 2,
                   message="1.2.2's key released")
        eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 1}, message="idle again")
        if _turn_holder_pid(pg_queue) == holder:  # (a hand-over: the other worker holds it)
            kept += 1
    assert kept >= 3, "the turn was not kept through the short lone tasks"
    assert sorted(e["chave"] for e in pg_queue.effects()) == [f"c{i}" for i in range(8)]


def test_a_task_arriving_right_after_a_kept_task_runs_at_once_in_compat_mode(pg_queue):
    """QUEUE_COMPAT_1_2_2: a holder that kept the turn through a task first waits up to
    KEPT_SETTLE for a wake-up (then releases 1.2.2's key).  A task arriving in that window
    is taken at once.  Failed before the fix: that first wait consumed the wake-up and the
    worker waited again, for the next notification or the 30 s poll (one worker here, so
    no waiter claims a late task either)."""
    worker = pg_queue.start_worker(QUEUE_COMPAT_1_2_2="true")
    wait_ready(worker)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 0}, message="turn held")
    for i in range(6):
        pg_queue.wait_status(pg_queue.insert({"efeito": f"a{i}"}), "sucesso", timeout=10)
    assert pg_queue.count("status = 'sucesso'") == 6
    assert worker.proc.poll() is None


def _until_a_single_worker_keeps(queue, singles, waiting: int):
    """Short lone tasks until a single-threaded worker of `singles` holds the turn and has
    kept it through 3 of its tasks (a first task hands the turn on, as before; whichever
    single-threaded worker then holds it keeps it); returns (that worker, its session's
    pid)."""
    by_pid = {w.pid: w for w in singles}
    kept: dict = {}
    for i in range(40):
        before = _turn_holder_pid(queue)
        task = queue.insert({"efeito": f"curta{i}"})
        queue.wait_status(task, "sucesso")
        eventually(lambda: _turn(queue) == {"holder": 1, "waiting": waiting},
                   message="idle again")
        runner = next(e["pid"] for e in queue.effects() if e["tarefa_id"] == task)
        after = _turn_holder_pid(queue)
        if before == after and runner in by_pid:
            kept[after] = kept.get(after, 0) + 1
            if kept[after] >= 3:
                return by_pid[runner], after
    raise AssertionError("no single-threaded worker kept the turn")


def test_a_long_kept_task_does_not_hold_up_a_task_when_the_waiter_is_a_concurrency_listener(
        pg_queue, tmp_path):
    """The late check of the waiters (a task due for more than LATE seconds while the
    holder runs a task it kept the turn through) must also be made by the listener thread
    of a QUEUE_CONCURRENCY worker, which waits for the same turn.  Here the holder is a
    single-threaded worker and the only waiter is such a listener: before the fix that
    listener waited without the check, its task threads waited for their own poll
    (QUEUE_WAIT_NOTIFY_INTERVAL, 300 s here), and a task arriving during the long kept
    task waited for the end of that task."""
    from nsj_queue_lib.engine.postgres.listener_turn import LATE

    single = pg_queue.start_worker()
    wait_ready(single)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 0}, message="turn held")
    threaded = pg_queue.start_worker(QUEUE_CONCURRENCY="2", QUEUE_WAIT_NOTIFY_INTERVAL="300")
    wait_ready(threaded)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 1}, message="turn settled")
    _, single_pid = _until_a_single_worker_keeps(pg_queue, [single], 1)
    release, started = tmp_path / "release", tmp_path / "started"
    long_task = pg_queue.insert({"efeito": "longa", "started_file": str(started),
                                 "wait_file": str(release)})
    eventually(started.exists, 10, message="long task started")
    assert _task_lock_pid(pg_queue, long_task) == single_pid == _turn_holder_pid(pg_queue)
    other = pg_queue.insert({"efeito": "outra"})
    committed = time.monotonic()
    try:
        row = pg_queue.wait_status(other, "sucesso", timeout=4 * LATE + 3)
        waited = time.monotonic() - committed
        assert row["status"] == "sucesso"
        assert waited < 4 * LATE + 3, waited
        assert pg_queue.rows("id = %s", (long_task,))[0]["status"] == "processando"
    finally:
        release.touch()
    pg_queue.wait_status(long_task, "sucesso")
    assert sorted(e["chave"] for e in pg_queue.effects() if e["chave"] in ("outra", "longa")) == [
        "longa", "outra"]
    for w in (single, threaded):
        w.signal(signal.SIGTERM)
    for w in (single, threaded):
        assert w.wait_exit(20) == 0, w.log()[-3000:]


def test_halt_reaches_the_waiters_while_the_holder_runs_a_long_kept_task(pg_queue, tmp_path):
    """HALT must reach the idle workers while the holder of the turn runs a task it kept
    the turn through.  Those workers wait for the turn, and a waiter used to see HALT only
    once granted (HALT spreads from turn to turn): with the turn kept through a long task
    none is granted until that task ends, so HALT stopped nobody for the task's duration.
    Waiters here: a single-threaded worker and a QUEUE_CONCURRENCY worker's listener."""
    singles = [pg_queue.start_worker(), pg_queue.start_worker()]
    workers = [*singles, pg_queue.start_worker(QUEUE_CONCURRENCY="2")]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2}, message="turn settled")
    single, keeper_pid = _until_a_single_worker_keeps(pg_queue, singles, 2)
    others = [w for w in workers if w is not single]
    release, started = tmp_path / "release", tmp_path / "started"
    long_task = pg_queue.insert({"efeito": "longa", "started_file": str(started),
                                 "wait_file": str(release)})
    eventually(started.exists, 10, message="long task started")
    assert int(started.read_text()) == single.pid
    assert _task_lock_pid(pg_queue, long_task) == keeper_pid == _turn_holder_pid(pg_queue)
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    sent = time.monotonic()
    try:
        for w in others:
            remaining = max(0.1, sent + 4 * TURN_SLICE + 4 - time.monotonic())
            assert w.wait_exit(remaining) == 0, w.log()[-3000:]
        assert single.proc.poll() is None  # still running the long task
        assert pg_queue.rows("id = %s", (long_task,))[0]["status"] == "processando"
    finally:
        release.touch()
    pg_queue.wait_status(long_task, "sucesso")
    assert single.wait_exit(20) == 0, single.log()[-3000:]  # HALT seen after its task
