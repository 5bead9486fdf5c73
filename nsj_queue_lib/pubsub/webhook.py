"""HTTP delivery of a pub/sub task to the subscriber's webhook.

`build_request(subscription, publication)` is pure: it turns a row of the
subscriber table (`url`, `http_method`, `headers`) and the publication's payload
text into a `WebhookRequest`, or raises `WebhookConfigError` with a clear
message.  `deliver(request, timeout)` performs the call with `requests`.

Rules:

* Methods: GET, POST, PUT and DELETE (case-insensitive).  GET and DELETE carry
  no body; POST and PUT send the publication payload text verbatim (UTF-8).
* When the body parses as JSON and no subscription header sets Content-Type
  (case-insensitive), `Content-Type: application/json` is added.  A body that is
  not JSON is sent without an added Content-Type.
* Success is a final 2xx status (redirects are followed, as `requests` does).
  Anything else (3xx that was not followed, 4xx, 5xx, timeout, refused
  connection, invalid URL) raises `WebhookError`, whose message keeps the HTTP
  status and the start of the response body, or the network error: the task
  fails and goes through the normal retries and dead letter.
* Nothing here logs header values or bodies; URLs are logged and stored with
  any `user:password@` part removed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Dict, Mapping, Optional
from urllib.parse import urlsplit

from nsj_queue_lib.exceptions import NsjQueueError
from nsj_queue_lib.text import one_line, redact_url, redact_urls_in_text, truncate

logger = logging.getLogger(__name__)

SUPPORTED_METHODS = ("GET", "POST", "PUT", "DELETE")
METHODS_WITH_BODY = ("POST", "PUT")
JSON_CONTENT_TYPE = "application/json"
BODY_PREVIEW = 200  # characters of the response body kept in the task message
LOG_PREVIEW = 512  # characters of the response body kept in the delivery log
URL_PREVIEW = 150  # characters of the URL kept in the task message (fits the 500-char column)
_FULL_READ_LIMIT = 1 << 20  # responses up to this size are read whole (connection reused)
_PARTIAL_READ = 4096


class WebhookConfigError(NsjQueueError):
    """The subscription cannot be delivered as a webhook (url, method or headers invalid)."""


class WebhookError(NsjQueueError):
    """A webhook call failed: non-2xx status, timeout or network error.

    `status` is the HTTP status (None for network errors) and `body_start` the
    beginning of the response body ("" when there was no response).
    """

    def __init__(self, message: str, *, method: str, url: str,
                 status: Optional[int] = None, body_start: str = "") -> None:
        super().__init__(message)
        self.method = method
        self.url = url
        self.status = status
        self.body_start = body_start


@dataclasses.dataclass(frozen=True)
class WebhookRequest:
    """What will be sent: method, url, headers and the body (None for GET/DELETE)."""

    method: str
    url: str
    headers: Dict[str, str]
    body: Optional[bytes] = None

    def __repr__(self) -> str:  # never show header values or the body
        return (f"WebhookRequest(method={self.method!r}, url={safe_url(self.url)!r}, "
                f"headers={sorted(self.headers)!r}, body_bytes="
                f"{None if self.body is None else len(self.body)})")


def safe_url(url: str) -> str:
    """`url` as shown in logs and messages (see nsj_queue_lib.text.redact_url)."""
    return redact_url(url)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _headers(raw: Any, sub_id: Any) -> Dict[str, str]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise WebhookConfigError(
                f"Assinatura '{sub_id}': a coluna headers não é um JSON válido.") from exc
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise WebhookConfigError(
            f"Assinatura '{sub_id}': a coluna headers deve ser um objeto JSON "
            f"({{\"Nome\": \"valor\"}}), não {type(raw).__name__}.")
    out: Dict[str, str] = {}
    for name, value in raw.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else (
            json.dumps(value) if isinstance(value, (dict, list)) else str(value))
        if any(c in str(name) + text for c in "\r\n"):
            raise WebhookConfigError(
                f"Assinatura '{sub_id}': o header '{name}' contém quebra de linha.")
        out[str(name)] = text
    return out


def build_request(subscription: Mapping[str, Any], publication: Optional[str]) -> WebhookRequest:
    """The HTTP request for one subscriber task (pure: no I/O).

    `subscription` is the subscriber row (`id`, `url`, `http_method`, `headers`)
    and `publication` the publication's payload text as stored in the queue.
    """
    sub_id = subscription.get("id")
    url = (subscription.get("url") or "").strip()
    if not url:
        raise WebhookConfigError(f"Assinatura '{sub_id}' sem url configurada para o webhook.")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # ("Invalid IPv6 URL": an unclosed '[')
        raise WebhookConfigError(
            f"Assinatura '{sub_id}': url do webhook inválida ({safe_url(url)}).") from exc
    if scheme not in ("http", "https"):
        raise WebhookConfigError(
            f"Assinatura '{sub_id}': url do webhook deve começar por http:// ou https:// "
            f"({safe_url(url)}).")
    method = (subscription.get("http_method") or "").strip().upper()
    if not method:
        raise WebhookConfigError(
            f"Assinatura '{sub_id}' sem http_method configurado para o webhook "
            f"(suportados: {', '.join(SUPPORTED_METHODS)}).")
    if method not in SUPPORTED_METHODS:
        raise WebhookConfigError(
            f"Assinatura '{sub_id}': método HTTP não suportado: {method} "
            f"(suportados: {', '.join(SUPPORTED_METHODS)}).")
    headers = _headers(subscription.get("headers"), sub_id)
    body: Optional[bytes] = None
    if method in METHODS_WITH_BODY:
        text = publication if publication is not None else ""
        body = text.encode("utf-8")
        has_content_type = any(k.lower() == "content-type" for k in headers)
        if not has_content_type and text and _is_json(text):
            headers["Content-Type"] = JSON_CONTENT_TYPE
    return WebhookRequest(method=method, url=url, headers=headers, body=body)


def _read_body_start(response: Any, limit: int = BODY_PREVIEW) -> str:
    """Start of the response body, reading a large or unsized body only partly."""
    length = response.headers.get("Content-Length")
    try:
        small = length is not None and int(length) <= _FULL_READ_LIMIT
    except ValueError:
        small = False
    try:
        if small:
            data = response.content
        else:
            data = response.raw.read(_PARTIAL_READ, decode_content=True) or b""
    except Exception as exc:  # the status is what matters; the body is informative
        return f"<corpo ilegível: {type(exc).__name__}>"
    encoding = response.encoding or "utf-8"
    try:
        text = data[: limit * 4].decode(encoding, errors="replace")
    except LookupError:
        text = data[: limit * 4].decode("utf-8", errors="replace")
    return one_line(text, limit)


def _network_error_text(exc: BaseException) -> str:
    """A short description of a requests/urllib3 error (the innermost reason)."""
    reason: Any = exc
    for _ in range(4):
        inner = getattr(reason, "reason", None)
        if inner is None and reason.args and isinstance(reason.args[0], BaseException):
            inner = reason.args[0]
        if inner is None or inner is reason:
            break
        reason = inner
    text = str(reason).strip() or type(reason).__name__
    # urllib3 prefixes "<connection object at 0x...>: "; keep what follows.
    if ">: " in text:
        text = text.split(">: ", 1)[1]
    # Some errors quote the whole URL (InvalidURL: "Failed to parse: http://u:p@h/x?k=v"):
    # credentials and query string never reach the task's message or a log line.
    return one_line(redact_urls_in_text(text), 200)


ENV_CACHE_MAX = 256  # hosts whose environment settings a session remembers


def new_session() -> Any:
    """A `requests.Session` for one task thread's deliveries (keep-alive connections are
    reused across its tasks).  It never keeps cookies (one session serves every
    subscriber), and it reads the environment (HTTP(S)_PROXY, NO_PROXY, the CA bundle
    variables) once per host instead of on every request, where requests spends about
    a third of its own CPU time per call: a change of those variables reaches a
    running worker only after a restart."""
    import http.cookiejar

    import requests

    class _Session(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
            self._env: Dict[tuple, Dict[str, Any]] = {}

        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any,
                                       verify: Any, cert: Any) -> Any:
            if proxies:  # explicit proxies: nothing to remember
                return super().merge_environment_settings(url, proxies, stream, verify, cert)
            parts = urlsplit(url)
            key = (parts.scheme, parts.netloc, stream, verify, cert)
            found: Any = self._env.get(key)
            if found is None:
                if len(self._env) >= ENV_CACHE_MAX:
                    self._env.clear()
                found = super().merge_environment_settings(url, proxies, stream, verify, cert)
                self._env[key] = found
            return dict(found, proxies=dict(found["proxies"]))

    return _Session()


@dataclasses.dataclass
class Attempt:
    """One call's outcome: `status` (None without an answer), the start of the answer
    (LOG_PREVIEW characters, on one line), the duration, and `error` when it failed."""

    status: Optional[int]
    body_start: str
    seconds: float
    message: str = ""
    error: Optional[WebhookError] = None
    no_answer: bool = False  # timeout or connection failure (not an invalid request)

    @property
    def ok(self) -> bool:
        return self.error is None


def attempt(request: WebhookRequest, timeout: float, session: Any = None) -> Attempt:
    """Perform the call and describe it (never raises WebhookError: see `error`)."""
    import requests

    sender = session if session is not None else requests
    shown = one_line(safe_url(request.url), URL_PREVIEW)
    started = time.monotonic()
    try:
        response = sender.request(request.method, request.url, headers=request.headers,
                                  data=request.body, timeout=timeout, stream=True,
                                  allow_redirects=False)
    except requests.Timeout as exc:
        logger.warning("Webhook %s %s: tempo esgotado (%.3g s)", request.method, shown, timeout)
        error = WebhookError(
            f"Webhook {request.method} {shown}: tempo esgotado após {timeout:g} s "
            f"(timeout): {_network_error_text(exc)}", method=request.method, url=shown)
        error.__cause__ = exc
        return Attempt(None, "", time.monotonic() - started, str(error), error, True)
    except requests.ConnectionError as exc:
        logger.warning("Webhook %s %s: falha de conexão", request.method, shown)
        error = WebhookError(
            f"Webhook {request.method} {shown}: falha de conexão: {_network_error_text(exc)}",
            method=request.method, url=shown)
        error.__cause__ = exc
        return Attempt(None, "", time.monotonic() - started, str(error), error, True)
    except requests.RequestException as exc:
        logger.warning("Webhook %s %s: requisição inválida", request.method, shown)
        error = WebhookError(
            f"Webhook {request.method} {shown}: requisição inválida: "
            f"{type(exc).__name__}: {_network_error_text(exc)}",
            method=request.method, url=shown)
        error.__cause__ = exc
        return Attempt(None, "", time.monotonic() - started, str(error), error)
    try:
        status = response.status_code
        body_log = _read_body_start(response, LOG_PREVIEW)
    finally:
        response.close()
    elapsed = time.monotonic() - started
    body_start = truncate(body_log, BODY_PREVIEW)
    if 200 <= status < 300:
        logger.info("Webhook %s %s: HTTP %s em %.3f s", request.method, shown, status, elapsed)
        return Attempt(status, body_log, elapsed,
                       f"Webhook disparado com sucesso. Método HTTP: {request.method}. "
                       f"URL: {shown}. Status Resposta: {status}. Resposta: {body_start}")
    logger.warning("Webhook %s %s: HTTP %s em %.3f s", request.method, shown, status, elapsed)
    error = WebhookError(
        f"Webhook {request.method} {shown} respondeu HTTP {status}. Resposta: {body_start}",
        method=request.method, url=shown, status=status, body_start=body_start)
    return Attempt(status, body_log, elapsed, str(error), error)


def deliver(request: WebhookRequest, timeout: float, session: Any = None) -> str:
    """Perform the call; return the success message or raise WebhookError."""
    result = attempt(request, timeout, session)
    if result.error is not None:
        raise result.error
    return result.message


__all__ = [
    "SUPPORTED_METHODS",
    "Attempt",
    "WebhookConfigError",
    "WebhookError",
    "WebhookRequest",
    "attempt",
    "build_request",
    "deliver",
    "new_session",
    "safe_url",
]
