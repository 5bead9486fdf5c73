"""How subscription secrets are stored: clear, or encrypted with WEBHOOK_SECRETS_KEY.

Without WEBHOOK_SECRETS_KEY a secret is stored as written (``whsec_...``).  With it,
the column holds ``enc:fernet:<token>``, and so does each header value written by
``subscriber add`` (the `headers` column stays a JSON object: names in clear, values
sealed; a value in clear, as older rows and rows written by hand have, is sent as it
is).  Fernet: AES-128-CBC + HMAC-SHA256, from the `cryptography` package, extra
``webhook-crypto``; a dump of the subscriber table alone reveals no secret.  The
variable takes a comma-separated list of Fernet keys, newest first: new secrets are
encrypted with the first, any of them decrypts (MultiFernet).  Key rotation: put the
new key first, run ``nsj-queue subscriber reencrypt`` (re-encrypts every secret and
header value with the first key, and encrypts those still in clear), then drop the old
key.

Why Fernet rather than a scheme of our own: authenticated encryption with a versioned
token format, reviewed and maintained elsewhere; the cost is an optional dependency
that only operators who ask for encryption install.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, overload

from nsj_queue_lib.exceptions import ConfigError, NsjQueueError

logger = logging.getLogger(__name__)

ENCRYPTED_PREFIX = "enc:fernet:"
EXTRA_HINT = "pip install 'nsj-queue-lib[webhook-crypto]'"


class SecretUnreadable(NsjQueueError):
    """A stored secret cannot be decrypted with the configured keys."""


def _fernet_module() -> Any:
    try:
        from cryptography import fernet
    except ImportError:
        raise ConfigError(
            "WEBHOOK_SECRETS_KEY definida, mas o pacote cryptography não está instalado: "
            f"{EXTRA_HINT}") from None
    return fernet


class SecretBox:
    """Seals and opens stored secrets with the keys of WEBHOOK_SECRETS_KEY (or none)."""

    def __init__(self, key_text: Optional[str]) -> None:
        self._multi: Any = None
        self._first: Any = None
        keys = [k.strip() for k in (key_text or "").split(",") if k.strip()]
        if not keys:
            return
        fernet = _fernet_module()
        parsed: List[Any] = []
        for n, key in enumerate(keys, 1):
            try:
                parsed.append(fernet.Fernet(key.encode("ascii")))
            except (ValueError, UnicodeEncodeError, TypeError):
                raise ConfigError(
                    f"WEBHOOK_SECRETS_KEY inválida: a chave {n} da lista não é uma chave "
                    "Fernet (32 bytes em base64 url-safe; gere com nsj-queue subscriber "
                    "generate-key)") from None
        self._first = parsed[0]
        self._multi = fernet.MultiFernet(parsed)

    @classmethod
    def from_settings(cls, settings: Any) -> SecretBox:
        return cls(getattr(settings, "webhook_secrets_key", None))

    @property
    def encrypts(self) -> bool:
        return self._multi is not None

    @overload
    def seal(self, secret: str) -> str: ...
    @overload
    def seal(self, secret: None) -> None: ...
    def seal(self, secret: Optional[str]) -> Optional[str]:
        """The text to store for `secret` (None stays None)."""
        if secret is None or self._first is None:
            return secret
        return ENCRYPTED_PREFIX + self._first.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, stored: Optional[str], sub_id: Any = "?") -> Optional[str]:
        """The secret of a stored text (None stays None)."""
        if not stored or not stored.startswith(ENCRYPTED_PREFIX):
            return stored or None
        if self._multi is None:
            raise SecretUnreadable(
                f"Assinatura '{sub_id}': o segredo está cifrado e WEBHOOK_SECRETS_KEY não "
                "está definida neste processo")
        fernet = _fernet_module()
        try:
            return self._multi.decrypt(stored[len(ENCRYPTED_PREFIX):].encode("ascii")
                                       ).decode("utf-8")
        except (fernet.InvalidToken, UnicodeError):
            raise SecretUnreadable(
                f"Assinatura '{sub_id}': nenhuma chave de WEBHOOK_SECRETS_KEY decifra o "
                "segredo (chave antiga removida antes do reencrypt?)") from None

    def seal_headers(self, headers: Dict[str, str]) -> Dict[str, str]:
        """`headers` with each value sealed (as they are without keys)."""
        return {name: self.seal(value) for name, value in headers.items()}

    def open_headers(self, headers: Any, sub_id: Any = "?") -> Any:
        """A subscription's `headers` (dict) with the sealed values opened; anything else
        as it is (values in clear, a column that is not an object)."""
        if not isinstance(headers, dict) or not any(
                isinstance(v, str) and v.startswith(ENCRYPTED_PREFIX) for v in headers.values()):
            return headers
        return {name: self.open(value, sub_id) if isinstance(value, str) else value
                for name, value in headers.items()}

    def reseal_headers(self, headers: Any, sub_id: Any = "?") -> Optional[Dict[str, Any]]:
        """`headers` with every text value re-encrypted with the first key (values in
        clear get encrypted); None when there is nothing to seal."""
        if not isinstance(headers, dict) or self._multi is None:
            return None
        sealed = {name: self.seal(self.open(value, sub_id)) if isinstance(value, str) else value
                  for name, value in headers.items()}
        return sealed if any(isinstance(v, str) for v in sealed.values()) else None

    def reseal(self, stored: Optional[str], sub_id: Any = "?") -> Optional[str]:
        """`stored` re-encrypted with the first key (a secret in clear gets encrypted);
        None when there is nothing to seal (no stored text, or no keys)."""
        if not stored or self._multi is None:
            return None
        return self.seal(self.open(stored, sub_id))


def generate_key() -> str:
    """A new Fernet key (needs the webhook-crypto extra)."""
    return _fernet_module().Fernet.generate_key().decode("ascii")


__all__ = ["ENCRYPTED_PREFIX", "SecretBox", "SecretUnreadable", "generate_key"]
