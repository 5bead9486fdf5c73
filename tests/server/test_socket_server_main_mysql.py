"""End to end: `python -m nsj_queue_lib.server.server_main` on a real MariaDB/MySQL queue."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.client.notify_client import SocketNotifier
from nsj_queue_lib.engine.base import Notification, task_lock_key
from nsj_queue_lib.queue_client import QueueClient
from tests.fixtures.queue import Queue
from tests.fixtures.waiting import wait_until
from tests.server.socket_server_helpers import HOST, TOKEN, child_env, free_port

pytestmark = pytest.mark.mysql


def _enqueue(q: Queue, payload: Any = "carga") -> int:
    conn = q.server.connect(q.database, autocommit=False)
    try:
        task_id = QueueClient(conn, q.table, q.sub_table).insert_task(
            "origem", "destino", "proc", None, payload)
        conn.commit()
        return task_id
    finally:
        conn.close()


def test_server_main_wakes_workers_for_due_tasks_in_mysql(mariadb_queue: Queue,
                                                         tmp_path: Path) -> None:
    notify_port, lock_port = free_port(), free_port()
    env = child_env()
    env.update(mariadb_queue.server.env(mariadb_queue.database))
    env.update({"QUEUE_NAME": mariadb_queue.fila, "QUEUE_TABLE": mariadb_queue.table,
                "CLIENT_SERVER_MODE": "true", "SERVER_BIND_HOST": HOST,
                "SERVER_AUTH_TOKEN": TOKEN, "NOTIFY_SERVICE_PORT": str(notify_port),
                "LOCK_SERVICE_PORT": str(lock_port), "CHECK_TASKS_INTERVAL": "0.3",
                "TIMEOUT_SOCKET_MESSAGE": "2"})
    log_path = tmp_path / "server_main.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.server.server_main"],
                                env=env, cwd=str(tmp_path), stdout=log,
                                stderr=subprocess.STDOUT)
    worker = SocketNotifier(HOST, notify_port, TOKEN, 2.0, queue=mariadb_queue.fila)
    locker = SocketLocker(HOST, lock_port, TOKEN, 2.0, queue=mariadb_queue.fila)
    try:
        def listening() -> bool:
            worker.listen()
            return worker.connected

        assert wait_until(listening, timeout=20.0, interval=0.1), log_path.read_text()
        assert worker.wait(1.0) == []  # empty queue: no wake-up
        task_id = _enqueue(mariadb_queue)
        assert worker.wait(10.0) == [Notification(mariadb_queue.fila, "")], log_path.read_text()
        key = task_lock_key(mariadb_queue.table, task_id)
        assert locker.try_lock(key) and locker.is_held(key)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert "Servidor encerrado." in log_path.read_text()
    finally:
        worker.close()
        locker.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
