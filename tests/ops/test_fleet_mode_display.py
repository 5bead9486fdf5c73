"""The queue's mixed-fleet mode with 1.2.2 (engine/fleet_mode.py) as status, health
and metrics show it: a queue created by the current DDL is out of it; `compat_on()` puts
it in, and a running worker's heartbeat file and /metrics follow within seconds."""

from __future__ import annotations

import json

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.engine.fleet_mode import FleetMode
from nsj_queue_lib.observability import health
from nsj_queue_lib.observability import status as status_mod
from nsj_queue_lib.observability.metrics import QueueGauges, render
from tests.fixtures.processes import run_python, wait_ready
from tests.fixtures.waiting import eventually
from tests.mysql.conftest import make_settings
from tests.ops.test_metrics import parse, scrape
from tests.server.socket_server_helpers import free_port


def _status_json(queue) -> dict:
    env = {k: v for k, v in queue.env().items() if k.startswith("DB_") or k == "QUEUE_TABLE"}
    res = run_python(["-m", "nsj_queue_lib.status", "--json"],
                     env={**env, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _admin(queue) -> QueueAdmin:
    return QueueAdmin.from_settings(queue.settings())


def test_status_shows_the_mode_and_its_change(pg_queue):
    data = _status_json(pg_queue)
    fleet = data["frota_mista"]
    assert fleet == {"aplica": True, "misto": False, "gravado": False,
                     "desde": fleet["desde"], "por": "nsj-queue schema"}  # the DDL's row
    assert fleet["desde"] is not None
    assert data["pausa"]["pausada"] is False  # the older keys are still there
    text = status_mod.render_text(data)
    assert "  Frota mista com a 1.2.2:    desligado (só workers 2.x) desde " in text

    admin = _admin(pg_queue)
    try:
        admin.compat_on(por="teste de exibição")
    finally:
        admin.close()
    data = _status_json(pg_queue)
    fleet = data["frota_mista"]
    assert (fleet["aplica"], fleet["misto"], fleet["gravado"], fleet["por"]) == \
        (True, True, True, "teste de exibição")
    assert fleet["desde"] is not None
    text = status_mod.render_text(data)
    assert "Frota mista com a 1.2.2:    ligado (workers 1.2.2 podem usar a fila) desde " \
        in text and "por teste de exibição" in text


def test_status_of_a_queue_without_control_table_is_mixed(pg_queue):
    pg_queue.sql(f"DROP TABLE {pg_queue.table}_controle")
    fleet = status_mod.read_status(pg_queue.settings())["frota_mista"]
    assert fleet == {"aplica": True, "misto": True, "gravado": None, "desde": None,
                     "por": None}
    assert "esquema anterior ou sem tabela de controle" in status_mod.fleet_text(fleet)


@pytest.mark.mysql
def test_status_on_mysql_says_not_applicable(mariadb_queue):
    data = status_mod.read_status(make_settings(mariadb_queue))
    assert data["frota_mista"]["aplica"] is False and data["frota_mista"]["misto"] is None
    assert "Frota mista" not in status_mod.render_text(data)


def test_standalone_heartbeat_reads_the_mode_from_the_control_row(pg_queue, tmp_path):
    path = tmp_path / "h.json"
    beat = health.HeartbeatService(pg_queue.settings(), path=str(path), interval=0.1)
    try:
        beat.mark_connected()
        state = json.loads(path.read_text())
        assert (state["frota_mista"], state["frota_mista_origem"]) == (False, "fila")
        admin = _admin(pg_queue)
        try:
            admin.compat_on()
        finally:
            admin.close()
        assert beat.run_once()["frota_mista"] is True
        verdict = health.check(str(path))
        assert verdict["saudavel"] and verdict["frota_mista"] is True
        assert verdict["motivo"].endswith("; modo de frota mista com a 1.2.2")
    finally:
        beat.close()


def test_gauges_without_a_worker_read_the_control_row(pg_queue):
    gauges = QueueGauges(pg_queue.settings(), interval=0)
    try:
        samples = parse(render(gauges.families({"queue": "q"})), histogram=False)
        assert samples[("nsj_queue_compat_1_2_2", (("queue", "q"),))] == 0
        assert samples[("nsj_queue_paused", (("queue", "q"),))] == 0
        admin = _admin(pg_queue)
        try:
            admin.compat_on()
        finally:
            admin.close()
        samples = parse(render(gauges.families({"queue": "q"})), histogram=False)
        assert samples[("nsj_queue_compat_1_2_2", (("queue", "q"),))] == 1
    finally:
        gauges.close_session()


def test_gauge_follows_a_workers_fleet_mode_and_is_absent_where_it_does_not_apply(pg_queue):
    settings = pg_queue.settings()
    mode = FleetMode(settings.queue_table)
    assert mode.mixed and mode.stored is None  # (not read yet: the safe side)
    gauges = QueueGauges(settings, interval=60, fleet=mode)
    key = ("nsj_queue_compat_1_2_2", (("queue", "q"),))
    try:
        # The gauges' read of the control row is noted in the worker's mode.
        assert parse(render(gauges.families({"queue": "q"})), histogram=False)[key] == 0
        assert mode.stored is False and gauges.reads == 1
        mode.note(True)  # the pause gate's next read, before a claim: no read of its own
        assert parse(render(gauges.families({"queue": "q"})), histogram=False)[key] == 1
        assert gauges.reads == 1
        gauges.fleet = FleetMode(settings.queue_table, possible=False)  # MySQL, cli/server
        assert key not in parse(render(gauges.families({"queue": "q"})), histogram=False)
    finally:
        gauges.close_session()


def test_running_worker_shows_the_change_in_health_and_metrics(pg_queue, tmp_path):
    path = tmp_path / "worker.health"
    port = free_port()
    # (an idle worker reads the control row before its next claim, and at the gauges'
    # reads, which a scrape asks for at most every METRICS_DB_INTERVAL seconds)
    worker = pg_queue.start_worker(QUEUE_HEALTH_FILE=str(path), METRICS_PORT=port,
                                   METRICS_DB_INTERVAL="0.2")
    wait_ready(worker)
    env = pg_queue.env(QUEUE_HEALTH_FILE=str(path))
    key = ("nsj_queue_compat_1_2_2", (("queue", pg_queue.env()["QUEUE_NAME"]),))

    def seen(mixed: bool):
        res = run_python(["-m", "nsj_queue_lib.health", "--json"], env=env)
        if res.returncode != 0:
            return None
        probe = json.loads(res.stdout)
        code, _, body = scrape(port)
        gauge = parse(body).get(key) if code == 200 else None
        return (probe["frota_mista"] is mixed and probe["estado"]["frota_mista"] is mixed
                and gauge == (1 if mixed else 0) and probe)

    admin = _admin(pg_queue)
    try:
        # A new queue is out of the mode; forced, in case the worker's look at start saw
        # a session of this shared database that looks like a 1.2.2 worker (its next look
        # is a minute later).
        admin.compat_off(por="teste", force=True)
        probe = eventually(lambda: seen(False), timeout=20, message="frota mista desligada")
        assert probe["estado"]["frota_mista_origem"] == "fila"
        assert "frota mista" not in probe["motivo"]
        admin.compat_on(por="teste")
        # (the heartbeat file is rewritten every 5 s; /metrics answers at once)
        probe = eventually(lambda: seen(True), timeout=20, message="frota mista ligada")
        assert "modo de frota mista com a 1.2.2" in probe["motivo"]
        admin.compat_off(por="teste", force=True)
        eventually(lambda: seen(False), timeout=20, message="frota mista desligada de novo")
    finally:
        admin.close()
    assert worker.stop() == 0
