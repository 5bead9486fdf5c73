"""Fixtures of the socket server tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.fixtures.servers import ServerProcess


@pytest.fixture
def socket_server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start real server subprocesses (on free ports); all are stopped at teardown."""
    started: list[ServerProcess] = []

    def factory(**options: Any) -> ServerProcess:
        server = ServerProcess(tmp_path / f"server-{len(started)}.log", **options)
        started.append(server)
        return server.start()

    yield factory
    for server in started:
        server.kill()


@pytest.fixture
def socket_server_process(socket_server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with token auth, TIMEOUT_SOCKET_MESSAGE=1 s and a 0.2 s due-task check."""
    return socket_server_factory()
