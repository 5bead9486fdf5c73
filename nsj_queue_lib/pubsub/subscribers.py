"""Subscriptions managed by the operator (nsj-queue subscriber ..., QueueAdmin.subscriber_*).

Add, list, enable/disable, remove, rotate a signing secret (the old one keeps signing
beside the new one for an overlap period), re-encrypt the stored secrets after a
WEBHOOK_SECRETS_KEY rotation, read the delivery log of a subscription and redeliver one
delivery.  Secrets are returned only by the call that creates them (to be handed to the
receiver once); listings say whether a subscription signs, never the secret, and mask
header values whose name looks secret.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from nsj_queue_lib.exceptions import InvalidTaskState, NotFoundException, NsjQueueError
from nsj_queue_lib.pubsub.breaker import ENDPOINTS_LISTED
from nsj_queue_lib.pubsub.message import normalize_subscription
from nsj_queue_lib.pubsub.secret_store import ENCRYPTED_PREFIX, SecretBox
from nsj_queue_lib.pubsub.signing import generate_secret, secret_key
from nsj_queue_lib.pubsub.webhook import SUPPORTED_METHODS, build_request
from nsj_queue_lib.pubsub.webhook_store import WebhookFeatures, WebhookStore
from nsj_queue_lib.text import redact_url

logger = logging.getLogger(__name__)

DEFAULT_OVERLAP = 24 * 3600.0  # seconds the previous secret keeps signing after a rotation
MASK = "***"
_SECRET_LOOKING = re.compile(r"auth|token|secret|segredo|senha|pass|key|chave|cookie|sig",
                             re.I)


class SubscriberError(NsjQueueError):
    """An operator's subscription command cannot be done (message says why)."""


def parse_duration(text: str) -> float:
    """'24h', '30m', '90s', '2d' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m:
        raise SubscriberError(f"duração inválida: {text!r} (use por exemplo 24h, 30m, 90s)")
    factor = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return float(m.group(1)) * factor


def parse_headers(pairs: Sequence[str]) -> Dict[str, str]:
    """['K=V', ...] -> {K: V}."""
    out: Dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise SubscriberError(f"header inválido (use NOME=valor): {name.strip() or '?'}")
        out[name.strip()] = value
    return out


def shown_url(url: str) -> str:
    """`url` as listings show it: no user:password, query string or fragment ('?…' marks
    where a query or fragment was; it may carry tokens)."""
    hidden = "?" in url or "#" in url
    return redact_url(url) + ("?…" if hidden else "")


def _json_value(raw: Any) -> Any:
    """A json column's value as Python (drivers give text, bytes or the value)."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return raw


def masked_headers(headers: Any) -> Optional[Dict[str, str]]:
    """Header values whose name looks secret (Authorization, X-Token...) or that are
    stored encrypted replaced by ***."""
    if not isinstance(headers, dict):
        return None if headers is None else {"?": MASK}
    return {k: (MASK if _SECRET_LOOKING.search(str(k)) or str(v).startswith(ENCRYPTED_PREFIX)
                else str(v)) for k, v in headers.items()}


class SubscriberAdmin:
    """Subscription operations on one session (writes join the caller's transaction)."""

    def __init__(self, session: Any, queue_table: str, sub_table: str,
                 settings: Any = None, can_probe: bool = True) -> None:
        """`can_probe`: False when the session is inside the caller's transaction (a
        failed probe would spoil it): the queue is then taken as upgraded."""
        self.session = session
        self.can_probe = can_probe
        self.queue_table = queue_table
        self.sub_table = sub_table
        self.store = WebhookStore(session, queue_table, sub_table)
        self.box = SecretBox(getattr(settings, "webhook_secrets_key", None))
        self._features: Optional[WebhookFeatures] = None

    @property
    def features(self) -> WebhookFeatures:
        if self._features is None:
            if not self.can_probe:
                self._features = WebhookFeatures(True, True, True)
            else:
                self._features = WebhookFeatures.probe(self.store)
        return self._features

    def _need(self, what: str) -> None:
        if not getattr(self.features, what):
            raise SubscriberError(
                "a fila não tem os objetos de webhook da versão 5 do esquema (segredos, "
                "disjuntor, registro de entregas): rode nsj-queue schema upgrade")

    # -- writing ----------------------------------------------------------------------
    def add(self, sub_id: str, processo: str, url: Optional[str] = None,
            method: str = "POST", headers: Optional[Dict[str, str]] = None,
            secret: Optional[str] = None, generate_secret_: bool = False,
            tenant: Optional[int] = None, grupo_empresarial: Optional[str] = None
            ) -> Optional[str]:
        """Create a subscription; return the secret when one was generated (else None)."""
        if not sub_id or not processo:
            raise SubscriberError("informe o id e o processo da assinatura")
        if url is None and (headers or secret or generate_secret_):
            raise SubscriberError("headers e segredo só se aplicam a assinaturas com --url")
        if secret and generate_secret_:
            raise SubscriberError("use --secret ou --generate-secret, não os dois")
        row = {"id": sub_id, "tenant": tenant, "grupo_empresarial": grupo_empresarial,
               "processo": processo, "url": url,
               "http_method": method.upper() if url else None,
               "headers": json.dumps(headers) if headers else None}
        sealed = json.dumps(self.box.seal_headers(headers)) if headers else None
        if url is not None:
            if row["http_method"] not in SUPPORTED_METHODS:
                raise SubscriberError(f"método HTTP não suportado: {method} "
                                      f"(suportados: {', '.join(SUPPORTED_METHODS)})")
            build_request(normalize_subscription(row), "")  # WebhookConfigError if invalid
        new = generate_secret() if generate_secret_ else None
        if secret or new:
            self._need("secrets")
            secret_key(secret or new or "")
        if self.store.subscriber_exists(sub_id):
            raise SubscriberError(f"assinatura '{sub_id}' já existe")
        self.store.subscriber_insert(**dict(row, headers=sealed))
        if secret or new:
            self.store.secret_set(sub_id, self.box.seal(secret or new), None)
        logger.info("Assinatura %s criada (processo %s, %s)", sub_id, processo,
                    "webhook" if url else "método @Subscriber")
        return new

    def set_active(self, sub_id: str, ativo: bool) -> None:
        if self.store.set_active(sub_id, ativo) != 1:
            raise NotFoundException(f"assinatura '{sub_id}' não encontrada")
        logger.info("Assinatura %s %s", sub_id, "ativada" if ativo else "desativada")

    def remove(self, sub_id: str) -> None:
        if self.store.subscriber_delete(sub_id) != 1:
            raise NotFoundException(f"assinatura '{sub_id}' não encontrada")
        logger.info("Assinatura %s removida", sub_id)

    def rotate_secret(self, sub_id: str, overlap_seconds: float = DEFAULT_OVERLAP,
                      secret: Optional[str] = None) -> str:
        """A new secret (generated unless given); the current one keeps signing beside it
        for `overlap_seconds`.  Returns the new secret."""
        self._need("secrets")
        new = secret or generate_secret()
        secret_key(new)
        if self.store.secret_rotate(sub_id, self.box.seal(new), overlap_seconds) != 1:
            raise NotFoundException(f"assinatura '{sub_id}' não encontrada")
        logger.info("Assinatura %s: segredo trocado (o anterior assina junto por %.0f s)",
                    sub_id, overlap_seconds)
        return new

    def reencrypt(self) -> int:
        """Re-encrypt every stored secret and header value with the first
        WEBHOOK_SECRETS_KEY key (those in clear get encrypted); returns how many
        subscriptions were rewritten."""
        self._need("secrets")
        if not self.box.encrypts:
            raise SubscriberError("WEBHOOK_SECRETS_KEY não definida: nada a cifrar")
        rewritten = set()
        for row in self.store.secret_rows():
            current = self.box.reseal(row["segredo"], row["id"])
            previous = self.box.reseal(row["segredo_anterior"], row["id"])
            self.store.secret_set(row["id"], current, previous)
            rewritten.add(row["id"])
        for row in self.store.header_rows():
            sealed = self.box.reseal_headers(_json_value(row["headers"]), row["id"])
            if sealed is not None:
                self.store.headers_set(row["id"], json.dumps(sealed))
                rewritten.add(row["id"])
        logger.info("Segredos e headers de %s assinatura(s) cifrados de novo com a primeira "
                    "chave", len(rewritten))
        return len(rewritten)

    # -- reading ------------------------------------------------------------------------
    def list(self) -> List[Dict[str, Any]]:
        """Subscriptions with masked headers, the URL without credentials and query string
        ('?…' marks where one was), `assinada` and the breaker of their endpoint."""
        from nsj_queue_lib.pubsub.breaker import endpoint_of

        rows = [normalize_subscription(r) for r in self.store.subscriber_list()]
        signing = ({r["id"]: r for r in self.store.subscriber_signing()}
                   if self.features.secrets else {})
        breakers = ({r["endpoint"]: r for r in self.store.endpoint_list(ENDPOINTS_LISTED)}
                    if self.features.breaker else {})
        out = []
        for r in rows:
            sig = signing.get(r["id"], {})
            ep = endpoint_of(r["url"]) if r.get("url") else None
            out.append({**r, "url": shown_url(r["url"]) if r.get("url") else r.get("url"),
                        "headers": masked_headers(r["headers"]),
                        "assinada": bool(sig.get("assinada")),
                        "segredo_anterior_expira": sig.get("segredo_anterior_expira"),
                        "endpoint": ep,
                        "disjuntor": (breakers.get(ep) or {}).get("estado", "fechado")
                        if ep else None})
        return out

    def endpoints(self, limit: int = ENDPOINTS_LISTED) -> List[Dict[str, Any]]:
        """Breaker state of the endpoints that have failed at least once, at most `limit`
        (those not closed first)."""
        return self.store.endpoint_list(limit) if self.features.breaker else []

    def deliveries(self, sub_id: str, limit: int = 20) -> List[Dict[str, Any]]:
        self._need("deliveries")
        rows = self.store.delivery_list(sub_id, limit)
        for r in rows:
            r["sucesso"] = bool(r["sucesso"])
        return rows

    def redeliver(self, delivery_id: int, por: Optional[str] = None) -> Tuple[int, int]:
        """Deliver again the publication of delivery-log row `delivery_id`, as a new first
        attempt of its chain (same webhook-id).  Returns (new task id, tarefa_id)."""
        self._need("deliveries")
        row = self.store.delivery_get(delivery_id)
        if row is None:
            raise NotFoundException(f"entrega {delivery_id} não encontrada no registro")
        who = f" por {por}" if por else ""
        new_id = self.store.task_insert_redelivery(
            row["tarefa_id"], f"Reentrega manual{who} da entrega {delivery_id}")
        if not new_id:
            raise InvalidTaskState(f"a tarefa {row['tarefa_id']} da entrega {delivery_id} não "
                                   "existe mais (apagada pelo purge?)")
        logger.info("Entrega %s (tarefa %s) reenfileirada como tarefa %s%s", delivery_id,
                    row["tarefa_id"], new_id, who)
        return new_id, int(row["tarefa_id"])


__all__ = ["DEFAULT_OVERLAP", "SubscriberAdmin", "SubscriberError", "masked_headers",
           "parse_duration", "parse_headers"]
