"""Lock service of the real server (subprocess): the PostgreSQL advisory lock contract."""

from __future__ import annotations

import random
import threading
import time
from typing import Callable

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.engine.base import task_lock_key
from tests.fixtures.servers import ServerProcess
from tests.fixtures.waiting import wait_until
from tests.server.socket_server_helpers import (
    HOST,
    TOKEN,
    RawClient,
    spawn_lock_holder,
)

KEY = task_lock_key("fila_teste", 42)


def _locker(port: int, timeout: float = 2.0) -> SocketLocker:
    return SocketLocker(HOST, port, TOKEN, timeout)


def test_lock_belongs_to_its_session_until_it_closes(socket_server_process: ServerProcess) -> None:
    a, b = _locker(socket_server_process.notify_port), _locker(socket_server_process.lock_port)
    try:
        assert a.try_lock(KEY)
        assert a.is_held(KEY)
        assert not b.try_lock(KEY)
        assert not b.unlock(KEY)  # not the owner: no effect
        assert not b.try_lock(KEY)
        assert a.is_held(KEY)
        a.close()
        assert wait_until(lambda: b.try_lock(KEY), timeout=5.0)
        assert b.is_held(KEY)
    finally:
        a.close()
        b.close()


def test_locks_are_reentrant_like_postgres(socket_server_process: ServerProcess) -> None:
    port = socket_server_process.lock_port
    with _locker(port) as a, _locker(port) as b:
        assert a.try_lock(KEY) and a.try_lock(KEY)
        assert a.held == {KEY: 2}
        assert a.unlock(KEY)
        assert not b.try_lock(KEY)  # still held once
        assert a.unlock(KEY)
        assert not a.unlock(KEY)  # not held any more
        assert b.try_lock(KEY)
        assert not a.try_lock(KEY)


def test_kill_9_of_a_client_process_releases_its_locks_at_once(
        socket_server_factory: Callable[..., ServerProcess]) -> None:
    # Heartbeat detection would take >= 10 s here: a release within the deadline
    # below can only come from the connection being closed by the kernel.
    server = socket_server_factory(timeout=5.0)
    holder = spawn_lock_holder(server.notify_port, KEY)
    with _locker(server.lock_port) as other:
        try:
            assert not other.try_lock(KEY)
            holder.kill()
            holder.wait(10)
            started = time.monotonic()
            assert wait_until(lambda: other.try_lock(KEY), timeout=4.0)
            assert time.monotonic() - started < 4.0
        finally:
            if holder.poll() is None:
                holder.kill()
            if holder.stdout is not None:
                holder.stdout.close()


def test_lock_held_longer_than_timeout_stays_held(
        socket_server_factory: Callable[..., ServerProcess]) -> None:
    server = socket_server_factory(timeout=0.5)  # heartbeat every 0.5 s of silence
    with _locker(server.notify_port, 1.0) as a, _locker(server.lock_port, 1.0) as b:
        assert a.try_lock(KEY)
        generation = a.generation
        deadline = time.monotonic() + 3.0  # six times TIMEOUT_SOCKET_MESSAGE, a idle
        while time.monotonic() < deadline:
            assert not b.try_lock(KEY)
            time.sleep(0.1)
        assert a.is_held(KEY) and a.generation == generation and not a.connection_lost
        assert a.unlock(KEY)
        assert b.try_lock(KEY)


def test_peer_that_stops_answering_loses_its_locks(
        socket_server_factory: Callable[..., ServerProcess]) -> None:
    server = socket_server_factory(timeout=0.5)
    with RawClient(server.lock_port) as silent, _locker(server.lock_port, 1.0) as other:
        assert silent.hello()["ok"]
        assert silent.call("try_lock", key=list(KEY))["result"] is True
        assert not other.try_lock(KEY)
        # `silent` never answers the server's pings: ~ heartbeat + timeout later it is dead.
        assert wait_until(lambda: other.try_lock(KEY), timeout=5.0)
        assert silent.closed_by_peer(timeout=2.0)
    assert wait_until(lambda: "não respondeu ao ping" in server.log())


def test_fifty_clients_never_hold_the_same_key(socket_server_process: ServerProcess) -> None:
    keys = [task_lock_key("fila_teste", i) for i in range(5)]
    holders: dict[tuple[int, int], int] = {}
    guard = threading.Lock()
    violations: list[str] = []
    errors: list[BaseException] = []
    acquired = [0]
    start = threading.Barrier(50)

    def work(index: int) -> None:
        rng = random.Random(index)
        try:
            port = (socket_server_process.notify_port if index % 2
                    else socket_server_process.lock_port)
            with _locker(port, 5.0) as locker:
                locker.ping()
                start.wait(30)
                for _ in range(40):
                    key = rng.choice(keys)
                    if not locker.try_lock(key):
                        continue
                    with guard:
                        if key in holders:
                            violations.append(f"{key}: {holders[key]} e {index}")
                        holders[key] = index
                        acquired[0] += 1
                    time.sleep(rng.uniform(0, 0.003))
                    with guard:
                        holders.pop(key, None)
                    if not locker.unlock(key):
                        violations.append(f"unlock falhou para {index}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[:3]
    assert not violations, violations[:5]
    assert acquired[0] > 50
    # Every record is dropped once the clients leave: only the status query remains.
    assert wait_until(lambda: socket_server_process.status()["clients"] == 1, timeout=10.0)
    assert socket_server_process.status()["locks"] == 0


def test_many_connections_coming_and_going_leave_nothing_behind(
        socket_server_process: ServerProcess) -> None:
    baseline = socket_server_process.status()
    for i in range(150):
        locker = _locker(socket_server_process.lock_port if i % 2
                         else socket_server_process.notify_port)
        assert locker.try_lock((7, i))
        locker.close()
    assert wait_until(lambda: socket_server_process.status()["clients"] == 1, timeout=10.0)
    status = socket_server_process.status()
    assert status["locks"] == 0 and status["lock_owners"] == 0
    # A connection thread ends just after unregistering itself: poll for the count.
    assert wait_until(lambda: socket_server_process.status()["threads"] <= baseline["threads"],
                      timeout=10.0)
