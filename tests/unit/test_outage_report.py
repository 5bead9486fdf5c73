"""OutageReport: a long outage leaves a few readable lines, not one per attempt."""

from __future__ import annotations

import logging

from nsj_queue_lib.runtime.service import OutageReport


def test_burst_then_one_line_per_interval_with_counts_then_recovery(caplog):
    now = [0.0]
    log = logging.getLogger("nsj_queue_lib.test_outage")
    report = OutageReport("Conexão indisponível", log, burst=2, every=60.0,
                          clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="nsj_queue_lib.test_outage")
    for _ in range(24 * 60 * 6):  # a day of attempts every 10 s
        report.failed("banco fora do ar\n  detalhe")
        now[0] += 10.0
    report.recovered()
    lines = [r.getMessage() for r in caplog.records]
    # 2 of the burst + one a minute for the rest of the day + the recovery line.
    assert 1400 <= len(lines) <= 1445, len(lines)
    assert lines[0] == "Conexão indisponível: banco fora do ar detalhe"
    assert lines[2].endswith("(6 tentativas falharam desde a mensagem anterior)"), lines[2]
    assert lines[-1] == "Conexão indisponível: restabelecido após 8640 tentativa(s) com falha"
    assert all(r.exc_info is None for r in caplog.records)


def test_a_new_outage_after_recovery_is_reported_at_once(caplog):
    now = [0.0]
    log = logging.getLogger("nsj_queue_lib.test_outage2")
    report = OutageReport("x", log, every=900.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="nsj_queue_lib.test_outage2")
    report.failed("a")
    report.failed("b")  # suppressed
    report.recovered()
    now[0] += 1.0
    report.failed("c")
    assert [r.getMessage() for r in caplog.records] == [
        "x: a", "x: restabelecido após 2 tentativa(s) com falha", "x: c"]
