"""One webhook delivery inside a running task: breaker, rate limit, signature, call, log.

`WebhookDelivery.run(ctx, request, subscription)` is what the webhook worker does for a
subscriber task (nsj_queue_lib.worker_pub_sub_base):

1. circuit breaker of the endpoint (pubsub/breaker.py): open -> TaskDeferred, the task
   is put back without spending an attempt; half-open -> this delivery is the probe, or
   it waits for the one in progress;
2. rate limit of the endpoint (per process), when configured;
3. Standard Webhooks headers (pubsub/signing.py) when the subscription has a secret;
4. the HTTP call (pubsub/webhook.attempt);
5. the outcome: the breaker's state and a delivery-log row.  A success writes them in
   the task's transaction; a failure after it rolled back (TaskContext.after), so that
   they are kept.

Each step needs the queue's schema-5 objects (`WebhookFeatures`); without them it is
skipped and the delivery behaves as before (unsigned, no breaker, no log).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from nsj_queue_lib.exceptions import TaskDeferred
from nsj_queue_lib.pubsub.breaker import (
    PROBE_LEASE_MARGIN,
    PROBE_WAIT,
    RateLimiter,
    counts_against,
    endpoint_of,
    spread,
)
from nsj_queue_lib.pubsub.endpoint_hold import EndpointHold
from nsj_queue_lib.pubsub.secret_store import SecretBox
from nsj_queue_lib.pubsub.signing import delivery_id, secret_key, signature_headers
from nsj_queue_lib.pubsub.webhook import Attempt, WebhookRequest, attempt, safe_url
from nsj_queue_lib.pubsub.webhook_store import WebhookFeatures, WebhookStore
from nsj_queue_lib.text import one_line

if TYPE_CHECKING:
    from nsj_queue_lib.runtime.router import TaskContext

logger = logging.getLogger(__name__)

ERROR_MAX = 500


@dataclasses.dataclass
class _Breaker:
    endpoint: str
    failures: int = 0
    probe: bool = False  # the half-open breaker's probe (holds the lease)
    alone: bool = False  # the call of a closed breaker one failure from opening (lease too)

    @property
    def leased(self) -> bool:
        return self.probe or self.alone


class WebhookDelivery:
    """Delivers subscriber tasks of one worker process (shared by its task threads)."""

    def __init__(self, settings: Any, features: WebhookFeatures,
                 box: Optional[SecretBox] = None,
                 delivers: Optional[Callable[[str], bool]] = None) -> None:
        self.settings = settings
        self.features = features
        self.box = box if box is not None else SecretBox.from_settings(settings)
        self.threshold = int(getattr(settings, "webhook_breaker_failures", 5) or 0)
        self.cooldown = float(getattr(settings, "webhook_breaker_cooldown", 30))
        self.max_cooldown = float(getattr(settings, "webhook_breaker_max_cooldown", 600))
        self.limiter = RateLimiter(float(getattr(settings, "webhook_rate_limit", 0.0) or 0.0))
        self.queue_table = settings.queue_table
        self.hold = EndpointHold(delivers)

    @property
    def breaker_on(self) -> bool:
        return self.features.breaker and self.threshold > 0

    def run(self, ctx: TaskContext, request: WebhookRequest, subscription: Dict[str, Any],
            timeout: float, http_session: Any) -> str:
        """Deliver; return the success message, raise WebhookError / TaskDeferred."""
        settings = ctx.settings or self.settings
        store = WebhookStore.for_settings(ctx.session, settings)
        endpoint = endpoint_of(request.url)
        state = self._check_breaker(ctx, store, endpoint, request, timeout)
        try:
            self._rate_limit(endpoint, request)
            request = self._signed(store, request, subscription, ctx.tarefa)
        except BaseException:
            if state is not None and state.leased:  # no call made: the lease goes back
                ctx.after(lambda repo: WebhookStore.for_settings(
                    repo.session, settings).endpoint_probe_release(endpoint))
            raise
        result = attempt(request, timeout, http_session)
        row = self._log_row(ctx.tarefa, subscription, endpoint, result)
        if result.ok:
            self._record(store, state, result, row)  # in the task's transaction
            return result.message
        ctx.after(lambda repo: self._record(WebhookStore.for_settings(
            repo.session, settings), state, result, row))
        if state is not None and (state.probe or state.failures + 1 >= self.threshold):
            # (a transaction of its own: should it fail, the failure above stays recorded)
            ctx.after(lambda repo: self.hold.put_back(WebhookStore.for_settings(
                repo.session, settings), settings.queue_table, state.endpoint, PROBE_WAIT))
        assert result.error is not None
        raise result.error

    # -- breaker ---------------------------------------------------------------------
    def _check_breaker(self, ctx: TaskContext, store: WebhookStore, endpoint: str,
                       request: WebhookRequest, timeout: float) -> Optional[_Breaker]:
        if not self.breaker_on:
            return None
        row = store.endpoint_get(endpoint)
        if row is None:
            return _Breaker(endpoint)
        state = _Breaker(endpoint, int(row["falhas"] or 0))
        last = self.threshold > 1 and state.failures + 1 >= self.threshold
        if not row["aberto"] and not last:
            return state
        remaining = float(row["restante"] or 0.0)
        shown = one_line(safe_url(request.url), 150)
        if not row["aberto"]:
            # One failure away from opening: that call goes alone (the probe's lease), so
            # that a dead endpoint does not hold every thread of the fleet once more.
            if float(row["sonda_restante"] or 0.0) > 0 or not self._take_probe(
                    ctx, endpoint, timeout + PROBE_LEASE_MARGIN):
                self._hold_others(ctx, endpoint)
                raise TaskDeferred(
                    f"Endpoint {endpoint} com {state.failures} falhas seguidas, em teste por "
                    f"outra entrega: entrega a {shown} adiada sem gastar tentativa",
                    spread(min(PROBE_WAIT, self.cooldown)))
            state.alone = True
            return state
        if remaining > 0:
            self._hold_others(ctx, endpoint)
            raise TaskDeferred(
                f"Endpoint {endpoint} em pausa (disjuntor aberto após {state.failures} falhas "
                f"seguidas): entrega a {shown} adiada {remaining:.0f} s sem gastar tentativa",
                spread(remaining))
        probing = float(row["sonda_restante"] or 0.0)
        if probing > 0 or not self._take_probe(ctx, endpoint, timeout + PROBE_LEASE_MARGIN):
            self._hold_others(ctx, endpoint)
            raise TaskDeferred(
                f"Endpoint {endpoint} sendo sondado por outra entrega: entrega a {shown} "
                "adiada sem gastar tentativa",
                spread(min(PROBE_WAIT, self.cooldown, probing or PROBE_WAIT)))
        logger.info("Endpoint %s: disjuntor meio-aberto, esta entrega é a sonda", endpoint)
        state.probe = True
        return state

    def _take_probe(self, ctx: TaskContext, endpoint: str, lease: float) -> bool:
        """Take the probe's lease and commit it before the call, on a connection of its
        own (the task's transaction is still open; in batch mode, the whole batch's)."""
        from nsj_queue_lib.db.session import DbSession

        settings = ctx.settings or self.settings
        try:
            session = DbSession.open(settings, application_name=(
                f"nsj_queue_lib:{settings.queue_name}:sonda"))
        except Exception as exc:  # not the probe now; the delivery is put back
            logger.warning("Endpoint %s: sonda não iniciada (conexão própria falhou: %s)",
                           endpoint, one_line(str(exc), 300))
            return False
        try:
            with session.transaction():
                return WebhookStore.for_settings(session, settings).endpoint_take_probe(
                    endpoint, lease, max(self.threshold - 1, 1))
        except Exception as exc:
            logger.warning("Endpoint %s: sonda não iniciada (%s)", endpoint,
                           one_line(str(exc), 300))
            return False
        finally:
            session.close()

    def _hold_others(self, ctx: TaskContext, endpoint: str) -> None:
        """Once the task is over, put the endpoint's other waiting deliveries back in one
        transaction (pubsub/endpoint_hold.py), at most every HOLD_EVERY s per endpoint."""
        settings = ctx.settings or self.settings
        if self.hold.due(settings.queue_table, endpoint):
            ctx.after(lambda repo: self.hold.put_back(
                WebhookStore.for_settings(repo.session, settings), settings.queue_table,
                endpoint, PROBE_WAIT))

    def _record(self, store: WebhookStore, state: Optional[_Breaker], result: Attempt,
                row: Optional[dict]) -> None:
        if state is not None and (result.status is not None or result.no_answer):
            # (a request that could not be made says nothing about the endpoint)
            if result.ok or not counts_against(result.status, result.no_answer):
                if state.failures or state.leased:
                    store.endpoint_reset(state.endpoint)
                    logger.info("Endpoint %s: disjuntor fechado (respondeu HTTP %s)",
                                state.endpoint, result.status)
            elif state.probe:
                store.endpoint_probe_failed(state.endpoint, result.message, self.max_cooldown)
                logger.warning("Endpoint %s: a sonda falhou; disjuntor aberto de novo",
                               state.endpoint)
            else:
                store.endpoint_failure(state.endpoint, result.message, self.threshold,
                                       self.cooldown)
                if state.failures + 1 == self.threshold:
                    logger.warning("Endpoint %s: %s falhas seguidas, disjuntor aberto por "
                                   "%.0f s", state.endpoint, self.threshold, self.cooldown)
        elif state is not None and state.leased:
            store.endpoint_probe_release(state.endpoint)
        if row is not None:
            store.delivery_insert(**row)

    # -- rate limit ----------------------------------------------------------------------
    def _rate_limit(self, endpoint: str, request: WebhookRequest) -> None:
        if not self.limiter.enabled:
            return
        wait = self.limiter.reserve(endpoint)
        if wait > 1.0:
            raise TaskDeferred(f"Endpoint {endpoint}: limite de WEBHOOK_RATE_LIMIT entregas "
                               "por segundo atingido; entrega adiada sem gastar tentativa",
                               wait)
        if wait > 0:
            time.sleep(wait)

    # -- signature -----------------------------------------------------------------------
    def _signed(self, store: WebhookStore, request: WebhookRequest,
                subscription: Dict[str, Any], tarefa: dict) -> WebhookRequest:
        if not self.features.secrets:
            return request
        sub_id = subscription.get("id")
        row = store.secrets_get(str(sub_id)) or {}
        keys: List[bytes] = []
        for stored in (row.get("segredo"), row.get("segredo_anterior")):
            secret = self.box.open(stored, sub_id)
            if secret:
                keys.append(secret_key(secret))
        if not keys:
            return request
        root = tarefa.get("id_inicial") or tarefa["id"]
        headers = {k: v for k, v in request.headers.items()
                   if not k.lower().startswith("webhook-")}
        headers.update(signature_headers(keys, delivery_id(self.queue_table, root),
                                         int(time.time()), request.body))
        return dataclasses.replace(request, headers=headers)

    # -- delivery log --------------------------------------------------------------------
    def _log_row(self, tarefa: dict, subscription: Dict[str, Any], endpoint: str,
                 result: Attempt) -> Optional[dict]:
        if not self.features.deliveries:
            return None
        error = None
        if result.error is not None and result.status is None:
            error = one_line(str(result.error), ERROR_MAX)
        return {"tarefa_id": tarefa["id"], "id_inicial": tarefa.get("id_inicial") or tarefa["id"],
                "subscriber_id": str(subscription.get("id")), "endpoint": endpoint,
                "tentativa": int(tarefa.get("tentativa") or 1), "sucesso": result.ok,
                "status_http": result.status,
                "duracao_ms": round(result.seconds * 1000),
                "resposta": result.body_start or None, "erro": error}


__all__ = ["WebhookDelivery"]
