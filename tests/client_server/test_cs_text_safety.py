"""MariaDB path of the text safety (client/server mode, real server and worker processes):
lone surrogates and NUL in a return value or an error, and a `mensagem` column in a
narrower charset, never lose the task's work nor crash the consumer loop."""

from __future__ import annotations

import json

SURROGATE = "\udcff"


def test_undecodable_texts_on_mariadb_keep_work_and_record_errors(mariadb_socket_queue):
    csq = mariadb_socket_queue
    csq.start_server()
    w = csq.start_ready_worker(QUEUE_BASE_INTERVAL_RETRY="10")
    ok = csq.insert(json.dumps({"efeito": "feito", "return": f"ok {SURROGATE}\x00 fim"}))
    bad = csq.insert(json.dumps({"raise": f"erro {SURROGATE}\x00 " + "z" * 50_000}))
    assert csq.wait_status(ok, "sucesso")["mensagem"] == "ok \\udcff fim"
    text = csq.wait_status(bad, "falha")["mensagem"]
    assert text.startswith("RuntimeError: erro \\udcff zzz") and "caracteres]" in text
    assert text.endswith("Tarefa reenfileirada.") and len(text) <= 500
    assert [e["chave"] for e in csq.effects()] == ["feito"]
    assert csq.count() == 3  # ok, bad and bad's scheduled retry: nothing else
    # A column the database cannot store these characters in (latin1, strict mode): the
    # success UPDATE is repeated with the characters escaped, the work stays committed.
    csq.sql(f"ALTER TABLE {csq.qtable} MODIFY mensagem VARCHAR(500) CHARACTER SET latin1 NULL")
    latin = csq.insert(json.dumps({"efeito": "latin", "return": "ok ✓ 😀 é"}))
    row = csq.wait_status(latin, "sucesso")
    assert row["mensagem"] == "ok \\u2713 \\U0001f600 \\xe9"
    assert sorted(e["chave"] for e in csq.effects()) == ["feito", "latin"]
    assert w.proc.poll() is None
    log = w.log()
    assert "Logging error" not in log and "Erro inesperado" not in log
    assert len(log) < 40_000
