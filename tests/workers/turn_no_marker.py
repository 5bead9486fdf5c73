"""The scripted worker as on PostgreSQL 9.5-10 (tests): the listener turn's granting
statement neither commits a marker nor probes, so the former sequence runs (a round trip
for the queued notifications, then the probe of the next due time and the pause flag)."""

from __future__ import annotations

from nsj_queue_lib.engine.postgres import listener_turn
from tests.workers.scripted import ScriptedWorker

listener_turn.MIN_SERVER_FOR_MARKER = 10**9  # no server qualifies

if __name__ == "__main__":
    ScriptedWorker().run()
