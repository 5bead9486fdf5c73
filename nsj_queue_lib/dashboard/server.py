"""The dashboard's HTTP server (http.server from the standard library).

Read-only unless DASHBOARD_TOKEN is set.  With a token, an operator signs in
once (POST /entrar with the token) and gets an HttpOnly, SameSite=Strict
cookie; every action is a POST carrying, besides that cookie, a CSRF field
rendered only in pages served to a signed-in browser; a POST whose Origin is
another site is refused too.  Both values are HMACs of the token with a
per-process salt (a restart signs everyone out).  A server bound to the
loopback also refuses Host headers that are not loopback names (DNS
rebinding).
"""

from __future__ import annotations

import hashlib
import hmac
import http.cookies
import logging
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional
from urllib.parse import parse_qs, urlsplit

from nsj_queue_lib.config import Settings
from nsj_queue_lib.dashboard import pages
from nsj_queue_lib.dashboard.data import DashboardData
from nsj_queue_lib.exceptions import (
    ConfigError,
    ControlTableMissing,
    DatabaseUnavailable,
    InvalidTaskState,
    NotFoundException,
)

logger = logging.getLogger(__name__)

COOKIE = "nsjq_painel"
FAILED_LOGIN_DELAY = 1.0  # seconds
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
NOTICES = {
    "reenfileirada": "Cadeia reenfileirada: nova tentativa #{novo}.",
    "cancelada": "Tarefa cancelada (tentativa #{novo}).",
    "pausada": "Fila pausada: os workers param de pegar tarefas em até um segundo.",
    "retomada": "Fila retomada.",
    "entrou": "Ações habilitadas neste navegador.",
}
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class Auth:
    """Token check, session cookie and CSRF value (None token: read-only)."""

    def __init__(self, token: Optional[str]) -> None:
        self.token = token
        self._salt = secrets.token_bytes(16)

    @property
    def enabled(self) -> bool:
        return bool(self.token)

    def _mac(self, purpose: str) -> str:
        assert self.token
        return hmac.new(self.token.encode(), self._salt + purpose.encode(),
                        hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return self.enabled and hmac.compare_digest(given.encode(), self.token.encode())

    def session_value(self) -> str:
        return self._mac("sessao")

    def session_ok(self, cookie_header: Optional[str]) -> bool:
        if not self.enabled or not cookie_header:
            return False
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(cookie_header)
        except http.cookies.CookieError:
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value, self.session_value())

    def csrf_value(self) -> str:
        return self._mac("csrf")

    def csrf_ok(self, given: str) -> bool:
        return self.enabled and hmac.compare_digest(given.encode(), self.csrf_value().encode())


class DashboardServer:
    """Serves the pages of `data` on host:port in a daemon thread (or in the caller's)."""

    def __init__(self, settings: Settings, data: Optional[DashboardData] = None,
                 host: Optional[str] = None, port: Optional[int] = None,
                 token: Optional[str] = None) -> None:
        self.settings = settings
        self.data = data or DashboardData(settings)
        self.host = host or settings.dashboard_bind_host
        self.requested_port = settings.dashboard_port if port is None else port
        self.auth = Auth(token if token is not None else settings.dashboard_token)
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd else self.requested_port

    def bind(self) -> None:
        """Open the listening socket (ConfigError when the port cannot be bound)."""
        handler = type("Handler", (_Handler,), {"app": self})
        try:
            self._httpd = ThreadingHTTPServer((self.host, self.requested_port), handler)
        except OSError as exc:
            raise ConfigError(f"DASHBOARD_PORT: não foi possível escutar em {self.host}:"
                              f"{self.requested_port}: {exc}") from exc
        self._httpd.daemon_threads = True

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()` (or KeyboardInterrupt)."""
        assert self._httpd is not None
        self._httpd.serve_forever(poll_interval=0.5)

    def start(self) -> None:
        """Bind and serve in a daemon thread (tests, embedding in an application)."""
        self.bind()
        self._thread = threading.Thread(target=self.serve_forever, name="dashboard_http",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, close the socket and the database session."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        self.data.close()

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK_NAMES


class _Handler(BaseHTTPRequestHandler):
    server_version = "nsj_queue_lib-painel"
    app: DashboardServer

    # -- plumbing ------------------------------------------------------------------
    def _send(self, code: int, body: str, headers: Optional[Dict[str, str]] = None) -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _redirect(self, location: str, headers: Optional[Dict[str, str]] = None) -> None:
        self._send(303, "", {"Location": location, **(headers or {})})

    def _page(self, code: int, title: str, body: str, notice: Optional[str] = None,
              error: Optional[str] = None) -> None:
        self._send(code, pages.layout(title, body, logged_in=self._signed_in(),
                                      actions_enabled=self.app.auth.enabled, notice=notice,
                                      error=error))

    def _signed_in(self) -> bool:
        return self.app.auth.session_ok(self.headers.get("Cookie"))

    def _csrf(self) -> Optional[str]:
        return self.app.auth.csrf_value() if self._signed_in() else None

    def _host_ok(self) -> bool:
        if not self.app.loopback_only:
            return True
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOOPBACK_NAMES

    def _params(self) -> Dict[str, str]:
        query = urlsplit(self.path).query
        return {k: v[0] for k, v in parse_qs(query).items()}

    def _form(self) -> Dict[str, str]:
        length = min(int(self.headers.get("Content-Length") or 0), 64 * 1024)
        body = self.rfile.read(length).decode("utf-8", "replace")
        return {k: v[0] for k, v in parse_qs(body).items()}

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("Painel: %s - %s", self.address_string(), format % args)

    def _guard(self, handler: Any) -> None:
        try:
            if not self._host_ok():
                self._send(421, "Host não permitido")
                return
            handler()
        except NotFoundException as exc:
            self._page(404, "Não encontrado", f'<section><p>{pages.e(exc)}</p></section>')
        except (InvalidTaskState, ControlTableMissing, ConfigError) as exc:
            self._page(409, "Operação recusada", f'<section><p>{pages.e(exc)}</p></section>',
                       error=str(exc))
        except DatabaseUnavailable as exc:
            self._page(503, "Banco indisponível", f'<section><p>{pages.e(exc)}</p></section>')
        except Exception as exc:
            logger.exception("Painel: erro em %s %s", self.command, urlsplit(self.path).path)
            self._page(500, "Erro", f"<section><p>Erro interno: {pages.e(type(exc).__name__)}"
                       "</p></section>")

    # -- GET -------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._guard(self._get)

    def do_HEAD(self) -> None:
        self._guard(self._get)

    def _get(self) -> None:
        path = urlsplit(self.path).path
        p = self._params()
        notice = NOTICES.get(p.get("aviso", ""), "").format(novo=pages.e(p.get("novo", "")))
        data = self.app.data
        if path == "/":
            summaries, errors = [], {}
            for table in data.queues(refresh=True):
                try:
                    summaries.append(data.summary(table))
                except DatabaseUnavailable:
                    raise
                except Exception as exc:  # a table we cannot read: say so, show the rest
                    errors[table] = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
            self._page(200, "Visão geral", pages.overview(summaries, errors), notice or None)
        elif path == "/fila":
            table = data.check_queue(p.get("f", ""))
            self._page(200, table, pages.queue_page(data.summary(table),
                                                    data.dead_letters(table), self._csrf()),
                       notice or None)
        elif path == "/cadeia":
            table = data.check_queue(p.get("f", ""))
            task_id = _int(p.get("id"))
            self._page(200, f"Tarefa {task_id}",
                       pages.chain_page(table, data.chain(table, task_id), self._csrf()),
                       notice or None)
        elif path == "/entrar":
            if not self.app.auth.enabled:
                self._page(403, "Somente leitura", "<section><p>Este painel é somente leitura: "
                           "defina DASHBOARD_TOKEN para habilitar ações.</p></section>")
            else:
                self._page(200, "Entrar", pages.login_page())
        else:
            self._page(404, "Não encontrado", "<section><p>Página inexistente.</p></section>")

    # -- POST ------------------------------------------------------------------------
    def do_POST(self) -> None:
        self._guard(self._post)

    def _refuse(self, reason: str) -> None:
        logger.warning("Painel: ação recusada de %s: %s", self.address_string(), reason)
        self._page(403, "Ação recusada", f"<section><p>{pages.e(reason)}</p></section>",
                   error=reason)

    def _same_origin(self) -> bool:
        origin = self.headers.get("Origin")
        if not origin or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == (self.headers.get("Host") or "")

    def _post(self) -> None:
        path = urlsplit(self.path).path
        auth = self.app.auth
        if not auth.enabled:
            self._refuse("Painel somente leitura: defina DASHBOARD_TOKEN para habilitar ações.")
            return
        if not self._same_origin():
            self._refuse("Origem da requisição diferente do painel.")
            return
        form = self._form()
        if path == "/entrar":
            if auth.token_ok(form.get("token", "")):
                cookie = (f"{COOKIE}={auth.session_value()}; HttpOnly; SameSite=Strict; "
                          "Path=/")
                self._redirect("/?aviso=entrou", {"Set-Cookie": cookie})
            else:
                time.sleep(FAILED_LOGIN_DELAY)  # slows guessing (one thread per request)
                self._page(403, "Entrar", pages.login_page(failed=True))
            return
        if path != "/acao":
            self._page(404, "Não encontrado", "<section><p>Ação inexistente.</p></section>")
            return
        if not self._signed_in() or not auth.csrf_ok(form.get("csrf", "")):
            self._refuse("Token de ação ausente ou inválido.")
            return
        self._act(form)

    def _act(self, form: Dict[str, str]) -> None:
        data = self.app.data
        table = data.check_queue(form.get("f", ""))
        op = form.get("op")
        who = f"painel@{self.client_address[0]}"
        if op == "retry":
            new_id = data.retry(table, _int(form.get("id")), who)
            target = pages.url("/cadeia", f=table, id=_int(form.get("id")),
                                     aviso="reenfileirada", novo=new_id)
        elif op == "cancel":
            done = data.cancel(table, _int(form.get("id")), who)
            target = pages.url("/cadeia", f=table, id=_int(form.get("id")),
                                     aviso="cancelada", novo=done)
        elif op == "pause":
            data.pause(table, who)
            target = pages.url("/fila", f=table, aviso="pausada")
        elif op == "resume":
            data.resume(table, who)
            target = pages.url("/fila", f=table, aviso="retomada")
        else:
            raise NotFoundException(f"Ação desconhecida: {op}")
        logger.info("Painel: %s em %s por %s", op, table, who)
        self._redirect(target)


def _int(text: Optional[str]) -> int:
    try:
        return int(text or "")
    except ValueError:
        raise NotFoundException(f"Id de tarefa inválido: {text!r}") from None

