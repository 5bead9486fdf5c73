"""1.2.2's socket exceptions, at their module path (2.x raises subclasses of these from
the client/server protocol, see nsj_queue_lib.exceptions.CoordinationError)."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class
from nsj_queue_lib.exceptions import CoordinationError


class GenericSocketException(CoordinationError):
    """A socket error of the client/server mode."""


class MissedSocketException(GenericSocketException):
    """The other side closed the connection."""


class TimeoutSocketException(GenericSocketException):
    """No answer within TIMEOUT_SOCKET_MESSAGE."""


SockerIO = removed_class(__name__, "SockerIO", "o protocolo novo está em "
                         "nsj_queue_lib.server.protocol (docs/protocol.md)")

__all__ = ["GenericSocketException", "MissedSocketException", "SockerIO",
           "TimeoutSocketException"]
