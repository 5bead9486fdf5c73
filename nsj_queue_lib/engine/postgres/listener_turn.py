"""PostgreSQL: one idle worker per queue waits for notifications; the others queue up.

Without this, every NOTIFY wakes every idle worker of the queue, and each of them
runs a claim and a next-due probe: about 2N statements per task with N idle
workers.  With it, the idle workers take turns through one advisory lock of the
queue (the "listener turn"):

* the holder of the turn probes the next due time once, then waits on its socket
  for a notification, the next due time or the periodic poll;
* every other idle worker waits for the turn in a blocking `pg_advisory_lock`,
  re-issued in server-side slices of at most TURN_SLICE seconds (see below); if
  its turn does not come within its QUEUE_WAIT_NOTIFY_INTERVAL it claims once by
  itself (the periodic poll every worker has always done), then queues again;
* when the holder is woken it claims; the claim statement that gets a task also
  hands the turn to the next idle worker (the database grants the lock in request
  order), so the hand-over costs no statement of its own;
* unless it keeps the turn (below).

So a wake-up costs a fixed handful of statements, whatever the number of idle
workers.  Every worker stays LISTENing (so HALT reaches busy workers, and each
idle worker sees it when its turn comes: HALT then spreads from turn to turn);
the notifications that queue up while a worker waits for its turn are old news
once it holds the turn and has probed, and are dropped (except HALT).  On
PostgreSQL >= 11 the statement that is granted the turn does all of it: it commits a
marker notification to a channel of its own (notifications arrive in commit order,
so what came before the marker is old news), probes the next due time and reads the
pause flag, and answers with a NOTICE.  A task that hands the turn on costs the task's
own five statements (claim, BEGIN, its work, finish, COMMIT) plus the next holder's one
granting statement.

Keeping the turn through a short lone task.  A hand-over costs a statement after all:
the worker that handed the turn on queues for it again (one wait statement) once its task
is done, so at a steady low rate every task cost six.  Every hand-over needs such a
statement (only a worker with a lock request outstanding can be granted the turn), so the
saving is in handing over less: the claim keeps the turn when no other task is due (it
reads the next due time besides its own task, part_seconds_to_next_due_besides) and this
session's recent tasks ran short (PgGuard: an average of claim-to-release time under
KEEP_TURN_RUN).  The holder runs the task and goes straight back to waiting as holder,
by the next due time that claim read (a task that failed may have scheduled a retry: then
it probes); the notifications received meanwhile are news.  Per task that is the task's
five statements, plus one per second per waiter (its slice expiring).  The price: while
the holder runs a kept task nobody listens, so a task arriving then waits for the end of
that task (short, by the rule above); with another task due, or tasks that run long, the
turn is handed on as before.  With QUEUE_COMPAT_1_2_2, 1.2.2's key of the task just done
(which the next statement carries) is released by the holder's next claim, or after
KEPT_SETTLE seconds of idle waiting by a statement of its own.

A kept task that runs long after all (the average said short): every waiter whose slice
expires (a statement it sends anyway) also reads, in that statement, whether a task has
been due for more than LATE seconds; if so it stops waiting and claims by itself, so such
a task waits a second or two, not the rest of the long task nor the poll interval.  Due
rows no claim can take (held by an open batch transaction) would make the waiters claim in
vain: a waiter's late check backs off (doubling up to LATE_BACKOFF_MAX) while it keeps
seeing them, and is back to every slice once it sees none.

Why slices: a statement waiting on a lock holds its snapshot, so its session's
backend_xmin holds back the xmin horizon of the whole database (VACUUM keeps
every dead tuple younger than it, user tables included).  One statement waiting
for the whole poll interval would pin it for up to 30 s per idle worker, for
ever on an idle fleet.  Each slice is one statement (a DO block) whose `lock_timeout` is
set for that statement only (`set_config(..., true)` in its own implicit
transaction: nothing leaks into the consumer's other statements); the expired
timeout is caught inside the block (no ERROR in the server log), and the worker
checks its stop request and deadline and queues again.  So an idle wait never
holds back VACUUM for more than about TURN_SLICE, costs one statement per slice
and needs no cancel request; a stop request is seen within one slice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import HALT_PAYLOAD, Notification, admin_lock_key
from nsj_queue_lib.engine.keys import ADMIN_HANDOVER, ADMIN_LISTENER
from nsj_queue_lib.engine.postgres.locker import PgLocker

logger = logging.getLogger(__name__)

# Seconds: the longest one statement waits for the turn, so the longest an idle
# worker's snapshot holds back the xmin horizon (and its reaction time to a stop).
TURN_SLICE = 1.0
HELD, STOPPED, TIMEOUT = "held", "stopped", "timeout"
# acquire(): a HALT arrived while waiting (in `halts`; the caller stops)
HALTED = "halt"
# acquire(): like TIMEOUT (the caller claims once by itself), because a task is late
LATE_TASK = "late"
WAITED = 0.005  # seconds: longer than an uncontended lock round trip

# One slice: lock_timeout for the lock request only (set_config(..., true) in the
# statement's implicit transaction), the lock request, and a NOTICE when granted.  The
# expired timeout is caught in the inner block, so no ERROR reaches the server log once a
# second per idle worker; the NOTICE is the answer (a DO returns no row), sent whatever
# the session's client_min_messages.  Every value written into the block is an integer
# or SQL the library renders itself ({prologue}, {after}).
_WAIT_SLICE = """DO $turn$
DECLARE
  granted boolean := false;
  due double precision;
  more boolean;
  paused boolean;
  why text;
  compat boolean;
  agenda timestamptz;
BEGIN
  {prologue}BEGIN
    PERFORM set_config('lock_timeout', '{ms}', true);
    PERFORM pg_advisory_lock({a}, {b});
    granted := true;
  EXCEPTION WHEN lock_not_available THEN
    NULL;
  END;
  IF granted THEN
    {after}PERFORM set_config('client_min_messages', 'notice', true);
    RAISE NOTICE '{marker} %', json_build_object('due', due, 'more', more, 'paused', paused,
                                       'why', why, 'compat', compat, 'agenda', agenda);
  {late}END IF;
END
$turn$"""
GRANTED = "nsj_queue_lib: listener turn granted"
# PostgreSQL >= 11 (COMMIT inside DO): once granted, the slice also sends a marker to a
# channel only this session listens to and commits it, then probes.  Notifications are
# delivered in commit order, so every one received before the marker is for a commit the
# probe's snapshot sees: old news, dropped (except HALT) without a round trip of its
# own; those after it are kept.  Its own commit needs no WAL flush to wait for.  Then
# it waits for the hand-over key (after the COMMIT: the slice's lock_timeout is gone):
# the claim that handed the turn on holds it until that claim commits, so the probe
# never sees the task just claimed as still waiting.
_AFTER_GRANT = """PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify('{channel}', '');
    COMMIT;
    PERFORM pg_advisory_xact_lock_shared({ha}, {hb});
    {probe}"""
MIN_SERVER_FOR_MARKER = 110000
# A slice that was not granted, while the turn is kept through a task (see the module
# docstring): a task due for more than LATE seconds that nobody took means the holder is
# busy with a task that runs long; the waiter says so (and then claims by itself).
_LATE_CHECK = """ELSE
    due := ({probe});
    IF due < -{late} THEN
      PERFORM set_config('client_min_messages', 'notice', true);
      RAISE NOTICE '{marker}';
    END IF;
  """
LATE_MARKER = "nsj_queue_lib: listener turn: a task waits"
# A holder stops keeping the turn for KEEP_PAUSE seconds once, on average over its kept
# tasks (weight ARRIVED_WEIGHT for the last one), more than ARRIVED_MAX of them saw
# another task arrive while they ran: each such task waited for the holder, whereas the
# next idle worker would have taken it at once.  So a holder kept busy most of the time
# (tasks that are short but not much shorter than the time between two arrivals) hands
# the turn on at every task, as before, and pickup latency does not grow with it.
ARRIVED_WEIGHT = 0.1
ARRIVED_MAX = 0.5
KEEP_PAUSE = 5.0
# Seconds a holder that kept the turn through a task waits idle before it releases, with
# a statement of its own, what its next claim would otherwise carry (settle_later()).
KEPT_SETTLE = TURN_SLICE
# Seconds a task may have been due before a waiter claims it by itself (the holder of the
# turn, when free, takes a task within milliseconds of its notification).
LATE = TURN_SLICE
# Seconds between a waiter's late checks at most, after checks that found a late task no
# claim could take (rows held by an open transaction, such as a running batch): the
# interval doubles from one slice up to this, and is back to every slice once a check
# finds nothing late.
LATE_BACKOFF_MAX = 30.0


class ListenerTurn:
    """The listener-turn lock of one queue, on the consumer's own session."""

    def __init__(self, session: DbSession, queue_table: str, guard: Any = None) -> None:
        self.session = session
        self.key = admin_lock_key(queue_table, ADMIN_LISTENER)
        self.hand_key = admin_lock_key(queue_table, ADMIN_HANDOVER)
        # The consumer's PgGuard, if any: its first claim that gets a task while the turn
        # is held also hands the turn on (no statement of its own), and the 1.2.2 key it
        # keeps for a finished task is released by the first wait statement.
        self.guard = guard
        self.held = False
        self.waited = False  # the last acquire() had to wait for another holder
        self.slices = 0  # wait statements that expired (for tests and diagnostics)
        # SQL run once the turn is granted, in the same statement (see acquire()).
        self.probe_sql: Optional[str] = None  # a SELECT: seconds to the next due task
        # The late check's SELECT when it is not probe_sql (a session that probes nothing
        # when granted: the QUEUE_CONCURRENCY listener)
        self.late_sql: Optional[str] = None
        self.more_sql: Optional[str] = None  # a SELECT: more than one task is due
        self.pause_sql: Optional[str] = None  # a SELECT of (pausada, motivo): one row
        # If set, gives (probe_sql, more_sql) afresh before each wait statement (they read
        # from the session's claim position, which may be due for a read from the start).
        self.render: Optional[Callable[[], Tuple[str, str]]] = None
        # After a grant on PostgreSQL >= 11: {"due", "more", "paused", "why"} read in the wait
        # statement (None: not read), and the HALTs among the dropped notifications.
        self.grant: Optional[Dict[str, Any]] = None
        self.halts: List[Notification] = []
        self.marked = False  # the last grant dropped the old news itself (marker seen)
        self._marker: Optional[str] = None  # this session's marker channel, once listened
        # Kept through a task by the claim that got it (PgGuard): the next acquire() is
        # granted at once, with the next due time that claim read besides its task
        # (`_kept_due`; unknown when that task did not succeed: the caller probes).
        self.kept = False
        self._kept_due: Optional[float] = None
        self._kept_known = False
        self._kept_task: Optional[int] = None
        self.arrived_share = 0.0  # see ARRIVED_MAX
        self._no_keep_until = 0.0
        self.late_checks = 0  # slices that checked for a late task (tests, diagnostics)
        self._late_every = 0.0  # back-off of the late check (see LATE_BACKOFF_MAX)
        self._late_next = 0.0
        self._late = False  # the last slice found a late task

    def acquire(self, stop: threading.Event, timeout: float,
                until: Optional[Callable[[], bool]] = None) -> str:
        """Wait until this session holds the turn ("held"), `stop` is set ("stopped")
        or `timeout` seconds passed ("timeout": the caller then polls once by itself,
        so a worker whose turn does not come still honours its own poll interval).
        `until()` true between two slices also ends the wait ("timeout": the worker has
        an admin job to run).  A HALT received meanwhile ends it too ("halt", the HALTs
        in `halts`): while the holder runs a task it kept the turn through, no waiter is
        granted the turn, and HALT would otherwise wait for the end of that task.

        Waits in slices of at most TURN_SLICE seconds (see the module docstring).  On
        PostgreSQL >= 11 the granting statement also drops the notifications that are
        old news and probes (`probe_sql`, `pause_sql`): the result is in `grant`.
        The session must be outside an explicit transaction (autocommit), as the
        consumer's idle loop is.  Raises DatabaseUnavailable when the connection is
        lost meanwhile.
        """
        if self.held:
            if self.kept:
                self._take_kept()
            return HELD
        if self.session.in_transaction:
            raise RuntimeError("a vez de escuta não pode ser aguardada dentro de uma transação")
        self.grant, self.halts, self.marked = None, [], False
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if stop.is_set():
                return STOPPED
            left = deadline - time.monotonic()
            if left <= 0 or (until is not None and until()):
                return TIMEOUT
            ms = max(1, int(min(TURN_SLICE, left) * 1000))  # 0 would mean "no timeout"
            if self.render is not None:
                self.probe_sql, self.more_sql = self.render()
            check = ((self.late_sql or self.probe_sql) is not None
                     and time.monotonic() >= self._late_next)
            if not self._wait_slice(ms, check):
                self.slices += 1
                self.halts = self._take_halts()
                if self.halts:
                    return HALTED
                if check:
                    self._late_checked()
                    if self._late:
                        return LATE_TASK
                continue
            self.held = True
            self.waited = time.monotonic() - started > WAITED
            if self.guard is not None:
                self.guard.hand_over(self)
            if stop.is_set():
                self.release()
                return STOPPED
            return HELD

    def keep(self, due: Optional[float], task_id: int) -> None:
        """The claim that got task `task_id` kept the turn (PgGuard): `due` is the next due
        time it read besides that task (None: no other task waits)."""
        self.kept, self._kept_due, self._kept_known, self._kept_task = True, due, True, task_id

    def may_keep(self) -> bool:
        """Whether a claim may keep the turn through a lone task now (see ARRIVED_MAX)."""
        return time.monotonic() >= self._no_keep_until

    def _note_arrivals(self) -> None:
        """After a kept task: did a notification arrive while it ran?  (Read from the
        socket without a statement; the notifications stay queued for the wait.)"""
        conn = self.session.conn
        try:
            conn.poll()
        except Exception as exc:  # the wait that follows reports a lost connection
            logger.debug("Notificações não lidas após a tarefa: %s", exc)
            return
        arrived = any(n.channel != self._marker for n in conn.notifies)
        self.arrived_share += ARRIVED_WEIGHT * (float(arrived) - self.arrived_share)
        if self.arrived_share > ARRIVED_MAX:
            self._no_keep_until = time.monotonic() + KEEP_PAUSE
            self.arrived_share = 0.0

    def settle_later(self) -> bool:
        """Whether the guard keeps something for its next statement (1.2.2's key of the
        task just finished, QUEUE_COMPAT_1_2_2): a holder that kept the turn through that
        task sends no statement before its idle wait, so `settle()` releases it once the
        wait has lasted KEPT_SETTLE seconds without a claim to carry it."""
        return self.guard is not None and self.guard.deferred_unlock is not None

    def settle(self) -> None:
        if self.guard is not None:
            self.guard.settle()

    def kept_task_failed(self, task_id: int) -> None:
        """Task `task_id` did not succeed: if the turn was kept through it, the next due
        time read by its claim may be stale (a retry it scheduled): the caller probes."""
        if self.kept and self._kept_task == task_id:
            self._kept_known = False

    def _take_kept(self) -> None:
        """The turn was kept through a task: granted again at once.  The notifications
        received meanwhile are news (for commits after the claim's snapshot): all kept."""
        self.kept, self.waited, self.halts = False, False, []
        self._note_arrivals()
        if self._kept_known:
            self.grant = {"due": self._kept_due, "more": False, "paused": None, "why": None}
            self.marked = True
        else:
            self.grant, self.marked = None, False

    def _late_checked(self) -> None:
        """Back-off of the late check (see LATE_BACKOFF_MAX)."""
        self.late_checks += 1
        if self._late:
            self._late_every = min(max(2 * self._late_every, TURN_SLICE), LATE_BACKOFF_MAX)
            self._late_next = time.monotonic() + self._late_every
        else:
            self._late_every = self._late_next = 0.0

    def _marker_channel(self) -> Optional[str]:
        if self._marker is None and self.session.conn.server_version >= MIN_SERVER_FOR_MARKER:
            channel = f"nsjq_turn_{int(self.session.conn.get_backend_pid())}"
            self.session.execute(f'LISTEN "{channel}"')
            self._marker = channel
        return self._marker

    def _wait_slice(self, ms: int, check: bool = False) -> bool:
        """One statement waiting up to `ms` milliseconds; True when the turn was granted.
        With `check`, a slice not granted also looks for a late task (`_late`)."""
        conn = self.session.conn
        marker = self._marker_channel()
        unlock = self.guard.take_deferred() if self.guard is not None else None
        # (the 1.2.2 key of the task just finished, released before waiting: an integer)
        prologue = f"PERFORM pg_advisory_unlock({int(unlock)}::int8);\n  " if unlock else ""
        after = ""
        if marker is not None:
            probe = f"due := ({self.probe_sql});\n    " if self.probe_sql else ""
            if self.more_sql:
                probe += f"IF due <= 0 THEN more := ({self.more_sql}); END IF;\n    "
            if self.pause_sql:
                # (no row yet: never paused)
                probe += (f"SELECT p.pausada, p.motivo, p.compat_1_2_2, p.agenda_proximo "
                          f"INTO paused, why, compat, agenda FROM ({self.pause_sql}) p;\n    "
                          "paused := coalesce(paused, false);\n    ")
            after = _AFTER_GRANT.format(channel=marker, probe=probe, ha=int(self.hand_key[0]),
                                        hb=int(self.hand_key[1]))
        late = (_LATE_CHECK.format(probe=self.late_sql or self.probe_sql, late=float(LATE),
                                   marker=LATE_MARKER)
                if check else "")
        self._late = False
        try:
            self.session.execute(_WAIT_SLICE.format(ms=int(ms), a=int(self.key[0]),
                                                    b=int(self.key[1]), marker=GRANTED,
                                                    prologue=prologue, after=after, late=late))
        except BaseException:
            self._release_after_error()
            raise
        answer = None
        for notice in [n for n in conn.notices if GRANTED in n or LATE_MARKER in n]:
            conn.notices.remove(notice)
            if LATE_MARKER in notice:
                self._late = True
            else:
                answer = notice
        if answer is None:
            return False
        if marker is not None:
            self._take_until_marker(marker)
            if self.probe_sql or self.pause_sql:
                self.grant = json.loads(answer.split(GRANTED, 1)[1].strip())
        return True

    def _take_halts(self) -> List[Notification]:
        """The HALTs received so far (removed from the connection's queue)."""
        received = self.session.conn.notifies
        halts = [n for n in received if n.payload == HALT_PAYLOAD and n.channel != self._marker]
        if halts:
            received[:] = [n for n in received if n not in halts]
        return [Notification(n.channel, n.payload) for n in halts]

    def _release_after_error(self) -> None:
        """The wait statement failed.  If it failed after the grant (in the marker, the
        hand-over wait or the probe: a statement timeout, a probe that errors), the
        session holds the turn, which is not undone with the statement; left held, no
        other worker would get it until this one reconnects.  Release it; the caller
        sees the error as before."""
        try:
            locker = PgLocker(self.session)
            if not self.session.in_transaction and locker.holds(self.key):
                locker.unlock(self.key)
        except Exception as exc:  # the session is gone: the lock went with it
            logger.debug("Vez de escuta não verificada após o erro: %s", exc)

    def _take_until_marker(self, marker: str) -> None:
        """Drop the notifications received before this grant's marker (keeping HALTs in
        `halts`); keep those after it.  Without the marker (not received yet) keep all."""
        received = self.session.conn.notifies
        notes = list(received)
        last = max((i for i, n in enumerate(notes) if n.channel == marker), default=None)
        if last is None:
            return
        self.marked = True
        self.halts = [Notification(n.channel, n.payload) for n in notes[:last]
                      if n.payload == HALT_PAYLOAD and n.channel != marker]
        received[:] = [n for n in notes[last + 1:] if n.channel != marker]

    def release(self) -> None:
        """Hand the turn to the next idle worker (no-op when not held)."""
        if self.held:
            self.held = self.kept = False
            self.session.execute("SELECT pg_advisory_unlock(%(a)s, %(b)s)",
                                 {"a": self.key[0], "b": self.key[1]})

    def forget(self) -> None:
        """The turn is no longer held: handed on by a claim, or the session is gone."""
        self.held = self.kept = False


def take_stale(conn: Any) -> List[Notification]:
    """Drop the notifications already received on `conn`, returning only HALTs.

    Called right BEFORE the probe that follows the acquisition of the turn: what was
    received so far is for commits the probe's snapshot will see, so it carries no
    news; only HALT matters.  (Not after the probe: a notification delivered with the
    probe's answer may come from a commit after its snapshot.)
    """
    stale = list(conn.notifies)
    conn.notifies.clear()
    return [Notification(n.channel, n.payload) for n in stale if n.payload == HALT_PAYLOAD]

