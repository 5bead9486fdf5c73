"""Blocking waits the worker's first stop signal cuts short (foundation level: the
engines' waits inside the database use it, runtime/signals.py's handler ends them)."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator


class WaitInterrupted(BaseException):
    """A stop signal cut short a blocking wait of the main thread (see `interruptible`).
    A BaseException, so that no `except Exception` on the way swallows it."""


_armed = False  # the main thread is inside an `interruptible()` block


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """A blocking wait (a statement waiting inside the database) that the worker's first
    stop signal ends at once, raising WaitInterrupted here instead of letting the wait
    run out.  Only on the main thread, where signal handlers run; elsewhere a no-op.
    Whatever the block was doing is abandoned mid-way: its caller closes the connection."""
    global _armed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _armed = True
    try:
        yield
    finally:
        _armed = False


def interrupt_wait() -> None:
    """From the stop-signal handler: end the main thread's `interruptible()` wait."""
    global _armed
    if _armed:
        _armed = False
        raise WaitInterrupted()
