"""Mixed-fleet mode: whether nsj-queue-lib 1.2.2 workers may share a queue now.

It is a property of the queue, kept in its control table (column compat_1_2_2 of
<fila>_controle, PostgreSQL only: 1.2.2 never ran natively on MySQL, and client/server
peers of 1.2.2 are refused):

* a queue created by this version's DDL starts out of it (the DDL writes the row);
* a queue that has no row, a row from before the column, or no control table at all
  (1.2.2's table, an earlier 2.x not upgraded) is in it: nothing tells such a queue from
  one that 1.2.2 workers still use;
* `nsj-queue compat off|on` changes it; a worker that sees a live 1.2.2 session on a
  queue out of it puts it back (compat/coexistence.py).

Workers read it together with the pause flag (runtime/pause.py: before a claim, when the
last read is more than half a second old; the listener turn's probe and the metrics'
read of the row too), so every claim made about a second after a change follows it; an
idle worker's view (its heartbeat file) catches up at its next wake-up.
QUEUE_COMPAT_1_2_2, when set, overrides it for the worker that has it.  Until the first
read a worker assumes mixed (the safe side).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Dict, Optional, Tuple

if TYPE_CHECKING:
    from nsj_queue_lib.config import Settings

logger = logging.getLogger(__name__)


class FleetMode:
    """The current mode of one queue as this process knows it (shared by its threads)."""

    def __init__(self, queue_table: str, *, override: Optional[bool] = None,
                 possible: bool = True) -> None:
        self.queue_table = queue_table
        self.override = override  # QUEUE_COMPAT_1_2_2 (None: unset)
        self.possible = possible  # PostgreSQL coordinated by itself (not client/server)
        self._stored: Optional[bool] = None  # the queue's value; None: not read yet

    @classmethod
    def fixed(cls, mixed: bool) -> FleetMode:
        """A mode that never changes (tools and tests that pass a plain flag)."""
        return cls("", override=bool(mixed))

    @property
    def mixed(self) -> bool:
        """True while this worker must also hold 1.2.2's keys."""
        if not self.possible:
            return False
        if self.override is not None:
            return self.override
        return self._stored is not False

    @property
    def unread(self) -> bool:
        """The queue decides and has not been read yet (a tool or a task's code that uses
        a repository before any claim: it reads the mode on its own session first)."""
        return self.possible and self.override is None and self._stored is None

    @property
    def stored(self) -> Optional[bool]:
        """The queue's own value at the last read (None: not read yet)."""
        return self._stored

    @property
    def source(self) -> str:
        """Where the mode comes from, for status lines."""
        if not self.possible:
            return "não se aplica"
        return "QUEUE_COMPAT_1_2_2" if self.override is not None else "fila"

    def note(self, stored: Optional[bool]) -> None:
        """A read of the queue's control row: its compat_1_2_2 value, or None when there
        is no row, no column or no control table (mixed-fleet mode)."""
        before = self.mixed
        self._stored = True if stored is None else bool(stored)
        after = self.mixed
        if after != before and self.override is None and self.possible:
            if after:
                logger.warning("Fila %s em modo de frota mista com a 1.2.2: este worker "
                               "passa a segurar também as chaves da 1.2.2",
                               self.queue_table)
            else:
                logger.info("Fila %s fora do modo de frota mista: só workers 2.x a "
                            "consomem", self.queue_table)


_lock = threading.Lock()
_modes: Dict[Tuple, FleetMode] = {}


def fleet_mode(settings: Settings) -> FleetMode:
    """The process-wide mode of the settings' queue (one object per queue and database,
    so every thread and repository of a worker follows the same reads)."""
    possible = settings.db_driver == "POSTGRES" and not settings.client_server_mode
    key = (settings.queue_table, settings.db_host, settings.db_port, settings.db_name,
           settings.queue_compat_1_2_2, possible)
    with _lock:
        mode = _modes.get(key)
        if mode is None:
            mode = _modes[key] = FleetMode(settings.queue_table,
                                           override=settings.queue_compat_1_2_2,
                                           possible=possible)
        return mode


def compat_1_2_2(settings: Settings) -> bool:
    """True when this worker must also hold 1.2.2's keys now (see the module)."""
    return fleet_mode(settings).mixed
