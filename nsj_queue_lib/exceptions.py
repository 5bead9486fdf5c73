"""Exception hierarchy of nsj_queue_lib."""

from __future__ import annotations


class NsjQueueError(Exception):
    """Base of every error raised by nsj_queue_lib."""


class ConfigError(NsjQueueError):
    """A setting is missing or invalid."""


class DatabaseUnavailable(NsjQueueError):
    """The database connection was lost or could not be opened."""


class DatabaseRefused(DatabaseUnavailable):
    """The server answered but refused the configured access: authentication failed,
    unknown role, unknown database (PostgreSQL 28P01/28000/3D000, MySQL 1045/1698/
    1044/1049).  A configuration error at start; later (a password rotated under a
    running worker) it is retried like any lost connection."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class CoordinationError(NsjQueueError):
    """The notify/lock service (socket server) is unavailable or misbehaved."""


class ServerFull(CoordinationError):
    """The queue server answered a valid hello with "no room for more clients": it is
    alive and serving others."""


class ProtocolError(CoordinationError):
    """A malformed frame or an unexpected message on the socket protocol."""


class NotFoundException(NsjQueueError):
    """A task was not found."""


class SubscriberNotRegistered(NsjQueueError):
    """A pub/sub task names a subscriber with no handler in the worker."""


class InvalidTaskState(NsjQueueError):
    """An operator's command does not apply to the task in its current state."""


class ControlTableMissing(NsjQueueError):
    """The queue has no control table (pause/resume): its schema predates it."""


class LegacyWorkersSeen(InvalidTaskState):
    """`compat off` refused: signs of nsj-queue-lib 1.2.2 workers on the queue."""


class TaskDeferred(NsjQueueError):
    """The task cannot run now and is put back, due in `delay` seconds, without spending
    an attempt (a webhook endpoint whose circuit breaker is open)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = max(0.0, float(delay))


class FeatureUnavailable(NsjQueueError):
    """A feature this queue cannot offer in its current mode (mixed fleet with 1.2.2
    workers, a backend without what it needs); the message says why and what to do."""
