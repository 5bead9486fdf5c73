"""LokiHandler: batching, stable labels, bounded buffer, a hanging Loki never slows tasks."""

from __future__ import annotations

import base64
import logging
import re
import time

import pytest

from nsj_queue_lib.observability.loki import (
    LokiHandler,
    install_loki_handler,
    redact_url,
    uninstall_loki_handler,
)
from tests.fixtures.waiting import eventually
from tests.ops.lokiserver import FakeLoki

LABELS = {"env": "test", "queue": "fila_x"}
DROPPED = re.compile(r"nsj_queue_lib: (\d+) registros de log descartados")


@pytest.fixture
def loki():
    server = FakeLoki()
    yield server
    server.close()


def _logger(handler: LokiHandler, name: str) -> logging.Logger:
    log = logging.getLogger(f"loki_test.{name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.handlers = [handler]
    return log


def _reported_dropped(server: FakeLoki) -> int:
    return sum(int(m.group(1)) for line in server.lines() if (m := DROPPED.search(line)))


def test_records_are_sent_in_batches_with_stable_labels(loki):
    handler = LokiHandler(loki.url, LABELS, batch_size=10, flush_interval=0.2)
    log = _logger(handler, "batch")
    try:
        for i in range(25):
            log.info("mensagem %s", i)
        log.error("falhou")
        eventually(lambda: len(loki.lines()) == 26, timeout=10, message="26 linhas")
    finally:
        handler.close()
    sizes = [sum(len(s["values"]) for s in push["streams"]) for push in loki.pushes]
    assert max(sizes) == 10 and len(loki.pushes) <= 5, sizes  # batched, not one per record
    labels = {tuple(sorted(s["stream"].items())) for s in loki.streams()}
    assert labels == {(("env", "test"), ("level", "info"), ("queue", "fila_x")),
                      (("env", "test"), ("level", "error"), ("queue", "fila_x"))}
    lines = loki.lines()
    assert any(line.endswith("loki_test.batch INFO: mensagem 24") for line in lines)
    assert all(" pid=" in line for line in lines)  # the pid is in the line, not a label
    for stream in loki.streams():
        stamps = [int(v[0]) for v in stream["values"]]
        assert stamps == sorted(stamps) and all(len(str(t)) == 19 for t in stamps)
    assert loki.headers[0]["Content-Type"] == "application/json"
    assert handler.dropped_total == 0


def test_hanging_loki_never_blocks_and_dropped_records_are_reported(loki):
    loki.set_mode("hang")
    handler = LokiHandler(loki.url, LABELS, batch_size=10, flush_interval=0.05, capacity=50,
                          timeout=0.3, backoff_max=0.5)
    log = _logger(handler, "hang")
    try:
        started = time.monotonic()
        for i in range(2000):
            log.info("registro %s", i)
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"emit bloqueou: {elapsed:.2f} s para 2000 registros"
        eventually(lambda: loki.attempts >= 1 and handler.failed_batches >= 1, timeout=5)
        assert handler.dropped_total >= 2000 - 50 - 10
        # Loki comes back: the buffered records and the count of the dropped ones arrive.
        loki.set_mode("ok")
        # Once the buffer is drained there is room again.
        eventually(lambda: len(loki.lines()) >= 50, timeout=10, message="buffer entregue")
        log.info("depois da volta")
        eventually(lambda: any("depois da volta" in line for line in loki.lines()), timeout=10)
        eventually(lambda: _reported_dropped(loki) == handler.dropped_total, timeout=5)
    finally:
        handler.close()
    delivered = [line for line in loki.lines() if not DROPPED.search(line)]
    assert len(delivered) + _reported_dropped(loki) == 2001
    notice = [s for s in loki.streams() if any(DROPPED.search(v[1]) for v in s["values"])]
    assert notice[0]["stream"]["level"] == "warning"


def test_refused_batches_are_dropped_and_counted(loki):
    loki.set_mode("error")
    handler = LokiHandler(loki.url, LABELS, batch_size=5, flush_interval=0.05, capacity=100,
                          timeout=1, backoff_max=0.2)
    log = _logger(handler, "error")
    try:
        for i in range(5):
            log.warning("aviso %s", i)
        eventually(lambda: handler.failed_batches >= 2, timeout=5)  # 500: kept, retried
        assert handler.dropped_total == 0
        loki.set_mode("ok")
        eventually(lambda: len(loki.lines()) >= 5, timeout=5)
    finally:
        handler.close()
    assert sorted(line.rsplit(" ", 1)[1] for line in loki.lines()) == ["0", "1", "2", "3", "4"]


def test_close_is_bounded_when_loki_hangs(loki):
    loki.set_mode("hang")
    handler = LokiHandler(loki.url, LABELS, flush_interval=60, timeout=30, close_timeout=0.5)
    _logger(handler, "close").info("x")
    started = time.monotonic()
    handler.close()
    assert time.monotonic() - started < 2


def test_credentials_in_url_are_sent_but_never_logged(loki, caplog):
    from nsj_queue_lib.config import Settings

    url = loki.url.replace("http://", "http://usuario:s3gr3d0@")
    assert redact_url(url) == loki.url
    settings = Settings.from_env({"GRAFANA_URL": url, "ENV": "prod", "QUEUE_NAME": "fila_y"},
                                 load_dotenv=False, require=())
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO):
            handler = install_loki_handler(settings, flush_interval=0.05)
            assert install_loki_handler(settings) is handler  # once
            logging.getLogger("nsj_queue_lib.teste").info("olá")
            eventually(lambda: any(line.endswith("olá") for line in loki.lines()), timeout=5)
    finally:
        uninstall_loki_handler()
        root.setLevel(old_level)
    expected = "Basic " + base64.b64encode(b"usuario:s3gr3d0").decode()
    assert {h["Authorization"] for h in loki.headers} == {expected}
    assert "s3gr3d0" not in caplog.text and "s3gr3d0" not in "".join(loki.lines())
    assert loki.url in caplog.text  # the redacted URL is shown
    assert {s["stream"]["env"] for s in loki.streams()} == {"prod"}
    assert {s["stream"]["queue"] for s in loki.streams()} == {"fila_y"}


def test_worker_keeps_its_pace_with_a_hanging_loki(pg_queue, loki):
    loki.set_mode("hang")
    worker = pg_queue.start_ready_worker(GRAFANA_URL=loki.url, LOG_DEBUG="true")
    # The worker's first push is now hanging (HTTP timeout 5 s, then back-off, again ...).
    eventually(lambda: loki.attempts >= 1, timeout=10, message="primeiro push")
    started = time.monotonic()
    ids = [pg_queue.insert({"efeito": f"e{i}"}) for i in range(40)]
    pg_queue.wait_idle(timeout=30)
    elapsed = time.monotonic() - started
    assert all(pg_queue.row(i)["status"] == "sucesso" for i in ids)
    assert len(pg_queue.effects()) == 40
    assert elapsed < 20, f"40 tarefas levaram {elapsed:.1f} s com o Loki travado"
    stop_started = time.monotonic()
    assert worker.stop(timeout=20) == 0
    assert time.monotonic() - stop_started < 15
