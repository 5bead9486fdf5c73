"""A local stand-in for Loki's push API: records accepted pushes, or hangs, or fails
(on the shared LocalHttpServer of tests/fixtures/http.py)."""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, List, Optional

from tests.fixtures.http import Answer, LocalHttpServer, Recorded


class FakeLoki(LocalHttpServer):
    """mode: "ok" (204, recorded), "hang" (no answer until `release()`; not recorded),
    "error" (500, not recorded) or "old" (400 for entries with structured metadata, as a
    Loki before 2.9 answers; plain entries recorded)."""

    thread_name = "fake-loki"

    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode
        self.pushes: List[Dict[str, Any]] = []
        self.headers: List[Dict[str, str]] = []  # as sent (original header names)
        self.paths: List[str] = []  # path and query string of each accepted push
        self.attempts = 0
        self.released = threading.Event()
        self.start()

    def answer(self, request: Recorded) -> Optional[Answer]:
        with self.lock:
            self.attempts += 1
            mode = self.mode
        if mode == "hang":
            self.released.wait(60)
            return None  # the client gave up long ago; close without answering
        if mode == "error":
            return 500, 0.0, "", {}
        data = json.loads(request.body)
        if mode == "old" and any(len(v) > 2 for st in data["streams"] for v in st["values"]):
            return 400, 0.0, "", {}
        with self.lock:
            self.pushes.append(data)
            self.headers.append({n: request.headers[n.lower()] for n in request.header_names})
            self.paths.append(request.path + (f"?{request.query}" if request.query else ""))
        return 204, 0.0, "", {}

    @property
    def url(self) -> str:
        return self.base_url + "/loki/api/v1/push"

    def set_mode(self, mode: str) -> None:
        with self.lock:
            self.mode = mode
        if mode != "hang":
            self.released.set()

    def lines(self) -> List[str]:
        with self.lock:
            return [v[1] for push in self.pushes for s in push["streams"] for v in s["values"]]

    def entries(self) -> List[list]:
        """Every [ts, line] or [ts, line, metadata] value received."""
        with self.lock:
            return [v for push in self.pushes for s in push["streams"] for v in s["values"]]

    def streams(self) -> List[Dict[str, Any]]:
        with self.lock:
            return [s for push in self.pushes for s in push["streams"]]

    def close(self) -> None:
        self.released.set()
        super().close()
