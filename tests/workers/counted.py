"""The scripted worker with every statement it sends counted (bench/counting.py), for
tests that pin statements per task (python -m tests.workers.counted): the counts go to
$NSJQ_BENCH_COUNT_DIR at exit, those after the file "mark" appeared kept apart.

Its minute-slot admin jobs (retry, purge, lost-notify) are moved half an hour away
unless the test sets them: at a slot every worker checks the slot and one runs the
jobs, statements that have nothing to do with the wake-ups being counted (a counting
window that crossed 21:15:00 failed CI run 1 of session 14)."""

from __future__ import annotations

import datetime as dt
import os

from bench import counting

counting.install()

_FAR_MINUTE = str((dt.datetime.now().minute + 30) % 60)
for _name in ("QUEUE_MINUTE_RETRY_THREAD", "QUEUE_MINUTE_PURGE_THREAD",
              "QUEUE_MINUTE_NOTIFY_THREAD"):
    os.environ.setdefault(_name, _FAR_MINUTE)

from tests.workers.scripted import ScriptedWorker  # noqa: E402 (after the counter)

if __name__ == "__main__":
    ScriptedWorker().run()
