"""The queue server of an earlier 2.x release on the socket protocol: it accepts versions
1 and 2 only (answers `unsupported_version` to a version 3 hello) and wakes every
listener, with today's code otherwise (python -m tests.workers.server_protocol_v2)."""

from __future__ import annotations

import runpy

from nsj_queue_lib.engine.socket import protocol

protocol.PROTOCOL_VERSION = 2
protocol.SUPPORTED_VERSIONS = (1, 2)

if __name__ == "__main__":
    runpy.run_module("nsj_queue_lib.server.server_main", run_name="__main__")
