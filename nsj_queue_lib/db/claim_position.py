"""Where a PostgreSQL session's claims and idle probes start reading the queue's indexes.

A claim from the start of ix_claim steps over an index entry of every task processed
since the oldest running transaction began (the entries of their old 'pendente'
versions cannot be marked killed while that transaction may still see them): one long
transaction elsewhere in the database makes every claim cost O(tasks since it began).
So a session remembers the key (prioridade, data_hora, id) of the last task it claimed
and reads from there, minus SLACK seconds of data_hora (see part_claim_pick in
sql/postgres/queries.sql for the SQL side).

What lies before that position in the same priority (a task committed more than SLACK
seconds after its producer transaction began, a task put back to 'pendente' by the
rescue or a graceful stop, a task inserted with an old data_hora) is found by a read
from the index start, done on the session's first claim and then at least every
FULL_SCAN_EVERY seconds: such a task waits at most that long while there is work ahead
of it.  After a probe from the position that found nothing due, the worker's idle wait
ends by then too (`wait_cap`), so the bound also holds on a quiet queue.

The position is used only while the database's xmin horizon is held back (some session
of the database holds a snapshot more than PIN_AGE transactions old, read from
pg_stat_activity at most every FULL_SCAN_EVERY seconds): otherwise the old entries are
marked killed by the scans that step over them, a read from the start costs no more
than one from the position, and the claim keeps the exact order (a task committed late
with an old data_hora is taken first, not up to FULL_SCAN_EVERY seconds later).
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Callable, Iterable, Optional, Tuple

# Seconds of data_hora read before the position: a task commits some time after its
# data_hora (its producer transaction's now()); one committed later than this behind the
# position waits for the next read from the start.  Under a pinned xmin a claim steps over
# the entries of about SLACK x (tasks/s) tasks processed just before the position, so it
# is kept short (0.5 s at 500 tasks/s: some 250 entries; 2 s measured 1,400 per claim).
SLACK = 0.5
# Seconds: the longest a session goes without a claim (or idle probe) from the index start.
# Under a pin each such read steps over every task processed since the pin began, so the
# sessions that claim do about (sessions / FULL_SCAN_EVERY) of them per second.
FULL_SCAN_EVERY = 5.0
# Age (in transactions) of the oldest snapshot of the database above which reads start from
# the position: about as many index entries a read from the start may step over.
PIN_AGE = 1000
# Seconds reads stay from the position after a held horizon was last seen (see pin_checked).
PIN_HOLD = 300.0
# Tasks a session claims between two horizon checks while no pin was seen: the walk a pin
# causes costs per claim, so an idle session need not check, and a busy one checks at
# most every FULL_SCAN_EVERY seconds (a statement per 5 s per session pushed 32 idle
# workers at 100 tasks/s over 6 statements per task).
PIN_CHECK_CLAIMS = 100
# pos_prio of a read from the start: branches b and d of part_claim_pick cover every row.
FROM_START_PRIO = 2147483647

Key = Tuple[int, _dt.datetime, int]


class ClaimPosition:
    """The claim position of one session (not thread-safe: one per session)."""

    def __init__(self, full_every: float = FULL_SCAN_EVERY, slack: float = SLACK,
                 clock: Callable[[], float] = time.monotonic, pin_age: int = PIN_AGE,
                 pin_hold: float = PIN_HOLD) -> None:
        self.full_every = full_every
        self.pin_age = pin_age
        self.pinned = False  # the xmin horizon was held back at the last check
        self.pin_hold = pin_hold
        self._held_at: Optional[float] = None  # clock() of the last check that saw it held
        self._pin_checked_at: Optional[float] = None
        self._claims_since_check = 0
        self.slack = _dt.timedelta(seconds=slack)
        self.clock = clock
        self.key: Optional[Key] = None  # the last task claimed (same priority: the latest)
        self._full_at: Optional[float] = None  # clock() of the last claim from the start
        self.probe_positioned = False  # the last probe rendered read from the position

    def pin_check_due(self) -> bool:
        """Whether the caller should read the xmin horizon again (`pin_checked`): on the
        first read, then every full_every seconds while held, or once PIN_CHECK_CLAIMS
        tasks were claimed since the last check."""
        if self._pin_checked_at is None:
            return True
        if self.clock() - self._pin_checked_at < self.full_every:
            return False
        return self.pinned or self._claims_since_check >= PIN_CHECK_CLAIMS

    def pin_checked(self, pinned: bool) -> None:
        """Record whether the database's xmin horizon is held back (more than pin_age).
        Reads stay from the position for pin_hold seconds after the last check that saw it
        held: until VACUUM removes them, the entries the pin kept still cost a read from
        the start (a 120 s pin run fell to ~100 tasks/s after the pin without this)."""
        now = self.clock()
        self._pin_checked_at = now
        self._claims_since_check = 0
        if pinned:
            self._held_at = now
        self.pinned = pinned or (self._held_at is not None
                                 and now - self._held_at < self.pin_hold)

    def full_due(self) -> bool:
        """The next claim or probe reads from the index start."""
        return (not self.pinned or self.key is None or self._full_at is None
                or self.clock() - self._full_at >= self.full_every)

    def full_in(self) -> float:
        """Seconds until a read from the start is due (0: now)."""
        if self.full_due():
            return 0.0
        assert self._full_at is not None
        return max(0.0, self._full_at + self.full_every - self.clock())

    def claim_params(self) -> dict:
        """pos_prio / pos_from of the next claim (a claim from the start when due)."""
        if self.full_due():
            self._full_at = self.clock()
            return {"pos_prio": FROM_START_PRIO, "pos_from": None}
        assert self.key is not None
        return {"pos_prio": self.key[0], "pos_from": self.key[1] - self.slack}

    def probe_from(self) -> Optional[_dt.datetime]:
        """due_from of the next idle probe (None: from the start)."""
        self.probe_positioned = not self.full_due()
        if not self.probe_positioned:
            return None
        assert self.key is not None
        return self.key[1] - self.slack

    def wait_cap(self) -> Optional[float]:
        """After the last probe: the longest the idle wait may last (None: no limit),
        so that a task due before the position is seen within FULL_SCAN_EVERY."""
        return self.full_in() if self.probe_positioned else None

    def note(self, rows: Iterable[dict]) -> None:
        """Move the position to the claimed rows (the last in claim order).  Within the
        same priority it never goes back (a task found behind it is a straggler)."""
        keys = [(int(r["prioridade"]), r["data_hora"], int(r["id"])) for r in rows]
        if not keys:
            return
        self._claims_since_check += len(keys)
        new = max(keys, key=lambda k: (-k[0], k[1], k[2]))
        if self.key is not None and self.key[0] == new[0] and self.key[1:] > new[1:]:
            return
        self.key = new
