"""QueueAdmin on a task's own bd_conn, in a real worker (PostgreSQL and MySQL native): its
operation joins the task's transaction, as on any connection in a transaction
(docs/referencia/api.md)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.fixtures.queue import effects_by_key


@pytest.mark.parametrize("raw", [False, True], ids=["bd_conn", "bd_conn.conn"])
def test_an_admin_operation_in_a_task_joins_the_tasks_transaction(each_db_queue, raw):
    # A task far in the future (never claimed here) that the task under test cancels.
    target = each_db_queue.insert({"efeito": "alvo"},
                                  data_hora=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))
    task = each_db_queue.insert({"efeito": "a", "cancel": target, "fail_until": 2, "raw": raw})
    worker = each_db_queue.start_ready_worker("tests.workers.admin_in_task")
    chain = each_db_queue.wait_chain_done(task, timeout=30)
    # The first attempt failed: its effect and its cancel were rolled back with it; the
    # second one did both (before the fix the cancel's own COMMIT, sent on the task's
    # connection, committed the failed attempt's effect; the second attempt then found
    # the target already cancelled and failed too).
    assert [r["status"] for r in chain] == ["falha", "sucesso"], chain
    assert effects_by_key(each_db_queue) == {"a": 1}
    assert [e["tarefa_id"] for e in each_db_queue.effects()] == [chain[1]["id"]]
    row = each_db_queue.row(target)
    assert row["status"] == "cancelada" and row["mensagem"] == "Cancelada por tarefa"
    assert worker.proc.poll() is None
