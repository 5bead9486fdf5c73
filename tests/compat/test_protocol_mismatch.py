"""Client/server mode across versions: a 2.x server with a real 1.2.2 worker, and the real
1.2.2 server with a 2.x worker.  Both sides fail fast naming both protocol versions,
nothing hangs, no task runs."""

from __future__ import annotations

import socket
import time

from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.engine.socket.protocol import PROTOCOL_VERSION
from nsj_queue_lib.version import __version__
from tests.compat.mixed import LEGACY_PLAIN
from tests.compat.test_mixed_fleet import _insert_v2, _value
from tests.fixtures.waiting import eventually

VERSIONS = (f"nsj-queue-lib {__version__} fala o protocolo cliente/servidor versão "
            f"{PROTOCOL_VERSION}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cs_env(fleet) -> dict:
    ports = {"NOTIFY_SERVICE_PORT": str(_free_port()), "LOCK_SERVICE_PORT": str(_free_port())}
    fleet.common.update({"CLIENT_SERVER_MODE": "true", "SERVER_HOST": "127.0.0.1",
                         "CHECK_TASKS_INTERVAL": "1", **ports})
    return ports


def test_2x_server_refuses_a_1_2_2_worker_naming_both_versions(legacy_queue):
    conn, fleet = legacy_queue
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    _cs_env(fleet)
    server = fleet.start_v2("nsj_queue_lib.server.server_main", "servidor")
    eventually(lambda: "no ar" in server.log(), 20,
               message="servidor 2.x no ar")
    _insert_v2(conn, fleet, "plain", 0, 1, "cs")
    worker = fleet.start_legacy(LEGACY_PLAIN, "cs-worker")
    eventually(lambda: VERSIONS in worker.log() and "1.2.2" in worker.log(), 30,
               message="worker 1.2.2 informado")
    eventually(lambda: "protocolo da nsj-queue-lib 1.2.2" in server.log(), 10,
               message="servidor 2.x registrou")
    time.sleep(2)  # the 1.2.2 worker keeps retrying every 5 s and never runs the task
    assert worker.proc.poll() is None and server.proc.poll() is None
    assert _value(conn, f"SELECT count(*) FROM {fleet.schema}.efeitos") == 0
    assert _value(conn, f"SELECT status FROM {fleet.schema}.{fleet.fila}") == "pendente"


def test_1_2_2_server_makes_a_2x_worker_stop_naming_both_versions(legacy_queue):
    conn, fleet = legacy_queue
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    _cs_env(fleet)
    _insert_v2(conn, fleet, "plain", 0, 1, "cs")
    server = fleet.start_legacy_module("nsj_queue_lib.server.server_main", "servidor")
    time.sleep(1)
    started = time.monotonic()
    worker = fleet.start_v2("tests.compat.worker_v2", "cs-worker")
    code = worker.proc.wait(60)
    assert code == 2, worker.log()
    assert time.monotonic() - started < 60
    assert "é da nsj-queue-lib 1.2.2" in worker.log() and VERSIONS in worker.log()
    assert _value(conn, f"SELECT count(*) FROM {fleet.schema}.efeitos") == 0
    assert _value(conn, f"SELECT status FROM {fleet.schema}.{fleet.fila}") == "pendente"
    assert server.proc.poll() is None
