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

import threading
from typing import TYPE_CHECKING, Dict, Tuple

# FleetMode, the mode as one process knows it, is the db layer's (the repository's claim
# follows it): db/control.py.  Here: one FleetMode per queue for the whole process.
from nsj_queue_lib.db.control import FleetMode
from nsj_queue_lib.db.dialect import dialect_for_driver

if TYPE_CHECKING:
    from nsj_queue_lib.config import Settings

__all__ = ["FleetMode", "compat_1_2_2", "fleet_mode"]

_lock = threading.Lock()
_modes: Dict[Tuple, FleetMode] = {}


def fleet_mode(settings: Settings) -> FleetMode:
    """The process-wide mode of the settings' queue (one object per queue and database,
    so every thread and repository of a worker follows the same reads)."""
    possible = (dialect_for_driver(settings.db_driver).mixed_fleet
                and not settings.client_server_mode)
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
