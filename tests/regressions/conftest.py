"""Fixtures of the regression tests of the original 1.2.2 defects."""

from __future__ import annotations

import pytest

from nsj_queue_lib.server.core import Server
from tests.server.socket_server_helpers import HOST, TOKEN


@pytest.fixture
def inprocess_socket_server():
    """The socket server in this process (free ports, token, 1 s timeout and heartbeat)."""
    server = Server(lambda: True, host=HOST, notify_port=0, lock_port=0, token=TOKEN,
                    timeout=1.0, check_interval=0.2, accept_wait=0.2)
    server.start()
    yield server
    server.stop()

