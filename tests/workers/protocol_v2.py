"""A worker of an earlier 2.x release on the socket protocol: it speaks version 2 (no
`idle`: woken by every wake-up), with today's code otherwise (python -m
tests.workers.protocol_v2).  For the mixed-fleet tests of a rolling upgrade."""

from __future__ import annotations

from nsj_queue_lib.engine.socket import protocol

protocol.PROTOCOL_VERSION = 2
protocol.SUPPORTED_VERSIONS = (1, 2)

from tests.workers.scripted import ScriptedWorker  # noqa: E402 (after the version)

if __name__ == "__main__":
    ScriptedWorker().run()
