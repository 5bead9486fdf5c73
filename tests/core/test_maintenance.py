"""The admin services run in-process against real rows on PostgreSQL: purge in rounds and
its limits, the re-wake of lost pending tasks.  The rescue (retry) and the promotion of
scheduled tasks on every backend: tests/contract/test_contract_maintenance.py."""

from __future__ import annotations

import datetime as dt

import pytest

from nsj_queue_lib.engine.postgres.backend import PostgresBackend
from nsj_queue_lib.runtime.maintenance import NotifyService, PurgeService
from tests.fixtures.waiting import eventually

EVERY_MINUTE = frozenset(range(60))


def _raw(queue, **cols) -> int:
    """Insert a row exactly as given (no QueueClient defaults); return its id."""
    names = ", ".join(cols)
    marks = ", ".join(["%s"] * len(cols))
    return queue.value(f'INSERT INTO "{queue.schema}"."{queue.fila}" ({names}) '
                       f"VALUES ({marks}) RETURNING id", tuple(cols.values()))


def _service(cls, queue, **env):
    settings = queue.settings(**env)
    return cls(settings, PostgresBackend(settings), EVERY_MINUTE)


@pytest.fixture
def listener(pg_queue, pg_server):
    """Listens on the queue's channel.  `listener(marker)` sends NOTIFY `marker` and returns
    the payloads delivered before it (PostgreSQL delivers in commit order), then forgets them.
    """
    conn = pg_server.connect()
    with conn.cursor() as cur:
        cur.execute(f'LISTEN "{pg_queue.fila}"')

    def until_marker(marker: str) -> list:
        pg_queue.sql("SELECT pg_notify(%s, %s)", (pg_queue.fila, marker))
        eventually(lambda: (conn.poll(), marker in [n.payload for n in conn.notifies])[1],
                   message=f"marker {marker}")
        payloads = [n.payload for n in conn.notifies]
        conn.notifies.clear()
        return payloads[:payloads.index(marker)]

    yield until_marker
    conn.close()


def test_purge_deletes_old_finished_chains_only_and_respects_limit(pg_queue):
    now = pg_queue.db_now()
    old = now - dt.timedelta(days=10)
    recent = now - dt.timedelta(hours=1)

    a1 = _raw(pg_queue, status="falha", data_hora=old, payload="a")
    a2 = _raw(pg_queue, status="sucesso", data_hora=old, id_inicial=a1, tentativa=2)
    b = _raw(pg_queue, status="sucesso", data_hora=old, payload="b")
    xs = [_raw(pg_queue, status="sucesso", data_hora=old, payload=f"x{i}") for i in range(5)]
    deletable = {a1, a2, b, *xs}

    kept = {
        _raw(pg_queue, status="pendente", data_hora=old, payload="c"),
        _raw(pg_queue, status="agendada", data_hora=old, payload="d"),
        _raw(pg_queue, status="processando", data_hora=old, payload="e"),
        _raw(pg_queue, status="sucesso", data_hora=recent, payload="h"),
    }
    f1 = _raw(pg_queue, status="falha", data_hora=old, payload="f")  # chain with an active retry
    f2 = _raw(pg_queue, status="agendada", data_hora=old, id_inicial=f1, tentativa=2)
    g1 = _raw(pg_queue, status="falha", data_hora=old, payload="g")  # chain ended recently
    g2 = _raw(pg_queue, status="sucesso", data_hora=recent, id_inicial=g1, tentativa=2)
    kept |= {f1, f2, g1, g2}

    one_round = _service(PurgeService, pg_queue, QUEUE_PURGE_MAX_AGE="1", QUEUE_PURGE_LIMIT="3",
                         QUEUE_PURGE_ROUND_LIMIT="1")
    assert one_round.run_once().count == 3
    assert pg_queue.count() == len(deletable) + len(kept) - 3
    assert one_round.run_once().count == 3

    rounds = _service(PurgeService, pg_queue, QUEUE_PURGE_MAX_AGE="1", QUEUE_PURGE_LIMIT="3")
    assert rounds.run_once().count == 2
    assert {r["id"] for r in pg_queue.rows()} == kept
    assert rounds.run_once().count == 0


def test_purge_whole_backlog_in_rounds(pg_queue):
    old = pg_queue.db_now() - dt.timedelta(days=100)
    for i in range(7):
        _raw(pg_queue, status="sucesso", data_hora=old, payload=str(i))
    purge = _service(PurgeService, pg_queue, QUEUE_PURGE_LIMIT="2")  # default age: 60 days
    assert purge.run_once().count == 7
    assert pg_queue.count() == 0


def test_notify_service_rewakes_for_lost_pending_only(pg_queue, listener):
    _raw(pg_queue, status="pendente", data_hora=pg_queue.db_now() - dt.timedelta(seconds=1))
    listener("m0")  # drop the insert's own notification
    notify = _service(NotifyService, pg_queue, QUEUE_WAIT_NOTIFY_INTERVAL="60")
    assert notify.run_once().count == 0
    assert listener("m1") == []  # waiting 1 s < 60 s: not lost, no wake-up

    pg_queue.sql(f'UPDATE "{pg_queue.schema}"."{pg_queue.fila}" '
                 "SET data_hora = clock_timestamp() - interval '2 minutes'")
    assert notify.run_once().count == 0
    assert listener("m2") == [""]  # lost: the workers are woken
