"""The scripted worker, with a commit squeezed into the listener turn's probe (tests).

When the file NSJQ_TEST_RACE_FILE exists, the next probe of the next due time
(`task_seconds_to_next_due`) deletes it, then, after reading, inserts and commits a task
from another connection and runs one more statement on the worker's session: the task's
NOTIFY reaches the worker with that answer, after a snapshot that did not see the task.
"""

from __future__ import annotations

import json
import os
import time

import psycopg2

from nsj_queue_lib.db.repository import TaskRepository
from tests.workers.scripted import ScriptedWorker

_original = TaskRepository.task_seconds_to_next_due


def _probe(self: TaskRepository):
    result = _original(self)
    arm = os.environ.get("NSJQ_TEST_RACE_FILE", "")
    if arm and os.path.exists(arm):
        os.remove(arm)
        conn = psycopg2.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"],
                                dbname=os.environ["DB_BASE"], user=os.environ["DB_USER"],
                                password=os.environ.get("DB_PASS", ""))
        conn.autocommit = True
        schema, table = os.environ["QUEUE_TABLE"].split(".")
        with conn.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}"."{table}" (processo, payload) '
                        "VALUES ('corrida', %s)", (json.dumps({"efeito": "corrida"}),))
        conn.close()
        time.sleep(0.3)  # the listening backend sends the NOTIFY now
        self.session.fetch_value("SELECT 1")  # ... and it is read with this answer
    return result


TaskRepository.task_seconds_to_next_due = _probe

if __name__ == "__main__":
    ScriptedWorker().run()
