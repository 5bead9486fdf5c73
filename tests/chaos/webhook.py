"""A webhook endpoint that fails a fraction of the calls and records every answer."""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple


class FlakyWebhook:
    """HTTP server on 127.0.0.1 (random port): answers 500 to `failure_rate` of the calls.

    The body is the publication (JSON with the task key "k"); `answers` keeps
    (key, status) of every call, in order.
    """

    def __init__(self, failure_rate: float, seed: int = 7) -> None:
        self.failure_rate = failure_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.answers: List[Tuple[Optional[str], int]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                        name="chaos-webhook")

    def start(self) -> FlakyWebhook:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/hook"

    def delivered(self) -> Dict[str, int]:
        """key -> number of 2xx answers sent."""
        counts: Dict[str, int] = {}
        with self._lock:
            for key, status in self.answers:
                if key is not None and 200 <= status < 300:
                    counts[key] = counts.get(key, 0) + 1
        return counts

    def failed(self) -> int:
        with self._lock:
            return sum(1 for _, status in self.answers if status >= 300)

    def _decide(self, key: Optional[str]) -> int:
        with self._lock:
            status = 500 if self._rng.random() < self.failure_rate else 200
            self.answers.append((key, status))
            return status

    def _handler(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    key = json.loads(body.decode("utf-8")).get("k")
                except (ValueError, AttributeError):
                    key = None
                status = server._decide(key)
                data = f"chaos {status}".encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        return Handler
