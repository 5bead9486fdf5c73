"""/metrics and /healthz of real worker processes and of the socket server, checked
against the queue table."""

from __future__ import annotations

import datetime as _dt
import re
import urllib.error
import urllib.request
from typing import Dict, Tuple

from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import free_port

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(port: int, path: str = "/metrics") -> Tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


Samples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def parse(text: str, histogram: bool = True) -> Samples:
    """{(name, sorted label pairs): value}; fails on any line that is not valid text format."""
    out = {}
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"linha inválida no formato Prometheus: {line!r}"
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    if histogram:
        assert types["nsj_queue_task_duration_seconds"] == "histogram"
    return out


def total(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def test_worker_metrics_match_the_table(pg_queue):
    fila = pg_queue.fila
    ports = [free_port(), free_port()]
    workers = [pg_queue.start_worker(METRICS_PORT=p, METRICS_DB_INTERVAL="0.2") for p in ports]
    for w in workers:
        wait_ready(w)
    # 200 once the consumer has connected (the log line comes just before that).
    _, ctype, body = eventually(lambda: (r := scrape(ports[0], "/healthz"))[0] == 200 and r,
                                message="healthz 200")
    assert body.startswith("ok: ") and "saudável" in body, body
    assert ctype.startswith("text/plain")

    ok_ids = [pg_queue.insert({"efeito": f"ok{i}"}) for i in range(12)]
    flaky = pg_queue.insert({"efeito": "flaky", "fail_until": 2})           # falha, then sucesso
    dead = pg_queue.insert({"efeito": "dead", "fail": True, "fail_dead": True})  # dead, dead fails
    future = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)
    for _ in range(3):
        pg_queue.insert({"efeito": "later"}, data_hora=future)
    pg_queue.wait_status(flaky, "falha")
    eventually(lambda: pg_queue.count("dead AND status = 'falha' AND NOT reenfileirado") == 1,
               timeout=40, message="dead-letter chain exhausted")
    eventually(lambda: pg_queue.count("status = 'processando' OR (status IN ('pendente', "
                                      "'agendada') AND data_hora <= now())") == 0,
               timeout=40, message="due tasks all run")
    assert all(pg_queue.row(i)["status"] == "sucesso" for i in ok_ids)
    assert pg_queue.row(dead)["status"] == "falha"

    def counters_match() -> bool:
        per_worker = [parse(scrape(p)[2]) for p in ports]
        merged: dict = {}
        for s in per_worker:
            for k, v in s.items():
                merged[k] = merged.get(k, 0) + v
        got = {
            "sucesso": total(merged, "nsj_queue_tasks_finished_total", outcome="sucesso"),
            "falha": total(merged, "nsj_queue_tasks_finished_total", outcome="falha"),
            "dead_letter": total(merged, "nsj_queue_tasks_finished_total",
                                 outcome="dead_letter"),
            "claims": total(merged, "nsj_queue_claims_total"),
            "hist": total(merged, "nsj_queue_task_duration_seconds_count"),
        }
        want = {
            "sucesso": pg_queue.count("status = 'sucesso'"),
            "falha": pg_queue.count("status = 'falha' AND reenfileirado"),
            "dead_letter": pg_queue.count("status = 'falha' AND NOT reenfileirado"),
            "claims": pg_queue.count("status IN ('sucesso', 'falha')"),
            "hist": pg_queue.count("status IN ('sucesso', 'falha')"),
        }
        gauges = per_worker[0]
        got.update(agendada=total(gauges, "nsj_queue_depth", status="agendada"),
                   pendente=total(gauges, "nsj_queue_depth", status="pendente"),
                   dead_waiting=total(gauges, "nsj_queue_dead_letters_waiting"),
                   due=total(gauges, "nsj_queue_due_tasks"))
        want.update(agendada=pg_queue.count("status = 'agendada'"),
                    pendente=pg_queue.count("status = 'pendente'"),
                    dead_waiting=1, due=0)
        counters_match.last = (got, want)
        return got == want

    try:
        eventually(counters_match, timeout=10, interval=0.3, message="metrics vs table")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: (métricas, tabela) = {counters_match.last}") from None
    assert counters_match.last[1]["sucesso"] == 12 + 1  # ok tasks, flaky retry
    assert counters_match.last[1]["dead_letter"] == 2       # live chain and dead chain ended

    text = scrape(ports[0])[2]
    # The official client's parser (a dev dependency only) reads the exposition as we mean it.
    from prometheus_client.parser import text_string_to_metric_families

    kinds = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert kinds["nsj_queue_task_duration_seconds"] == "histogram"
    assert kinds["nsj_queue_tasks_finished"] == "counter"  # (the parser drops _total)
    assert kinds["nsj_queue_depth"] == "gauge"
    samples = parse(text)
    assert ("nsj_queue_healthy", (("queue", fila),)) in samples
    assert samples[("nsj_queue_healthy", (("queue", fila),))] == 1
    assert total(samples, "nsj_queue_seconds_since_last_claim") >= 0
    assert total(samples, "nsj_queue_task_duration_seconds_bucket", le="+Inf") == \
        total(samples, "nsj_queue_task_duration_seconds_count")
    assert total(samples, "nsj_queue_empty_wakeups_total") >= 1
    assert total(samples, "nsj_queue_reconnects_total") == 0
    assert scrape(ports[0], "/nada")[0] == 404

    # A lost connection is counted, and the workers go on after reconnecting.
    killed = pg_queue.value("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = %s", (f"nsj_queue_lib:{fila}",))
    assert killed >= 2
    eventually(lambda: sum(total(parse(scrape(p)[2]), "nsj_queue_reconnects_total")
                           for p in ports) >= 2, message="reconexões contadas")
    after = pg_queue.insert({"efeito": "depois"})
    pg_queue.wait_status(after, "sucesso")
    eventually(lambda: sum(total(parse(scrape(p)[2]), "nsj_queue_tasks_finished_total",
                                 outcome="sucesso") for p in ports) == 14,
               message="tarefa depois da reconexão contada")
    # A worker whose connection was cut while idle may still be reconnecting (503 until
    # then); every one reports healthy again within its back-off.
    health = {}

    def all_healthy() -> bool:
        health.update({p: scrape(p, "/healthz")[::2] for p in ports})
        return all(code == 200 for code, _ in health.values())

    try:
        eventually(all_healthy, timeout=20, interval=0.3, message="saudáveis após reconexão")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {health}") from None
    assert all(w.proc.poll() is None for w in workers)


def test_worker_metrics_port_in_use_is_a_config_error(pg_queue):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        w = pg_queue.start_worker(METRICS_PORT=busy.getsockname()[1])
        assert w.wait_exit(20) == 2
    assert "METRICS_PORT" in w.log()


def test_server_metrics_and_healthz(pg_queue, tmp_path):
    from tests.fixtures.processes import WorkerProc

    def server(**extra: str) -> Tuple[WorkerProc, int]:
        port = free_port()
        env = pg_queue.env(METRICS_PORT=port, METRICS_DB_INTERVAL="0.2",
                               NOTIFY_SERVICE_PORT=free_port(), LOCK_SERVICE_PORT=free_port(),
                               **extra)
        proc = WorkerProc("nsj_queue_lib.server.server_main", env,
                          tmp_path / f"server-{port}.log")
        pg_queue.workers.append(proc)
        eventually(lambda: proc.proc.poll() is None and "Métricas em" in proc.log(),
                   message="server metrics up")
        return proc, port

    future = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)
    pg_queue.insert({"efeito": "x"}, data_hora=future)
    pg_queue.insert({"efeito": "y"})
    _, port = server()
    status, _, body = scrape(port, "/healthz")
    assert status == 200, body
    samples = parse(scrape(port)[2], histogram=False)
    assert total(samples, "nsj_queue_depth", status="pendente") == 2  # one due, one later
    assert total(samples, "nsj_queue_depth", status="processando") == 0
    assert total(samples, "nsj_queue_due_tasks") == 1
    assert total(samples, "nsj_queue_oldest_due_age_seconds") >= 0
    assert total(samples, "nsj_queue_server_clients") == 0
    assert total(samples, "nsj_queue_paused") == 0
    from nsj_queue_lib.admin import QueueAdmin

    conn = pg_queue.server.connect(autocommit=True)
    try:
        QueueAdmin(conn, pg_queue.table).pause(por="teste")
    finally:
        conn.close()
    eventually(lambda: total(parse(scrape(port)[2], histogram=False), "nsj_queue_paused") == 1,
               message="pausa nas métricas")

    # A server whose database does not answer is alive but not healthy.
    _, bad = server(DB_PORT=free_port())
    status, _, body = scrape(bad, "/healthz")
    assert status == 503 and "banco indisponível" in body, body
    assert total(parse(scrape(bad)[2], histogram=False), "nsj_queue_db_read_ok") == 0



def test_batch_mode_counts_every_task_once(pg_queue):
    port = free_port()
    w = pg_queue.start_worker(METRICS_PORT=port, QUEUE_BATCH_SIZE=4, LOG_FORMAT="json")
    wait_ready(w)
    eventually(lambda: scrape(port, "/healthz")[0] == 200, message="healthz 200")
    ids = [pg_queue.insert({"efeito": f"b{i}", "sleep": 0.02}) for i in range(9)]
    flaky = pg_queue.insert({"efeito": "flaky", "fail_until": 2})
    for i in ids:
        pg_queue.wait_status(i, "sucesso")
    eventually(lambda: pg_queue.count(f"id_inicial = {flaky} AND status = 'sucesso'") == 1,
               message="retentativa com sucesso")

    def matches() -> bool:
        s = parse(scrape(port)[2])
        matches.last = (total(s, "nsj_queue_tasks_finished_total", outcome="sucesso"),
                        total(s, "nsj_queue_tasks_finished_total", outcome="falha"),
                        total(s, "nsj_queue_task_duration_seconds_count"))
        return matches.last == (10, 1, 11)  # 9 tasks and the retry succeed, 1 failure

    try:
        eventually(matches, timeout=10, message="contadores do modo lote")
    except AssertionError:
        rows = pg_queue.sql("SELECT id, status, tentativa FROM " + pg_queue.table)
        raise AssertionError(f"métricas {matches.last}; tabela {rows}") from None
    assert pg_queue.count("status = 'sucesso'") == 10 and pg_queue.count("status = 'falha'") == 1
    s = parse(scrape(port)[2])
    # each task its own duration (0.02 s sleeps), not the whole batch's
    assert total(s, "nsj_queue_task_duration_seconds_bucket", le="0.01") <= 3
    assert total(s, "nsj_queue_task_duration_seconds_sum") < 9 * 0.02 * 3
    import json as _json

    ends = [r for r in map(_json.loads, w.log().splitlines()) if "terminou" in r["message"]]
    assert sorted(r["task_id"] for r in ends if r["task_id"] in ids) == sorted(ids)
