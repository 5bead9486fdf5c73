"""QUEUE_CONCURRENCY is bounded: above its documented maximum, or above what the database
can take now, the worker refuses to start (exit 2, Portuguese message) instead of taking
every connection the server has; the database keeps serving other clients."""

from __future__ import annotations

import pytest

from nsj_queue_lib.config import MAX_CONCURRENCY


def test_above_the_documented_maximum_exits_2(pg_queue):
    worker = pg_queue.start_worker(QUEUE_CONCURRENCY="100000")
    assert worker.wait_exit(30) == 2
    assert f"QUEUE_CONCURRENCY='100000' inválida: use de 1 a {MAX_CONCURRENCY}" in worker.log()


@pytest.mark.parametrize("fixture", ["pg_queue",
                                     pytest.param("mariadb_queue", marks=pytest.mark.mysql)])
def test_more_threads_than_the_database_can_serve_exits_2(fixture, request):
    q = request.getfixturevalue(fixture)
    maximum = int(q.value("SELECT @@max_connections AS m" if q.is_mysql
                          else "SELECT current_setting('max_connections')::int AS m"))
    # Within the library's maximum, above the server's.
    if maximum >= MAX_CONCURRENCY:
        pytest.skip(f"max_connections {maximum} >= {MAX_CONCURRENCY}: nada a recusar")
    worker = q.start_worker(QUEUE_CONCURRENCY=str(MAX_CONCURRENCY))
    assert worker.wait_exit(60) == 2
    log = worker.log()
    assert f"QUEUE_CONCURRENCY={MAX_CONCURRENCY} precisa de {MAX_CONCURRENCY + 1} conexões" in log
    assert f"max_connections {maximum}" in log and "dá no máximo" in log
    # Nothing was taken: the database still answers, and a modest worker runs a task.
    ok = q.start_ready_worker(QUEUE_CONCURRENCY="2")
    task = q.insert({"efeito": "ok"})
    q.wait_status(task, "sucesso")
    ok.stop()
