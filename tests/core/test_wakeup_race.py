"""A task committed while the listener turn probes is not missed (PostgreSQL).

The worker drops the notifications it received before its probe of the next due time
(old news: before the marker its granting statement commits), never those that arrive
after it: those may be for a commit the probe's snapshot did not see.  Dropping them left
such a task waiting for the periodic poll (QUEUE_WAIT_NOTIFY_INTERVAL, 30 s here); this
test failed that way."""

from __future__ import annotations

import time

from tests.fixtures.waiting import eventually


def test_task_committed_during_the_probe_runs_at_once(pg_queue, tmp_path):
    arm = tmp_path / "race"
    worker = pg_queue.start_ready_worker("tests.workers.probe_race", NSJQ_TEST_RACE_FILE=arm)
    arm.touch()  # the next probe commits a task inside its window
    started = time.monotonic()
    pg_queue.insert({"efeito": "primeira"})  # wakes the worker: claim, run, probe again
    eventually(lambda: sorted(e["chave"] for e in pg_queue.effects()) == ["corrida", "primeira"],
               timeout=15, message="as duas tarefas executadas")
    assert not arm.exists()  # the squeezed commit did happen
    assert time.monotonic() - started < 10, "uma tarefa esperou o poll periódico"
    assert worker.proc.poll() is None
