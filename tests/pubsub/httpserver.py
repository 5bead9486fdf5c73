"""A local HTTP server for webhook tests: records requests, answers as scripted per path."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Sequence
from urllib.parse import urlsplit


@dataclass
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    query: str
    headers: Dict[str, str]
    header_names: List[str]
    body: bytes
    at: float


@dataclass
class Script:
    statuses: List[int] = field(default_factory=lambda: [200])
    delay: float = 0.0
    body: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)
    calls: int = 0


class RecordingServer:
    """ThreadingHTTPServer on 127.0.0.1, random port.

    `script(path, statuses=[500, 200], delay=1.0, body="...")`: the n-th
    request to `path` gets statuses[n] (the last one repeats), after `delay`
    seconds.  Unscripted paths answer 200.
    """

    def __init__(self) -> None:
        self.requests: List[Recorded] = []
        self.scripts: Dict[str, Script] = {}
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       name="test-http")

    def start(self) -> RecordingServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, path: str, statuses: Sequence[int] = (200,), delay: float = 0.0,
               body: Optional[str] = None, headers: Optional[Dict[str, str]] = None) -> None:
        with self.lock:
            self.scripts[path] = Script(list(statuses), delay, body, dict(headers or {}))

    def received(self, path: Optional[str] = None) -> List[Recorded]:
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def _answer(self, path: str) -> tuple:
        with self.lock:
            script = self.scripts.get(path) or Script()
            index = min(script.calls, len(script.statuses) - 1)
            script.calls += 1
            self.scripts.setdefault(path, script)
            return script.statuses[index], script.delay, script.body, script.headers

    def _handler_class(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One send per response (headers + body): no Nagle/delayed-ACK stalls on keep-alive.
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                with server.lock:
                    server.requests.append(Recorded(
                        method=self.command, path=parts.path, query=parts.query,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        header_names=list(self.headers.keys()), body=body,
                        at=time.monotonic()))
                status, delay, text, extra = server._answer(parts.path)
                if delay:
                    time.sleep(delay)
                if text is None:
                    text = f"resposta {status} de {parts.path}"
                data = text.encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        return Handler
