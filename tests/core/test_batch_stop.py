"""Stop requests in batch mode (QUEUE_BATCH_SIZE > 1) with real worker processes, on
PostgreSQL and MySQL native: HALT and SIGTERM sent while a batch runs let that batch
finish whole (each of its tasks once), take no other task, and end the process (exit 0).
"""

from __future__ import annotations

import signal

from nsj_queue_lib.admin import QueueAdmin
from tests.fixtures.waiting import eventually


def _batch_held_at_its_second_task(q, tmp_path, n=3):
    """`n` tasks claimed as one batch by a fresh worker, held inside the second one
    (the first already ran, uncommitted); returns (worker, ids, release file, waiting id).
    The waiting task is inserted after the batch was claimed, so it is not part of it."""
    started, release = tmp_path / "started", tmp_path / "release"
    payloads = [{"efeito": f"b{i}"} for i in range(n)]
    payloads[1].update(started_file=str(started), wait_file=str(release))
    ids = q.insert_many(payloads)
    worker = q.start_worker(QUEUE_BATCH_SIZE=str(n))
    eventually(started.exists, 30, message="second task of the batch started")
    assert q.count("status = 'pendente'") == n  # the batch's claim is not committed yet
    waiting = q.insert({"efeito": "depois"})
    return worker, ids, release, waiting


def _assert_batch_once_and_nothing_else(q, worker, ids, waiting):
    assert worker.wait_exit(30) == 0, worker.log()
    assert [q.row(i)["status"] for i in ids] == ["sucesso"] * len(ids)
    assert sorted(e["tarefa_id"] for e in q.effects()) == sorted(ids)  # once each
    assert q.row(waiting)["status"] == "pendente", worker.log()
    assert q.count() == len(ids) + 1  # no retry, no failed attempt


def test_halt_mid_batch_finishes_the_batch_and_exits(dbq, tmp_path):
    worker, ids, release, waiting = _batch_held_at_its_second_task(dbq, tmp_path)
    with QueueAdmin.from_settings(dbq.settings()) as admin:
        admin.halt(por="teste")  # committed before the batch can end
    release.touch()
    _assert_batch_once_and_nothing_else(dbq, worker, ids, waiting)
    assert "HALT recebido no canal" in worker.log()


def test_sigterm_mid_batch_on_mysql_native_finishes_the_batch_and_exits(nq, tmp_path):
    worker, ids, release, waiting = _batch_held_at_its_second_task(nq, tmp_path)
    worker.signal(signal.SIGTERM)
    release.touch()
    _assert_batch_once_and_nothing_else(nq, worker, ids, waiting)
