"""A local stand-in for Loki's push API: records accepted pushes, or hangs, or fails."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List


class FakeLoki:
    """mode: "ok" (204, recorded), "hang" (no answer until `release()`; not recorded),
    "error" (500, not recorded) or "old" (400 for entries with structured metadata, as a
    Loki before 2.9 answers; plain entries recorded)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.pushes: List[Dict[str, Any]] = []
        self.headers: List[Dict[str, str]] = []
        self.paths: List[str] = []  # path and query string of each accepted push
        self.attempts = 0
        self.released = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake._lock:
                    fake.attempts += 1
                    mode = fake.mode
                if mode == "hang":
                    fake.released.wait(60)
                    return  # the client gave up long ago; close without answering
                if mode == "error":
                    self.send_response(500)
                    self.end_headers()
                    return
                data = json.loads(body)
                if mode == "old" and any(len(v) > 2 for st in data["streams"]
                                         for v in st["values"]):
                    self.send_response(400)
                    self.end_headers()
                    return
                with fake._lock:
                    fake.pushes.append(data)
                    fake.headers.append(dict(self.headers))
                    fake.paths.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/loki/api/v1/push"

    def set_mode(self, mode: str) -> None:
        with self._lock:
            self.mode = mode
        if mode != "hang":
            self.released.set()

    def lines(self) -> List[str]:
        with self._lock:
            return [v[1] for push in self.pushes for s in push["streams"] for v in s["values"]]

    def entries(self) -> List[list]:
        """Every [ts, line] or [ts, line, metadata] value received."""
        with self._lock:
            return [v for push in self.pushes for s in push["streams"] for v in s["values"]]

    def streams(self) -> List[Dict[str, Any]]:
        with self._lock:
            return [s for push in self.pushes for s in push["streams"]]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
