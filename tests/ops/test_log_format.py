"""LOG_FORMAT=json from a real worker process, and the same fields sent to Loki."""

from __future__ import annotations

import json
import socket

import pytest

from tests.fixtures.waiting import eventually
from tests.ops.lokiserver import FakeLoki


@pytest.fixture
def loki():
    server = FakeLoki()
    yield server
    server.close()


def _json_lines(text: str) -> list:
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(json.loads(line))  # every line on stdout is one JSON object
    return out


def test_json_logs_carry_the_task_fields(pg_queue):
    worker = pg_queue.start_ready_worker(LOG_FORMAT="json")
    ok = pg_queue.insert({"efeito": "ok"})
    bad = pg_queue.insert({"efeito": "bad", "fail": True})
    pg_queue.wait_status(ok, "sucesso")
    pg_queue.wait_status(bad, "falha")
    wid = f"{socket.gethostname()}:{worker.pid}"

    def finished(task_id: int) -> dict:
        return next((r for r in _json_lines(worker.log())
                     if r["task_id"] == task_id and "terminou" in r["message"]), None)

    done = eventually(lambda: finished(ok), message="linha de fim da tarefa")
    assert done["level"] == "INFO" and done["queue"] == pg_queue.fila
    assert done["attempt"] == 1 and done["worker_id"] == wid
    assert isinstance(done["duration"], float) and done["duration"] >= 0
    assert done["logger"] == "nsj_queue_lib.observe"
    assert done["time"].endswith("Z") and "T" in done["time"]

    failed = eventually(lambda: next((r for r in _json_lines(worker.log())
                                      if r["task_id"] == bad and r["level"] == "ERROR"), None),
                        message="linha de erro da tarefa")
    assert "falha programada" in failed["message"] and failed["attempt"] == 1
    assert "RuntimeError" in failed["exception"]
    startup = _json_lines(worker.log())[0]
    assert startup["task_id"] is None and startup["queue"] == pg_queue.fila
    assert worker.stop() == 0


def test_plain_text_stays_the_default(pg_queue):
    worker = pg_queue.start_ready_worker()
    task = pg_queue.insert({"efeito": "x"})
    pg_queue.wait_status(task, "sucesso")
    line = eventually(lambda: next((ln for ln in worker.log().splitlines()
                                    if f"Tarefa {task} terminou" in ln), None))
    assert not line.startswith("{") and " INFO " in line


def test_loki_gets_the_fields_as_structured_metadata(pg_queue, loki):
    worker = pg_queue.start_ready_worker(GRAFANA_URL=loki.url, LOG_FORMAT="json")
    task = pg_queue.insert({"efeito": "x"})
    pg_queue.wait_status(task, "sucesso")

    def entry() -> list:
        return next((v for v in loki.entries()
                     if len(v) == 3 and v[2].get("task_id") == str(task)), None)

    ts, line, meta = eventually(entry, message="entrada com metadados no Loki")
    assert meta["attempt"] == "1" and meta["worker_id"].endswith(f":{worker.pid}")
    assert float(meta["duration"]) >= 0 and meta["logger"] == "nsj_queue_lib.observe"
    assert json.loads(line)["task_id"] == task  # the line is the same JSON object
    stream = next(s["stream"] for s in loki.streams() if [ts, line, meta] in s["values"])
    assert stream["queue"] == pg_queue.fila and stream["level"] == "info"


def test_loki_without_structured_metadata_still_gets_the_lines(pg_queue, loki):
    loki.set_mode("old")
    worker = pg_queue.start_ready_worker(GRAFANA_URL=loki.url)
    task = pg_queue.insert({"efeito": "x"})
    pg_queue.wait_status(task, "sucesso")
    eventually(lambda: any(f"Tarefa {task} terminou" in ln for ln in loki.lines()),
               message="linhas sem metadados")
    assert all(len(v) == 2 for v in loki.entries())
    assert "recusou metadados estruturados" in worker.log()
