"""@Subscriber handlers in one worker process with QUEUE_CONCURRENCY task threads
(PostgreSQL and MySQL native): every subscriber task of every publication is run by the
threads at once, and each ends exactly once (a first attempt that failed leaves no effect)."""

from __future__ import annotations

from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually

SUBSCRIBERS = ("a", "b", "c", "d")


def test_subscriber_fanout_with_concurrency_runs_each_subscriber_task_once(each_db_queue):
    for sid in SUBSCRIBERS:
        each_db_queue.add_subscriber(sid)
    worker = each_db_queue.start_worker("tests.workers.pubsub_scripted", QUEUE_CONCURRENCY="4")
    wait_ready(worker)
    pubs = [each_db_queue.publish({"n": i, "sleep": 0.5, "fail_until": 2 if i == 0 else 0})
            for i in range(4)]
    # The subscriber tasks of the publications run on several threads at once.
    eventually(lambda: each_db_queue.count("status = 'processando' AND NOT pub_sub") >= 3, 30,
               interval=0.05, message="3 subscriber tasks at once")
    each_db_queue.wait_idle(timeout=90)
    assert [each_db_queue.row(p)["status"] for p in pubs] == ["sucesso"] * len(pubs)
    first = each_db_queue.rows("publication_id IS NOT NULL AND tentativa = 1 AND NOT dead")
    assert sorted((r["publication_id"], r["subscriber_id"]) for r in first) == sorted(
        (p, sid) for p in pubs for sid in SUBSCRIBERS)
    effects = each_db_queue.effects("tipo = 'execute'")
    for r in first:  # one committed handler effect per subscriber task, in its chain
        chain_ids = {c["id"] for c in each_db_queue.chain(r["id"])}
        assert [c["status"] for c in each_db_queue.chain(r["id"])][-1] == "sucesso"
        done = [e for e in effects if e["tarefa_id"] in chain_ids]
        assert [e["chave"] for e in done] == [r["subscriber_id"]], r
    retried = [r for r in first if r["publication_id"] == pubs[0]]
    assert all(len(each_db_queue.chain(r["id"])) == 2 for r in retried)  # failed once, then ran
    assert len(effects) == len(pubs) * len(SUBSCRIBERS)
    assert {e["pid"] for e in effects} == {worker.pid}
    assert worker.proc.poll() is None
