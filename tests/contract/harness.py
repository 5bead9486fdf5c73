"""The contract suite's harness: the backend of one test queue (`each_backend_queue`, every
backend of tests/fixtures/queue.py BACKENDS) with the sessions, guards and listeners a test
opens, closed at its end (fixture `backend_harness`, tests/contract/conftest.py)."""

from __future__ import annotations

import time
from typing import Any, List

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import Backend
from nsj_queue_lib.engine.select import make_backend
from tests.fixtures.queue import CAPABILITY_SKIP, Queue


class Harness:
    """A queue, its backend and the sessions/guards a test opens (closed at the end)."""

    def __init__(self, q: Queue) -> None:
        self.q = q
        self.settings = q.settings()
        self.backend: Backend = make_backend(self.settings)
        self.sessions: List[DbSession] = []
        self.closers: List[Any] = []

    def session(self) -> DbSession:
        s = DbSession.open(self.settings)
        self.backend.check(s)
        self.sessions.append(s)
        return s

    def guard(self) -> Any:
        s = self.session()
        guard = self.backend.guard(s, TaskRepository(s, self.settings.queue_table))
        self.closers.append(guard)
        return guard

    def require(self, flag: str) -> None:
        """Skip the test unless this backend, checked against the database (check() may
        narrow what it offers), has capability `flag` (see Queue.require)."""
        self.session()
        if not getattr(self.backend.capabilities, flag):
            pytest.skip(f"{CAPABILITY_SKIP} {flag}")

    def close(self) -> None:
        for obj in self.closers:
            obj.close()
        for s in self.sessions:
            s.close()


def listening(h: Harness, backend: Any = None) -> Any:
    """A notifier listening on a session of its own, with any stale wake-up drained."""
    notifier = (backend or h.backend).notifier(h.session())
    h.closers.append(notifier)
    notifier.listen()
    notifier.wait(0.3)
    return notifier


def wait_for(notifier: Any, payload: str, timeout: float = 5.0) -> List[Any]:
    """Everything received until a wake-up with `payload` came (fails at the deadline)."""
    got: List[Any] = []
    deadline = time.monotonic() + timeout
    while not any(n.payload == payload for n in got):
        assert time.monotonic() < deadline, f"nenhum aviso {payload!r}: {got}"
        got += notifier.wait(0.5)
    return got
