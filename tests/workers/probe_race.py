"""The scripted worker, with a commit squeezed into the listener turn's probe (tests).

When the file NSJQ_TEST_RACE_FILE exists, the next granting statement of the listener
turn deletes it and, while its probe of the next due time runs (after the snapshot it
reads with), another connection inserts and commits a task: the task's NOTIFY reaches
the worker with that statement's answer, for a commit the probe did not see.
"""

from __future__ import annotations

import json
import os
import threading
import time

import psycopg2

from nsj_queue_lib.engine.postgres.listener_turn import ListenerTurn
from tests.workers.scripted import ScriptedWorker

_original = ListenerTurn._wait_slice
PROBE_SLEEP = 0.5  # seconds the armed probe lasts; the commit comes in the middle


def _commit_task() -> None:
    time.sleep(PROBE_SLEEP / 2)
    conn = psycopg2.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"],
                            dbname=os.environ["DB_BASE"], user=os.environ["DB_USER"],
                            password=os.environ.get("DB_PASS", ""))
    conn.autocommit = True
    schema, table = os.environ["QUEUE_TABLE"].split(".")
    with conn.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}"."{table}" (processo, payload) '
                    "VALUES ('corrida', %s)", (json.dumps({"efeito": "corrida"}),))
    conn.close()


def _wait_slice(self: ListenerTurn, ms: int, check: bool = False) -> bool:
    arm = os.environ.get("NSJQ_TEST_RACE_FILE", "")
    if not (arm and os.path.exists(arm) and self.probe_sql):
        return _original(self, ms, check)
    os.remove(arm)
    probe = self.probe_sql
    # The probe's snapshot is taken when it starts; the commit lands during its sleep.
    self.probe_sql = f"SELECT d FROM ({probe}) p(d), pg_sleep({PROBE_SLEEP})"
    committer = threading.Thread(target=_commit_task)
    committer.start()
    try:
        return _original(self, ms, check)
    finally:
        committer.join()
        self.probe_sql = probe


ListenerTurn._wait_slice = _wait_slice

if __name__ == "__main__":
    ScriptedWorker().run()
