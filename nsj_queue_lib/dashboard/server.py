"""The dashboard's HTTP server (http.server from the standard library).

Read-only unless DASHBOARD_TOKEN is set.  With a token, an operator signs in
once (POST /entrar with the token) and gets an HttpOnly, SameSite=Strict
cookie; every action is a POST carrying, besides that cookie, a CSRF field
rendered only in pages served to a signed-in browser; a POST whose Origin (or,
without one, whose Referer) is another site is refused too.  Both values are HMACs of
the token with a per-process salt (a restart signs everyone out).

Every request must name the dashboard in its Host header (DNS rebinding): the
loopback names, the bind host when it is a specific address, and the names of
DASHBOARD_ALLOWED_HOSTS (comma-separated; ``*.example.com`` for subdomains).  A
bind on 0.0.0.0 or :: does not accept any Host: add the names the dashboard is
reached by.  Others are refused with 421.

HTTP handling is nsj_queue_lib.observability.http_guard's (`DASHBOARD_LIMITS`): timeouts, bounded
request sizes and threads, 400 for a malformed request, clients that leave logged at
DEBUG.  A large payload is cut in the chain page; /payload streams it whole.
"""

from __future__ import annotations

import hashlib
import hmac
import http.cookies
import logging
import re
import secrets
import threading
import time
from typing import Any, Dict, FrozenSet, Iterable, Optional, Set, Tuple
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
from nsj_queue_lib.observability.http_guard import (
    DISCONNECTS,
    GuardedHandler,
    GuardedServer,
    Limits,
)

logger = logging.getLogger(__name__)

COOKIE = "nsjq_painel"
FAILED_LOGIN_DELAY = 1.0  # seconds
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
ANY_ADDRESS = ("", "0.0.0.0", "::", "*")
ALLOWED_HOSTS_ENV = "DASHBOARD_ALLOWED_HOSTS"
DASHBOARD_LIMITS = Limits(read_timeout=10.0, request_deadline=20.0,
                          max_header_bytes=16 * 1024, max_body_bytes=16 * 1024, max_threads=16)
# A Host header: a name or IPv4 address, or an IPv6 address in brackets; optional port.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?")
HOST_WARNINGS = 100  # refused Host names logged at WARNING (each once); then DEBUG
NOTICES = {
    "reenfileirada": "Cadeia reenfileirada: nova tentativa #{novo}.",
    "antecipada": "Próxima tentativa #{novo} antecipada: devida agora.",
    "cancelada": "Tarefa cancelada (tentativa #{novo}).",
    "pausada": "Fila pausada: os workers param de pegar tarefas em até um segundo.",
    "retomada": "Fila retomada.",
    "reentregue": "Entrega reenfileirada: nova tarefa #{novo}.",
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
        return (self.enabled and self.token is not None
                and hmac.compare_digest(given.encode(), self.token.encode()))

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


def host_name(header: str) -> Optional[str]:
    """The name in a Host header (or a configured name): lower case, without port,
    brackets or final dot; None when it is not a host name or address."""
    m = _HOST.fullmatch(header.strip())
    if not m:
        return None
    name = m.group("name").lower()
    if name.startswith("["):
        name = name[1:-1]
    return name.rstrip(".") or None


def _name_of(value: str) -> Optional[str]:
    """host_name() of a configured value or bind host (a bare IPv6 address too)."""
    value = value.strip()
    if value.count(":") > 1 and not value.startswith("["):
        value = f"[{value}]"
    return host_name(value)


def configured_hosts(settings: Settings) -> Tuple[str, ...]:
    """DASHBOARD_ALLOWED_HOSTS (Settings.dashboard_allowed_hosts), as a tuple of names."""
    value = settings.dashboard_allowed_hosts or ""
    return tuple(v.strip() for v in value.split(",") if v.strip())


class AllowedHosts:
    """The names a request's Host header may carry: the loopback names, the bind host
    when it is a specific address and the configured ones (``*.dominio``: its
    subdomains).  ConfigError for a configured value that is not a host name."""

    def __init__(self, bind_host: str, configured: Iterable[str] = ()) -> None:
        names = {"localhost", "127.0.0.1", "::1"}
        suffixes: Set[str] = set()
        if bind_host not in ANY_ADDRESS:
            bound = _name_of(bind_host)
            if bound:
                names.add(bound)
        for item in (i.strip() for i in configured):
            if not item:
                continue
            wildcard = item.startswith("*.")
            name = _name_of(item[2:] if wildcard else item)
            if name is None or (wildcard and "." not in name and name != "localhost"):
                raise ConfigError(f"{ALLOWED_HOSTS_ENV}: nome de host inválido: {item!r} (use "
                                  "nomes ou endereços separados por vírgula, ou *.dominio)")
            (suffixes if wildcard else names).add(name)
        self.names: FrozenSet[str] = frozenset(names)
        self.suffixes: FrozenSet[str] = frozenset(suffixes)

    def allows(self, header: Optional[str]) -> bool:
        name = host_name(header or "")
        if name is None:
            return False
        return name in self.names or any(name.endswith("." + s) for s in self.suffixes)

    def __str__(self) -> str:
        return ", ".join(sorted(self.names) + sorted("*." + s for s in self.suffixes))


class DashboardServer:
    """Serves the pages of `data` on host:port in a daemon thread (or in the caller's).

    `allowed_hosts`: Host names accepted besides the loopback and the bind host (None:
    DASHBOARD_ALLOWED_HOSTS); `limits`: the HTTP bounds (DASHBOARD_LIMITS)."""

    def __init__(self, settings: Settings, data: Optional[DashboardData] = None,
                 host: Optional[str] = None, port: Optional[int] = None,
                 token: Optional[str] = None, allowed_hosts: Optional[Iterable[str]] = None,
                 limits: Optional[Limits] = None) -> None:
        self.settings = settings
        self.host = host or settings.dashboard_bind_host
        self.allowed = AllowedHosts(self.host, configured_hosts(settings)
                                    if allowed_hosts is None else allowed_hosts)
        self.limits = limits or DASHBOARD_LIMITS
        self.data = data or DashboardData(settings)
        self.requested_port = settings.dashboard_port if port is None else port
        self.auth = Auth(token if token is not None else settings.dashboard_token)
        self._httpd: Optional[GuardedServer] = None
        self._thread: Optional[threading.Thread] = None
        self._hosts_warned: set = set()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd else self.requested_port

    def bind(self) -> None:
        """Open the listening socket (ConfigError when the port cannot be bound)."""
        handler = type("Handler", (_Handler,), {"app": self})
        try:
            self._httpd = GuardedServer((self.host, self.requested_port), handler,
                                        self.limits, name="Painel")
        except OSError as exc:
            raise ConfigError(f"DASHBOARD_PORT: não foi possível escutar em {self.host}:"
                              f"{self.requested_port}: {exc}") from exc

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

    def note_refused_host(self, header: str, client: str) -> None:
        """WARNING the first time a Host name is refused (a misconfiguration shows
        at once), DEBUG after that and beyond HOST_WARNINGS names."""
        key = header[:100]
        if key not in self._hosts_warned and len(self._hosts_warned) < HOST_WARNINGS:
            self._hosts_warned.add(key)
            logger.warning("Painel: Host %r recusado (de %s): aceitos %s; outros nomes em "
                           "%s", key, client, self.allowed, ALLOWED_HOSTS_ENV)
        else:
            logger.debug("Painel: Host %r recusado (de %s)", key, client)


class _Handler(GuardedHandler):
    server_version = "nsj_queue_lib-painel"
    log_name = "Painel"
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
        hosts = self.headers.get_all("Host") or []
        if len(hosts) == 1 and self.app.allowed.allows(hosts[0]):
            return True
        self.app.note_refused_host(" ".join(hosts) or "(sem Host)", self.address_string())
        return False

    def _params(self) -> Dict[str, str]:
        query = urlsplit(self.path).query
        return {k: v[0] for k, v in parse_qs(query).items()}

    def _form(self) -> Dict[str, str]:
        # the body was read, within DASHBOARD_LIMITS, before the method ran
        body = self.body.decode("utf-8", "replace")
        return {k: v[0] for k, v in parse_qs(body).items()}

    def _guard(self, handler: Any) -> None:
        try:
            if not self._host_ok():
                self._page(421, "Host não permitido", "<section><p>Este painel não atende pelo "
                           "nome usado no endereço (proteção contra DNS rebinding). Acesse-o "
                           "por um nome permitido ou inclua o nome em "
                           f"{ALLOWED_HOSTS_ENV}.</p></section>")
                return
            handler()
        except DISCONNECTS:
            raise  # the client left: logged at DEBUG by GuardedHandler
        except NotFoundException as exc:
            self._page(404, "Não encontrado", f'<section><p>{pages.e(exc)}</p></section>')
        except (InvalidTaskState, ControlTableMissing, ConfigError) as exc:
            self._page(409, "Operação recusada", f'<section><p>{pages.e(exc)}</p></section>',
                       error=str(exc))
        except DatabaseUnavailable as exc:
            self._page(503, "Banco indisponível", f'<section><p>{pages.e(exc)}</p></section>')
        except Exception as exc:
            from nsj_queue_lib.pubsub.subscribers import SubscriberError  # (lazy: webhooks)

            if isinstance(exc, SubscriberError):  # e.g. a queue without schema 5
                self._page(409, "Operação recusada",
                           f'<section><p>{pages.e(exc)}</p></section>', error=str(exc))
                return
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
                                                    data.dead_letters(table), self._csrf(),
                                                    failures=data.failures(table)),
                       notice or None)
        elif path == "/cadeia":
            table = data.check_queue(p.get("f", ""))
            task_id = _int(p.get("id"))
            self._page(200, f"Tarefa {task_id}",
                       pages.chain_page(table, data.chain(table, task_id), self._csrf()),
                       notice or None)
        elif path == "/webhooks":
            from nsj_queue_lib.dashboard.webhooks_page import webhooks_page

            table = data.check_queue(p.get("f", ""))
            self._page(200, f"Webhooks {table}",
                       webhooks_page(table, data.webhooks(table), self._csrf()),
                       notice or None)
        elif path == "/payload":
            table = data.check_queue(p.get("f", ""))
            self._stream_payload(table, _int(p.get("id")))
        elif path == "/entrar":
            if not self.app.auth.enabled:
                self._page(403, "Somente leitura", "<section><p>Este painel é somente leitura: "
                           "defina DASHBOARD_TOKEN para habilitar ações.</p></section>")
            else:
                self._page(200, "Entrar", pages.login_page())
        else:
            self._page(404, "Não encontrado", "<section><p>Página inexistente.</p></section>")

    def _stream_payload(self, table: str, task_id: int) -> None:
        """The whole payload of a chain as text/plain, read and sent in slices (never
        all of it in memory); the end of the response is the end of the connection."""
        data = self.app.data
        root, length = data.payload_length(table, task_id)
        if length is None:
            raise NotFoundException(f"A tarefa {task_id} não tem payload")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Disposition", f'inline; filename="payload-{root}.txt"')
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "sandbox; default-src 'none'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            for part in data.payload_slices(table, root, length):
                self.wfile.write(part.encode("utf-8"))
        except DISCONNECTS:
            raise
        except Exception as exc:  # the status line is gone: say it in the text itself
            logger.warning("Painel: envio do payload da tarefa %s interrompido: %s", root,
                           exc)
            self.wfile.write(b"\n[payload interrompido: erro ao ler do banco]\n")

    # -- POST ------------------------------------------------------------------------
    def do_POST(self) -> None:
        self._guard(self._post)

    def _refuse(self, reason: str) -> None:
        logger.warning("Painel: ação recusada de %s: %s", self.address_string(), reason)
        self._page(403, "Ação recusada", f"<section><p>{pages.e(reason)}</p></section>",
                   error=reason)

    def _same_origin(self) -> bool:
        """Origin, or without it Referer, names this dashboard (the Host, already one of
        the allowed names); a request with neither (not a browser's form) passes: the
        session cookie and the CSRF field still apply."""
        host = (self.headers.get("Host") or "").strip().lower()
        origin = self.headers.get("Origin")
        if origin is not None:
            return origin != "null" and urlsplit(origin.strip()).netloc.lower() == host
        referer = self.headers.get("Referer")
        if referer is not None:
            return urlsplit(referer.strip()).netloc.lower() == host
        return True

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
            new_id, new_attempt = data.retry(table, _int(form.get("id")), who)
            target = pages.url("/cadeia", f=table, id=_int(form.get("id")),
                               aviso="reenfileirada" if new_attempt else "antecipada",
                               novo=new_id)
        elif op == "cancel":
            done = data.cancel(table, _int(form.get("id")), who)
            target = pages.url("/cadeia", f=table, id=_int(form.get("id")),
                                     aviso="cancelada", novo=done)
        elif op == "redeliver":
            new_id = data.redeliver(table, _int(form.get("id")), who)
            target = pages.url("/webhooks", f=table, aviso="reentregue", novo=new_id)
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

