"""The half-open breaker's probe is a lease (`sonda_ate`, committed before the HTTP call):
one probe per pause fleet-wide, a failed probe spends no other delivery's attempt, and a
probe whose worker died holds the endpoint until its lease lapses.  Real webhook worker
processes and a real local HTTP server, PostgreSQL and MariaDB native."""

from __future__ import annotations

import time

from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"


def endpoint_table(queue) -> str:
    return f"{queue.quote(queue.schema)}.{queue.quote(queue.fila + '_endpoints')}"


def lease_left(queue) -> float:
    """Seconds left of the endpoint's probe lease (0: none), read on the test's connection."""
    left = ("TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), sonda_ate) / 1000000"
            if queue.is_mysql else "extract(epoch FROM (sonda_ate - now()))")
    rows = queue.sql(f"SELECT {left} AS s FROM {endpoint_table(queue)}")
    return max([float(r["s"]) for r in rows if r["s"] is not None] or [0.0])


def test_one_probe_per_pause_window_with_two_workers(each_db_queue, http_endpoint):
    queue = each_db_queue
    answer_after = 1.0  # every call to the endpoint fails after this long
    pause = 1.0  # WEBHOOK_BREAKER_COOLDOWN = WEBHOOK_BREAKER_MAX_COOLDOWN
    http_endpoint.script("/down", statuses=[503], delay=answer_after)
    queue.add_subscriber("down", url=http_endpoint.url + "/down", method="POST")
    env = {"WEBHOOK_BREAKER_FAILURES": "1", "WEBHOOK_BREAKER_COOLDOWN": "1",
           "WEBHOOK_BREAKER_MAX_COOLDOWN": "1", "DEFAULT_WEBHOOK_TIMEOUT": "5",
           "QUEUE_MAX_RETRY": "50", "QUEUE_CONCURRENCY": "2"}
    workers = [queue.start_worker(WEBHOOK, **env) for _ in range(2)]
    for n in range(12):
        queue.publish({"n": n})

    # The lease is committed while the probe's call is under way (before: never set).
    eventually(lambda: lease_left(queue) > 0, timeout=30, interval=0.02,
               message="sonda_ate gravado durante a sonda")
    first = eventually(lambda: http_endpoint.received("/down"), timeout=20)[0].at
    # The calls before the first failure was recorded (up to 4 threads at once; the
    # first probe comes a pause after that), then three probes.
    cut = first + answer_after + pause / 2
    burst = lambda: [c for c in http_endpoint.received("/down")  # noqa: E731
                     if c.at < cut]
    eventually(lambda: len(http_endpoint.received("/down")) >= len(burst()) + 3, timeout=40,
               message="três sondas")
    for worker in workers:
        assert worker.stop() == 0
    calls = http_endpoint.received("/down")
    probes = [c.at for c in calls if c.at >= cut]
    # A probe starts once the previous one failed and its pause ended: never two in one
    # window (a second probe slipping in after the first one's rollback would start
    # right after its answer).
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps and min(gaps) >= answer_after + pause - 0.25, gaps
    # Only calls spend attempts: one failed attempt per call, none for the deliveries
    # that were put back meanwhile (no dead letter, no attempt beyond the calls).
    rows = queue.rows("subscriber_id = 'down'")
    failed = [r for r in rows if r["status"] == "falha"]
    assert len(failed) == len(calls)
    assert not [r for r in rows if r["dead"]]
    assert sum(int(r["tentativa"]) - 1 for r in rows if r["status"] != "falha") <= len(calls)
    assert lease_left(queue) == 0  # each failed probe cleared its lease
    assert sum(w.log().count("a sonda falhou") for w in workers) == len(probes)


def test_a_probe_whose_worker_died_holds_the_endpoint_until_its_lease_lapses(
        each_db_queue, http_endpoint):
    queue = each_db_queue
    timeout = 2  # DEFAULT_WEBHOOK_TIMEOUT: the lease is this plus PROBE_LEASE_MARGIN
    http_endpoint.script("/down", statuses=[503])
    queue.add_subscriber("down", url=http_endpoint.url + "/down", method="POST")
    env = {"WEBHOOK_BREAKER_FAILURES": "1", "WEBHOOK_BREAKER_COOLDOWN": "1",
           "DEFAULT_WEBHOOK_TIMEOUT": str(timeout), "QUEUE_MAX_RETRY": "50"}
    first = queue.start_worker(WEBHOOK, **env)
    for n in range(3):
        queue.publish({"n": n})
    eventually(lambda: len(http_endpoint.received("/down")) == 1, timeout=30)
    http_endpoint.script("/down", statuses=[503], delay=30.0)  # the probe hangs
    eventually(lambda: len(http_endpoint.received("/down")) == 2, timeout=30, interval=0.02,
               message="a sonda começou")
    first.kill9()  # the probing worker dies during its call
    killed_at = time.monotonic()
    left = lease_left(queue)
    assert timeout < left <= timeout + 10.0
    http_endpoint.script("/down", statuses=[200])
    second = queue.start_worker(WEBHOOK, **env)

    # Nobody probes while the dead probe's lease lasts; then the second worker does, its
    # probe succeeds and the breaker closes, lease cleared.
    third = eventually(lambda: http_endpoint.received("/down")[2:], timeout=60,
                       message="nova sonda após o prazo")[0]
    assert third.at >= killed_at + left - 0.5
    eventually(lambda: len([r for r in queue.rows("subscriber_id = 'down'")
                            if r["status"] == "sucesso"]) >= 2, timeout=30)
    assert lease_left(queue) == 0
    [state] = queue.sql(f"SELECT falhas, aberto_ate FROM {endpoint_table(queue)}")
    assert state["falhas"] == 0 and state["aberto_ate"] is None
    assert "esta entrega é a sonda" in second.log()
    assert second.stop() == 0


def test_the_call_that_would_open_the_breaker_goes_alone(each_db_queue, http_endpoint):
    """An endpoint one failure from opening gets one call at a time fleet-wide (the
    probe's lease): a dead endpoint does not hold every worker thread once more."""
    queue = each_db_queue
    http_endpoint.script("/down", statuses=[503], delay=1.0)
    queue.add_subscriber("down", url=http_endpoint.url + "/down", method="POST")
    endpoint = f"http://127.0.0.1:{http_endpoint.httpd.server_address[1]}"
    queue.sql(f"INSERT INTO {endpoint_table(queue)} (endpoint, falhas) VALUES (%s, 2)",
              (endpoint,))
    env = {"WEBHOOK_BREAKER_FAILURES": "3", "WEBHOOK_BREAKER_COOLDOWN": "60",
           "DEFAULT_WEBHOOK_TIMEOUT": "5", "QUEUE_MAX_RETRY": "5", "QUEUE_CONCURRENCY": "2"}
    workers = [queue.start_worker(WEBHOOK, **env) for _ in range(2)]
    for n in range(8):
        queue.publish({"n": n})
    eventually(lambda: lease_left(queue) > 0, timeout=30, interval=0.02,
               message="a chamada sozinha tem o prazo da sonda")
    eventually(lambda: queue.sql(f"SELECT aberto_ate FROM {endpoint_table(queue)}")[0][
        "aberto_ate"] is not None, timeout=30, message="disjuntor aberto")
    # Every delivery was claimed at least once meanwhile (put back, not called).
    eventually(lambda: len(queue.rows("subscriber_id = 'down'")) == 9, timeout=30)
    for worker in workers:
        assert worker.stop() == 0
    assert len(http_endpoint.received("/down")) == 1
    rows = queue.rows("subscriber_id = 'down'")
    assert [r["status"] for r in rows].count("falha") == 1
    assert all(r["tentativa"] == 1 for r in rows if r["id_anterior"] is None)
    assert lease_left(queue) == 0
    [state] = queue.sql(f"SELECT falhas FROM {endpoint_table(queue)}")
    assert state["falhas"] == 3
