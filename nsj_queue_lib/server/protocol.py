"""Re-export shim: the wire protocol lives in `nsj_queue_lib.engine.socket.protocol`
(shared by the socket client and the server).  This name is the same module object."""

from __future__ import annotations

import sys

from nsj_queue_lib.engine.socket import protocol as _protocol

sys.modules[__name__] = _protocol
