"""MySQL native idle turn (engine/mysql/idle_turn.py) with real worker processes on
MariaDB: of N idle workers only the holder of the turn polls, the others wait inside the
server (seen in information_schema.PROCESSLIST); a holder killed with kill -9 is replaced;
HALT reaches the workers waiting for the turn; tasks, scheduled ones too, are still
picked up promptly."""

from __future__ import annotations

import datetime as dt
import signal
import time
from typing import Dict, List

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.mysql.backend import HALT_CHECK, TURN_WAIT, MysqlBackend, lock_prefix
from nsj_queue_lib.engine.mysql.idle_turn import turn_lock_name
from nsj_queue_lib.runtime.pause import CHECK_INTERVAL
from tests.fixtures.counted import Counted
from tests.fixtures.processes import wait_all_ready, wait_ready
from tests.fixtures.waiting import eventually

IDLE = 4


def _turn(mariadb_queue) -> str:
    return turn_lock_name(lock_prefix(mariadb_queue.settings()), mariadb_queue.table)


def _holder(mariadb_queue):
    """Connection id holding the queue's idle turn (None: nobody)."""
    return mariadb_queue.value("SELECT IS_USED_LOCK(%s) AS h", (_turn(mariadb_queue),))


def _workers_sessions(mariadb_queue) -> List[Dict]:
    return mariadb_queue.sql("SELECT ID, STATE, QUERY_ID FROM information_schema.PROCESSLIST "
                             "WHERE DB = %s AND ID <> CONNECTION_ID()", (mariadb_queue.schema,))


def _sample(mariadb_queue, seconds: float) -> Dict[int, Dict]:
    """Per worker connection over `seconds`: samples taken, samples waiting in GET_LOCK
    ('User lock'), and distinct statements seen (QUERY_ID is the server's id of the
    connection's current or last statement)."""
    seen: Dict[int, Dict] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for row in _workers_sessions(mariadb_queue):
            s = seen.setdefault(row["ID"], {"samples": 0, "locked": 0, "queries": set()})
            s["samples"] += 1
            s["locked"] += row["STATE"] == "User lock"
            s["queries"].add(row["QUERY_ID"])
        time.sleep(0.02)
    return seen


def test_only_the_turn_holder_polls(mariadb_queue):
    workers = [mariadb_queue.start_worker() for _ in range(IDLE)]
    wait_all_ready(workers)
    time.sleep(1.5)  # start-up statements (rescue, first probes) settle
    seconds = 3.0
    holder = _holder(mariadb_queue)
    seen = _sample(mariadb_queue, seconds)
    assert len(seen) == IDLE, seen  # one connection per worker
    # A waiter sends one GET_LOCK per HALT_CHECK (0.5 s); a poller probes every
    # QUEUE_POLL_INTERVAL (0.1 s): dozens of statements.
    most = seconds / HALT_CHECK + 3
    polling = {c: len(s["queries"]) for c, s in seen.items() if len(s["queries"]) > most}
    assert list(polling) == [holder], (holder, polling)
    assert _holder(mariadb_queue) == holder  # an idle holder keeps the turn
    assert seen[holder]["locked"] == 0
    for conn_id, s in seen.items():
        if conn_id != holder:  # the others wait inside the server
            assert s["locked"] >= 0.7 * s["samples"], (conn_id, s)
    # Tasks are still picked up, by whichever worker.
    ids = [mariadb_queue.insert({"efeito": f"t{i}"}) for i in range(5)]
    for task_id in ids:
        mariadb_queue.wait_status(task_id, "sucesso")


def test_a_killed_turn_holder_is_replaced(mariadb_queue):
    first = mariadb_queue.start_worker()
    wait_ready(first)
    holder = eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    others = [mariadb_queue.start_worker() for _ in range(2)]
    wait_all_ready(others)
    time.sleep(1.0)
    assert _holder(mariadb_queue) == holder  # the first idle worker still holds it
    first.kill9()
    new = eventually(lambda: ((_holder(mariadb_queue) or holder) != holder
                              and _holder(mariadb_queue)), 10,
                     message="outro worker tomou a vez")
    assert new in {r["ID"] for r in _workers_sessions(mariadb_queue)}
    # Pickup stays prompt under the new holder (its probe, not the 30 s periodic claim).
    ids, lags = [], []
    for i in range(5):
        ids.append(mariadb_queue.insert({"efeito": f"k{i}"}))
        t0 = time.monotonic()
        mariadb_queue.wait_status(ids[-1], "sucesso")
        lags.append(time.monotonic() - t0)
    assert sorted(lags)[2] < 1.0, lags
    pids = {e["pid"] for e in mariadb_queue.effects()}
    assert pids and first.pid not in pids
    assert pids <= {w.pid for w in others}


def test_halt_reaches_workers_waiting_for_the_turn(mariadb_queue):
    workers = [mariadb_queue.start_worker() for _ in range(3)]
    wait_all_ready(workers)
    holder = eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    eventually(lambda: sum(r["STATE"] == "User lock"
                           for r in _workers_sessions(mariadb_queue)) == 2,
               10, message="dois workers aguardando a vez")
    session = DbSession.open(mariadb_queue.settings())
    try:
        started = time.monotonic()
        QueueAdmin(session, mariadb_queue.table).halt()
    finally:
        session.close()
    for worker in workers:
        eventually(lambda w=worker: w.proc.poll() is not None, 10,
                   message="worker parou com o HALT")
    elapsed = time.monotonic() - started
    # HALT_CHECK (0.5 s) per read, plus the process's exit.
    assert elapsed < 4 * HALT_CHECK + 2.0, elapsed
    assert holder is not None and _holder(mariadb_queue) is None


def test_pickup_and_scheduled_tasks_with_idle_workers(mariadb_queue):
    workers = [mariadb_queue.start_worker() for _ in range(IDLE)]
    wait_all_ready(workers)
    eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    lags = []
    for i in range(5):
        task_id = mariadb_queue.insert({"efeito": f"p{i}"})
        t0 = time.monotonic()
        mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
        lags.append(time.monotonic() - t0)
        time.sleep(0.3)
    # Found by the holder's next probe (QUEUE_POLL_INTERVAL 0.1 s), not by the periodic
    # claim of QUEUE_WAIT_NOTIFY_INTERVAL (30 s).
    assert sorted(lags)[2] < 1.0, lags
    at = mariadb_queue.db_now() + dt.timedelta(seconds=2)
    task_id = mariadb_queue.insert({"efeito": "agendada"}, data_hora=at)
    row = mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
    assert mariadb_queue.count(f"id = {int(task_id)} AND status = 'sucesso'") == 1
    done = mariadb_queue.effects("chave = 'agendada'")
    assert len(done) == 1
    assert row["data_hora"] <= mariadb_queue.db_now()
    # SIGTERM: the workers waiting for the turn see it within one wait (HALT_CHECK).
    started = time.monotonic()
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait_exit(timeout=10) == 0, worker.log()[-3000:]
    assert time.monotonic() - started < 4 * HALT_CHECK + 2.0


def test_a_waiter_sends_one_get_lock_per_wait(mariadb_queue):
    """While another session holds the turn, each wait of HALT_CHECK seconds is one
    GET_LOCK statement (fails before the fix: a second, zero-second GET_LOCK followed
    each timed-out one, doubling every idle waiter's statements)."""
    settings = mariadb_queue.settings()
    backend = MysqlBackend(settings)
    holder_session, waiter_session = DbSession.open(settings), DbSession.open(settings)
    try:
        holder, waiter = backend.notifier(holder_session), backend.notifier(waiter_session)
        holder.listen()
        waiter.listen()
        holder.wait(0.2)  # the first idle worker takes the turn
        assert holder.turn is not None and holder.turn.held
        assert _holder(mariadb_queue) == holder_session.fetch_value("SELECT CONNECTION_ID()")
        assert waiter.turn is not None
        for n in range(1, 4):
            started = time.monotonic()
            assert waiter.wait(HALT_CHECK) == []
            assert time.monotonic() - started >= HALT_CHECK * 0.9  # waited in the server
            assert (waiter.turn.waits, waiter.turn.held) == (n, False)
        # Nothing is due: the holder still polls, keeping the turn.
        assert holder.wait(0.1) == [] and holder.turn.held
    finally:
        holder_session.close()
        waiter_session.close()


def test_with_concurrency_the_listener_holds_the_turn_only_while_a_thread_is_idle(
        mariadb_queue, tmp_path):
    """QUEUE_CONCURRENCY=2: the listener thread of a process takes part in the turn (its
    task threads send no statements while idle); a process whose task threads are all
    busy hands the turn on, so an idle process picks up the next task at once."""
    first = mariadb_queue.start_worker(QUEUE_CONCURRENCY="2")
    wait_ready(first)
    holder = eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    time.sleep(1.0)  # start-up statements (rescue, first claims) settle
    seen = _sample(mariadb_queue, 2.0)
    assert len(seen) == 3, seen  # 2 task threads + the listener
    most = 2.0 / HALT_CHECK + 3
    assert [c for c, s in seen.items() if len(s["queries"]) > most] == [holder], seen
    # Both task threads busy: the listener hands the turn on (nobody here could take
    # what it would find).
    release = tmp_path / "release"
    started = [tmp_path / f"started{i}" for i in range(2)]
    busy = mariadb_queue.insert_many([{"efeito": f"b{i}", "started_file": str(started[i]),
                                       "wait_file": str(release)} for i in range(2)])
    eventually(lambda: all(f.exists() for f in started), 15, message="2 tarefas rodando")
    eventually(lambda: _holder(mariadb_queue) is None, 5, message="vez ociosa liberada")
    second = mariadb_queue.start_worker(QUEUE_CONCURRENCY="2")
    wait_ready(second)
    eventually(lambda: _holder(mariadb_queue) is not None, 10, message="outro processo tomou a vez")
    lags = []
    for i in range(3):
        task_id = mariadb_queue.insert({"efeito": f"n{i}"})
        t0 = time.monotonic()
        mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
        lags.append(time.monotonic() - t0)
        time.sleep(0.2)
    assert sorted(lags)[1] < 1.0, lags
    assert {e["pid"] for e in mariadb_queue.effects("chave LIKE %s", ("n%",))} == {second.pid}
    release.touch()
    for task_id in busy:
        mariadb_queue.wait_status(task_id, "sucesso", timeout=15)
    assert {e["pid"] for e in mariadb_queue.effects("chave LIKE %s", ("b%",))} == {first.pid}
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects("chave LIKE %s",
                                                                ("b%",))) == sorted(busy)
    started_at = time.monotonic()
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
    for worker in (first, second):
        assert worker.wait_exit(timeout=10) == 0, worker.log()[-3000:]
    assert time.monotonic() - started_at < 4 * HALT_CHECK + 2.0
    assert _holder(mariadb_queue) is None


def test_a_holder_that_takes_a_long_task_hands_the_turn_on(mariadb_queue, tmp_path):
    """The holder's probe that finds a task due releases the turn in the same statement:
    while it runs a long task, the other idle worker polls and picks up new tasks."""
    workers = [mariadb_queue.start_worker() for _ in range(2)]
    wait_all_ready(workers)
    eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    release, started = tmp_path / "release", tmp_path / "started"
    long_id = mariadb_queue.insert({"efeito": "longa", "started_file": str(started),
                                    "wait_file": str(release)})
    eventually(started.exists, 10, message="tarefa longa rodando")
    busy_pid = int(started.read_text())
    idle = next(w for w in workers if w.pid != busy_pid)
    eventually(lambda: _holder(mariadb_queue) is not None, 5, message="o worker ocioso tomou a vez")
    lags = []
    for i in range(3):
        task_id = mariadb_queue.insert({"efeito": f"q{i}"})
        t0 = time.monotonic()
        mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
        lags.append(time.monotonic() - t0)
    assert sorted(lags)[1] < 1.0, lags
    assert {e["pid"] for e in mariadb_queue.effects("chave LIKE %s", ("q%",))} == {idle.pid}
    release.touch()
    mariadb_queue.wait_status(long_id, "sucesso", timeout=10)
    assert [e["pid"] for e in mariadb_queue.effects("chave = 'longa'")] == [busy_pid]


def _kill_connection(mariadb_queue, conn_id: int) -> None:
    mariadb_queue.sql(f"KILL CONNECTION {int(conn_id)}")


def test_lost_connections_of_the_holder_and_of_a_waiter(mariadb_queue):
    """The holder's connection and then a waiter's are killed by the server (KILL
    CONNECTION, as a DBA or a network cut would): the turn passes to the other worker
    at once, each worker reconnects and waits for the turn again, tasks keep flowing."""
    workers = [mariadb_queue.start_worker() for _ in range(2)]
    wait_all_ready(workers)
    holder = eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    eventually(lambda: len(_workers_sessions(mariadb_queue)) == 2, 10, message="2 conexões")
    _kill_connection(mariadb_queue, holder)
    new = eventually(lambda: ((_holder(mariadb_queue) or holder) != holder
                              and _holder(mariadb_queue)), 5,
                     message="o outro worker tomou a vez")
    # The worker whose connection died comes back and waits for the turn.
    eventually(lambda: sum(r["STATE"] == "User lock"
                           for r in _workers_sessions(mariadb_queue)) == 1,
               15, message="o worker reconectado aguarda a vez")
    waiter = next(r["ID"] for r in _workers_sessions(mariadb_queue) if r["STATE"] == "User lock")
    _kill_connection(mariadb_queue, waiter)
    assert _holder(mariadb_queue) == new  # a waiter's loss leaves the turn where it is
    eventually(lambda: sum(r["STATE"] == "User lock"
                           for r in _workers_sessions(mariadb_queue)) == 1,
               15, message="o waiter reconectado aguarda a vez")
    ids = [mariadb_queue.insert({"efeito": f"l{i}"}) for i in range(4)]
    for task_id in ids:
        mariadb_queue.wait_status(task_id, "sucesso", timeout=15)
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == sorted(ids)  # once each
    assert all(w.proc.poll() is None for w in workers)
    for worker in workers:
        assert "Erro inesperado" not in worker.log(), worker.log()[-3000:]


def test_get_lock_waits_in_whole_seconds_unless_the_server_is_mariadb(mariadb_queue):
    """MySQL reads GET_LOCK's timeout as whole seconds (0.3 -> 0: no wait, so a waiter
    would spin through GET_LOCK statements until its slice ends); MariaDB takes
    fractions.  The turn detects MariaDB from the handshake and, elsewhere, rounds a
    wait up to whole seconds.  (No MySQL server here: the whole-second path runs on
    MariaDB, whose GET_LOCK(name, 1) waits one second as MySQL's does.)"""
    settings = mariadb_queue.settings()
    holder_session, waiter_session = DbSession.open(settings), DbSession.open(settings)
    try:
        holder, waiter = (MysqlBackend(settings).notifier(s)
                          for s in (holder_session, waiter_session))
        holder.listen()
        waiter.listen()
        assert holder.turn is not None and waiter.turn is not None
        assert waiter.turn.fractional  # MariaDB 10.11, from the handshake
        assert waiter.turn.wait_argument(0.3) == 0.3
        holder.wait(0.2)
        assert holder.turn.held
        waiter.turn.fractional = False  # as on MySQL
        assert [waiter.turn.wait_argument(s) for s in (0.0, 0.001, 0.3, 0.5, 1.0, 1.2)] == [
            0.0, 1, 1, 1, 1, 2]
        started = time.monotonic()
        assert waiter.wait(0.3) == []
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 2.0, elapsed  # one whole-second wait inside the server
        assert (waiter.turn.waits, waiter.turn.held) == (1, False)
    finally:
        holder_session.close()
        waiter_session.close()


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_a_paused_queue_with_a_backlog_keeps_its_workers_quiet(mariadb_queue, concurrency):
    """Paused with tasks waiting, no worker polls (fails before the fix: every due probe
    ended the paused wait at once, so each worker -- with QUEUE_CONCURRENCY, the
    listener feeding its threads -- went round GET_LOCK, probe and pause read like the
    turn holder does); on resume the tasks run, once each."""
    workers = [mariadb_queue.start_worker(QUEUE_CONCURRENCY=concurrency) for _ in range(2)]
    wait_all_ready(workers)
    with QueueAdmin.from_settings(mariadb_queue.settings()) as admin:
        admin.pause(motivo="manutenção")
    time.sleep(CHECK_INTERVAL * 3)  # every worker has read the flag
    ids = [mariadb_queue.insert({"efeito": f"s{i}"}) for i in range(3)]
    time.sleep(1.0)
    seconds = 3.0
    seen = _sample(mariadb_queue, seconds)
    # Per connection: the pause flag and the HALT request, each read every 0.5 s.
    most = seconds * 4 + 4
    assert all(len(s["queries"]) <= most for s in seen.values()), (
        most, {c: len(s["queries"]) for c, s in seen.items()})
    assert mariadb_queue.count("status = 'pendente'") == 3
    with QueueAdmin.from_settings(mariadb_queue.settings()) as admin:
        admin.resume()
    for task_id in ids:
        mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == sorted(ids)
    # HALT still reaches paused workers.
    mariadb_queue.insert({"efeito": "depois"})
    with QueueAdmin.from_settings(mariadb_queue.settings()) as admin:
        admin.pause()
        time.sleep(CHECK_INTERVAL * 3)
        admin.halt()
    for worker in workers:
        assert worker.wait_exit(timeout=10) == 0, worker.log()[-3000:]


# -- statements of an idle fleet (#13 item 3), counted in each worker process ----------
def _counted_fleet(mariadb_queue, n: int, counted: Counted) -> List:
    workers = counted.start_workers(mariadb_queue, n)
    eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    eventually(lambda: sum(r["STATE"] == "User lock"
                           for r in _workers_sessions(mariadb_queue)) == n - 1,
               20, message="os outros aguardando a vez")
    counted.mark()
    return workers


def test_an_idle_fleet_costs_the_holders_probes_and_one_wait_per_turn_wait(mariadb_queue, tmp_path):
    """No arrivals: the holder probes every QUEUE_POLL_INTERVAL; each other worker sends
    one GET_LOCK per TURN_WAIT (2 s), whatever the fleet's size.  (Before: two per 0.5 s,
    a zero-second GET_LOCK closing every wait slice: 4/s per waiter.)"""
    counted = Counted(tmp_path)
    workers = _counted_fleet(mariadb_queue, 6, counted)
    seconds = 6.0
    time.sleep(seconds)
    sent = counted.stop_and_count(workers)
    *waiters, holder = sent
    # seconds / TURN_WAIT waits, plus the stop: the turn passes along (one GET_LOCK
    # granted, one RELEASE_LOCK) and a wait may have started just before the mark.
    assert max(waiters) <= seconds / TURN_WAIT + 4, sent
    assert holder >= seconds / 0.1 * 0.5, sent  # the holder did poll


def test_statements_per_task_with_an_idle_fleet_and_steady_arrivals(mariadb_queue, tmp_path):
    """16 idle workers, tasks arriving at 100/s: at most 6 statements per completed task
    (#13 item 3), every process's statements counted (the task's own INSERT too).  Per
    task 4 as with a backlog (claim-ahead, success, COMMIT AND CHAIN, the INSERT); per
    wake-up the probe, the claim (BEGIN, read, mark; its COMMIT opens the task's
    transaction) and the worker's next wait; at most one wake-up per fast poll step."""
    counted = Counted(tmp_path)
    workers = _counted_fleet(mariadb_queue, 16, counted)
    rate, seconds = 100.0, 3.0
    started = time.monotonic()
    ids = mariadb_queue.insert_steadily(rate, seconds)
    arrival = len(ids) / (time.monotonic() - started)
    eventually(lambda: mariadb_queue.count("status = 'sucesso'") == len(ids), 30,
               message="todas as tarefas concluídas")
    sent = counted.stop_and_count(workers)
    effects = mariadb_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)  # each exactly once
    per_task = sum(sent) / len(ids)
    assert arrival > 0.8 * rate, arrival
    assert per_task <= 6.0, (per_task, sent)


def test_due_rows_held_by_a_running_batch_do_not_keep_idle_workers_spinning(mariadb_queue,
                                                                            tmp_path):
    """A batch holds its claimed rows (still 'pendente' to everyone else) until it commits:
    the probe sees them due, but no claim gets them.  Fails before the fix: the idle
    workers passed the turn round, each probing and claiming in vain (63-65 statements per
    connection in 3 s); now the one that announced them backs off keeping the turn, and a
    task that can be claimed is still picked up."""
    release, started = tmp_path / "release", tmp_path / "started"
    batcher = mariadb_queue.start_worker(QUEUE_BATCH_SIZE="5")
    wait_ready(batcher)
    idle = [mariadb_queue.start_worker() for _ in range(2)]
    wait_all_ready(idle)
    held = mariadb_queue.insert_many([{"efeito": "lote0", "started_file": str(started),
                                       "wait_file": str(release)}]
                          + [{"efeito": f"lote{i}"} for i in range(1, 5)])
    eventually(started.exists, 20, message="lote em execução")
    assert int(started.read_text()) == batcher.pid
    time.sleep(1.0)  # the back-off ramps up (2 ms doubling to 1 s)
    seconds = 3.0
    seen = _sample(mariadb_queue, seconds)
    # The batch's own connection sends nothing while its task waits; each idle worker: a
    # GET_LOCK per 0.5 s, or one probe and one claim per second.
    most = seconds / HALT_CHECK + 3
    assert all(len(s["queries"]) <= most for s in seen.values()), (
        most, {c: len(s["queries"]) for c, s in seen.items()})
    late = mariadb_queue.insert({"efeito": "avulsa"})
    mariadb_queue.wait_status(late, "sucesso", timeout=10)
    assert mariadb_queue.effects("chave = 'avulsa'")[0]["pid"] in {w.pid for w in idle}
    release.touch()
    mariadb_queue.wait_idle()
    done = mariadb_queue.effects("chave LIKE %s", ("lote%",))
    assert sorted(e["tarefa_id"] for e in done) == sorted(held)  # once each
    assert {e["pid"] for e in done} == {batcher.pid}


def test_sigterm_ends_a_single_waiters_wait_at_once(mariadb_queue):
    """A SIGTERM sent to one worker waiting for the turn ends its GET_LOCK (up to
    TURN_WAIT, 2 s) at once: the signal handler interrupts the wait, the worker closes
    its connection and exits 0.  (Without it each exit took up to TURN_WAIT.)"""
    first = mariadb_queue.start_worker()
    wait_ready(first)
    holder = eventually(lambda: _holder(mariadb_queue), 10, message="vez ociosa tomada")
    others = [mariadb_queue.start_worker() for _ in range(3)]
    wait_all_ready(others)
    eventually(lambda: sum(r["STATE"] == "User lock"
                           for r in _workers_sessions(mariadb_queue)) == 3,
               20, message="três workers aguardando a vez")
    took = []
    for worker in others:
        time.sleep(0.3)  # somewhere inside its 2 s wait
        started = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(timeout=10) == 0, worker.log()[-3000:]
        took.append(time.monotonic() - started)
    # (mysqlclient too: its wait is in Python's select, not in libmariadb's read, which
    # retries on EINTR so that Python's handler ran only when GET_LOCK returned)
    assert max(took) < 0.6 * TURN_WAIT, took
    assert _holder(mariadb_queue) == holder  # the holder kept its turn and its connection
    task_id = mariadb_queue.insert({"efeito": "depois"})
    mariadb_queue.wait_status(task_id, "sucesso", timeout=10)
    assert [e["pid"] for e in mariadb_queue.effects("chave = 'depois'")] == [first.pid]
