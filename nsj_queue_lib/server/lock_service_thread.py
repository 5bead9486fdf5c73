"""1.2.2's module path of the accept loop, kept importable: it lives in
nsj_queue_lib.server.accept_loop (`AcceptThread`, 1.2.2's `LockServiceThread`)."""

from __future__ import annotations

from nsj_queue_lib.server.accept_loop import AcceptThread, LockServiceThread

__all__ = ["AcceptThread", "LockServiceThread"]
