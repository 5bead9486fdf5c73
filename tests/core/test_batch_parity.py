"""Batch mode leaves the same rows as per-task mode: status, attempt numbers, retry flags,
messages and dead letters of every chain (real workers, PostgreSQL and MariaDB native)."""

from __future__ import annotations

import re
from typing import List

from tests.fixtures.processes import wait_ready

PAYLOADS = [
    {"efeito": "ok"},
    {"efeito": "falha", "fail": True},  # every attempt fails: dead letter
    {"efeito": "depois", "fail_until": 2},  # fails once, then succeeds
    {"efeito": "sql", "sql_error": True},  # PostgreSQL: its transaction left aborted
    {"efeito": "morta", "fail": True, "fail_dead": True},  # its dead letter fails too
    {"efeito": "ok2"},
]
KEPT = ("status", "tentativa", "reenfileirado", "estouro_tentativas", "mensagem", "dead",
        "prioridade")


def _shape(rows: List[dict]) -> List[tuple]:
    """The rows without ids and times (numbers in messages are ids or attempts, the
    attempt being a column of its own)."""
    return [tuple(re.sub(r"\d+", "#", r[k]) if isinstance(r[k], str) else r[k]
                  for k in KEPT) for r in rows]


def _run(each_db_queue, batch_size: str) -> list:
    ids = [each_db_queue.insert(p) for p in PAYLOADS]
    worker = each_db_queue.start_worker(QUEUE_BATCH_SIZE=batch_size, QUEUE_MAX_RETRY="2")
    wait_ready(worker)
    for task_id in ids:
        each_db_queue.wait_chain_done(task_id, 40)
    assert worker.stop() == 0, worker.log()
    return [(_shape(each_db_queue.chain(i)), _shape(each_db_queue.dead_letters(i))) for i in ids]


def test_batch_mode_writes_the_rows_per_task_mode_writes(each_db_queue):
    per_task = _run(each_db_queue, "1")
    batch = _run(each_db_queue, "4")
    assert batch == per_task
    assert [c[0][-1][0] for c in per_task] == ["sucesso", "falha", "sucesso",
                                               "falha" if not each_db_queue.is_mysql else "sucesso",
                                               "falha", "sucesso"]
