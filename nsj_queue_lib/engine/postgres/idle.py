"""PostgreSQL: the consumer's idle wait through the listener turn, claiming as its holder.

The turn itself (who listens, the slices, keeping it through a short lone task) is
engine/postgres/listener_turn.py; this is the consumer's side of it, behind
`Notifier.claiming_turn` (engine/base.py: `ClaimingTurn`), so that the consumer loop
(runtime/consumer.py) does not know which backend takes turns this way.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import BUSY_FIRST, BUSY_MAX, IdleHost, until_due
from nsj_queue_lib.engine.postgres.listener_turn import (
    HELD,
    KEPT_SETTLE,
    ListenerTurn,
    take_stale,
)
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)


class PgIdleTurn:
    """The consumer's idle wait with the listener turn (implements `ClaimingTurn`)."""

    def __init__(self, turn: ListenerTurn, session: DbSession, repo: TaskRepository) -> None:
        self.turn = turn
        self.session = session  # the LISTEN session (the consumer's)
        self.repo = repo

    @property
    def kept(self) -> bool:
        return self.turn.kept

    def wait_claim(self, host: IdleHost, busy: float) -> Tuple[Any, bool, float]:
        """Idle wait with the listener turn: returns (tarefa, woke, busy).

        Waits for the turn (one blocking statement), drops the notifications received
        so far (keeping HALT), probes the next due time, then waits like the consumer's
        own idle wait.  Claims while still holding the turn, so the next idle worker
        never probes a task this one is about to take, and a wake-up that finds
        nothing (a scheduled task, a task another worker took) costs no hand-over.
        The turn is handed on before the task runs, unless the claim kept it (a short
        lone task, PgGuard): then it stays held through the task, and the caller comes
        back here after it.  `woke` is False when the task was due at the probe with more
        due behind it, or when that is unknown (a backlog: the caller keeps claiming
        directly).
        """
        turn, repo, gate = self.turn, self.repo, host.gate
        turn.render = repo.idle_probe_sql
        turn.pause_sql = gate.flag_sql if gate.control_seen else None
        got = turn.acquire(host.stop, host.admin_cap(host.poll_interval), until=host.admin_due)
        if got != HELD:
            # Stopping, a HALT, or the poll interval passed without the turn: the caller's
            # next claim is this worker's periodic poll.
            host.handle(turn.halts)
            return None, False, busy
        try:
            grant = turn.grant if turn.marked else None
            if not turn.marked and turn.waited:
                # (PostgreSQL < 11: no marker.)  The notifications queued for this session
                # while it waited are sent by the server right after the lock's answer, so
                # the drop below could miss them (they would then come with the probe's
                # answer and cause a claim that finds nothing).  One round trip brings them.
                self.session.execute("SELECT 1")
            after_claim = False  # the last statement was this loop's claim (it found nothing)
            while not host.stop.is_set():
                backlog = True  # (unknown: as if a backlog, claim directly after the task)
                probe = repo.take_empty_claim_due() if after_claim else None
                next_due: Optional[float]
                if probe is not None:
                    # That claim also read the next due time, with its own snapshot.  What
                    # arrived with its answer is kept (it may be news).
                    next_due = probe[0]
                elif grant is not None:
                    # Probed by the granting statement, after the old news was dropped.
                    host.handle(turn.halts)
                    next_due = grant["due"]
                    backlog = grant.get("more") is not False
                    if grant["paused"] is not None:
                        gate.note(grant["paused"], grant["why"], grant.get("compat"),
                                  grant.get("agenda"))
                    grant = None
                else:
                    # Drop what was received BEFORE the probe (commits its snapshot will
                    # see); a notification that comes with the probe's answer may be for a
                    # commit after the snapshot, so it is kept (else that wake-up would be
                    # lost).
                    host.handle(take_stale(self.session.conn))
                    next_due = repo.task_seconds_to_next_due()
                if host.stop.is_set() or gate.is_paused():
                    return None, False, busy
                timeout = host.poll_interval
                if next_due is not None and next_due <= 0:
                    tarefa = host.claim()
                    if tarefa is not None:
                        # Only that one was due: after it, queue for the turn (a direct
                        # claim would find nothing); with a backlog, claim directly.
                        return tarefa, not backlog, BUSY_FIRST
                    # Due rows exist but other workers hold them all: back off a little.
                    timeout, busy = busy, min(busy * 2, BUSY_MAX)
                else:
                    busy = BUSY_FIRST
                    timeout = until_due(timeout, next_due, repo)
                timeout = host.admin_cap(timeout)
                woken = False
                if timeout > KEPT_SETTLE and turn.settle_later():
                    # (kept through the task just done: 1.2.2's key of that task waits for
                    # the next claim; if none comes within KEPT_SETTLE, it is released)
                    woken = host.wait_notes(KEPT_SETTLE)
                    if not woken:
                        timeout -= KEPT_SETTLE
                        turn.settle()
                if not woken:
                    host.wait_notes(timeout)
                if host.stop.is_set() or host.admin_due() or gate.is_paused():
                    # (an admin job due: the turn is handed on before it runs)
                    return None, False, busy
                tarefa = host.claim()
                if tarefa is not None:
                    return tarefa, True, BUSY_FIRST
                after_claim = True
            return None, False, busy
        finally:
            if not turn.kept:  # (kept through the task just claimed)
                self.release()

    def release(self) -> None:
        try:
            self.turn.release()  # (no-op when the claim already handed it on)
        except DatabaseUnavailable:
            self.turn.forget()  # the session is gone, and its lock with it
