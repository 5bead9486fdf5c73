"""Any text a task produces is stored and logged: encodable, bounded, never losing work.

Real worker processes on the real PostgreSQL (the MariaDB path is in
tests/client_server/test_cs_text_safety.py).
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from nsj_queue_lib.db.repository import MESSAGE_MAX
from tests.fixtures.queue import Queue
from tests.fixtures.waiting import eventually

SURROGATE = "\udcff"  # what bytes b"\xff" become when decoded with surrogateescape


def _payload(data: dict) -> str:
    return json.dumps(data)  # ASCII JSON: lone surrogates and NUL travel as \u escapes


@pytest.mark.parametrize("batch", ["1", "5"], ids=["one-by-one", "batch"])
def test_return_value_with_lone_surrogate_and_nul_keeps_the_committed_work(pg_queue, batch):
    task_id = pg_queue.insert(_payload({"efeito": "feito", "return": f"ok {SURROGATE}\x00 fim"}))
    bad = pg_queue.insert(_payload({"raise": f"erro {SURROGATE}\x00"}))
    w = pg_queue.start_worker(QUEUE_BATCH_SIZE=batch, QUEUE_BASE_INTERVAL_RETRY="10")
    row = pg_queue.wait_status(task_id, "sucesso")
    assert row["mensagem"] == "ok \\udcff fim"
    assert pg_queue.wait_status(bad, "falha")["mensagem"] == (
        "RuntimeError: erro \\udcff. Tarefa reenfileirada.")
    assert pg_queue.count() == 3  # no retry of the success: the first attempt's work stands
    assert [e["chave"] for e in pg_queue.effects()] == ["feito"]
    assert "Logging error" not in w.log() and "Erro inesperado" not in w.log()


def test_undecodable_long_error_is_recorded_as_itself_and_logged_bounded(pg_queue):
    message = f"erro {SURROGATE} com\x00 nul " + "z" * 200_000
    task_id = pg_queue.insert(_payload({"raise": message}), prioridade=90)
    after = pg_queue.insert(_payload({"efeito": "depois"}))
    w = pg_queue.start_worker(QUEUE_BASE_INTERVAL_RETRY="10")  # the retry stays scheduled
    pg_queue.wait_status(after, "sucesso")
    row = pg_queue.wait_status(task_id, "falha")
    text = row["mensagem"]
    assert text.startswith("RuntimeError: erro \\udcff com nul zzz"), text[:80]
    full = len("RuntimeError: ") + len(message) - 1 + len("\\udcff") - 1  # NUL out, escaped
    assert f"… [{full} caracteres]. Tarefa reenfileirada." in text
    assert text.endswith("Tarefa reenfileirada.")
    assert len(text) <= MESSAGE_MAX
    assert "O worker parou" not in text
    nxt = pg_queue.rows(f"id_anterior = {task_id}")
    assert [(r["status"], r["tentativa"]) for r in nxt] == [("agendada", 2)]
    assert w.proc.poll() is None
    log = w.log()
    assert "Logging error" not in log and "Erro inesperado" not in log
    # The error line and its traceback are cut (each noting the full length): the whole
    # log of this failure stays a few KB instead of 400 KB.
    assert len(log) < 40_000, len(log)
    assert max(len(line) for line in log.splitlines()) <= 4_200
    assert log.count("caracteres]") >= 2


def test_exception_whose_str_fails_is_still_recorded_by_name(pg_queue):
    task_id = pg_queue.insert(_payload({"raise_unprintable": True}))
    w = pg_queue.start_worker(QUEUE_MAX_RETRY="1")
    row = pg_queue.wait_status(task_id, "falha")
    assert row["mensagem"].startswith("UnprintableError: <mensagem ilegível: ('argumento',)>")
    eventually(lambda: pg_queue.count("dead") == 1, message="dead letter")
    assert w.proc.poll() is None
    assert "Erro inesperado" not in w.log()


def test_latin1_database_stores_what_it_cannot_represent_escaped(pg_server):
    """A queue in a LATIN1 database (older ERPs): characters outside LATIN1 in a return
    value or an error are stored escaped; the task's work is kept, the failure recorded."""
    name = f"nsjq_latin1_{uuid.uuid4().hex[:8]}"
    admin = pg_server.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                    "TEMPLATE template0")
    q = Queue.create(dataclasses.replace(pg_server, dbname=name, embedded=None),
                     schema="t_latin", fila=f"fila_{uuid.uuid4().hex[:8]}")
    try:
        ok = q.insert(_payload({"efeito": "feito", "return": "ok ✓ é"}))
        bad = q.insert(_payload({"raise": "erro ✗ ã"}))
        w = q.start_worker(QUEUE_BASE_INTERVAL_RETRY="10")
        assert q.wait_status(ok, "sucesso")["mensagem"] == "ok \\u2713 \\xe9"
        text = q.wait_status(bad, "falha")["mensagem"]
        assert text.startswith("RuntimeError: erro \\u2717 \\xe3"), text
        assert [e["chave"] for e in q.effects()] == ["feito"]
        assert q.count() == 3  # ok, bad, bad's scheduled retry
        assert "Erro inesperado" not in w.log()
    finally:
        q.destroy()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
