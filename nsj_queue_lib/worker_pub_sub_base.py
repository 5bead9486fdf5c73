"""Pub/sub workers: one handler per subscriber id.

A publication (a row inserted by `QueueClient.insert_task_pub_sub`) is
replaced, in its own transaction, by one task per active subscriber of its
`processo` (see `nsj_queue_lib.pubsub.fanout`).  Each of those tasks lives its
own life (retries, dead letter) and runs the handler registered for its
subscriber id::

    class MeuWorker(WorkerPubSubBase):
        @Subscriber("indexador")
        def indexar(self, payload, subscription, tarefa, bd_conn):
            ...
            return "indexado"

        @DeadSubscriber("indexador")
        def indexar_morta(self, payload, subscription, tarefa, bd_conn):
            return "registrado para análise"

A handler may take a fifth parameter, `multi_db_conn`; it receives it only if
it declares it.  What it returns is stored in `mensagem`; raising fails the
attempt.

Handler payload (compatible with code written for the original library)::

    payload = {"publication": <publication>, "subscription": <subscription>}

* `publication` is the publication's payload **parsed** when its text is a
  JSON object or array (a `dict` / `list` from the standard `json` module:
  strings that look like dates or UUIDs stay strings); any other text, or a
  JSON scalar, is given as the original string.  The original library gave
  the raw JSON string here (double encoding); code that did
  `json.loads(payload["publication"])` must drop that call.  The exact text
  is always `tarefa["payload"]`.
* `subscription` (also the second argument) is the subscriber row read from
  the subscriber table when the task runs: id, tenant, grupo_empresarial,
  processo, url, http_method, headers (dict), ativo (bool), created_at
  (timezone-aware datetime).

Registrations belong to the class that declares them and are inherited by its
subclasses; two worker classes in one process never see each other's
handlers.  A subscriber id without a handler fails with
`SubscriberNotRegistered` naming it.  A dead-letter task whose subscriber has
no `@DeadSubscriber` handler falls back to `WorkerBase.execute_dead`.

`@SubscriberWebhook("id")` on the class delivers that subscriber's tasks as
HTTP calls (see `nsj_queue_lib.pubsub.webhook`), with no handler code.
"""

from __future__ import annotations

import logging
import threading
from types import MappingProxyType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    FrozenSet,
    Mapping,
    Optional,
    Set,
    TypeVar,
    cast,
)

from nsj_queue_lib.config import Settings, default_subscriber_table
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable, SubscriberNotRegistered
from nsj_queue_lib.pubsub.message import (
    NotASubscriberTask,
    SubscriptionNotFound,
    handler_payload,
    normalize_subscription,
    unwrap_legacy_envelope,
)
from nsj_queue_lib.worker_base import WorkerBase, accepts_extra_arg

if TYPE_CHECKING:
    from nsj_queue_lib.db.session import DbSession
    from nsj_queue_lib.runtime.router import TaskContext

logger = logging.getLogger(__name__)

_SUB_MARK = "_nsjq_subscriber_ids"
_DEAD_MARK = "_nsjq_dead_subscriber_ids"
_HANDLER_ARGS = 4  # payload, subscription, tarefa, bd_conn
DEFAULT_WEBHOOK_TIMEOUT = 20.0

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def _check_id(subscriber_id: Any, what: str) -> str:
    if not isinstance(subscriber_id, str) or not subscriber_id.strip():
        raise TypeError(f"{what} espera o id do assinante (str não vazia), "
                        f"recebeu {subscriber_id!r}")
    return subscriber_id


def _mark(func: Any, attr: str, subscriber_id: str, what: str) -> Any:
    target = func.__func__ if isinstance(func, (staticmethod, classmethod)) else func
    if not callable(target):
        raise TypeError(f"@{what}('{subscriber_id}') deve decorar um método")
    ids = getattr(target, attr, ())
    setattr(target, attr, (*ids, subscriber_id))
    return func


class Subscriber:
    """Method decorator: `@Subscriber("id")` makes the method the handler of subscriber `id`.

    The registration belongs to the `WorkerPubSubBase` subclass whose body
    declares the method.  Stacking several `@Subscriber` on one method
    registers it for several ids.
    """

    def __init__(self, subscriber_id: str) -> None:
        self.subscriber_id = _check_id(subscriber_id, "Subscriber")

    def __call__(self, func: F) -> F:
        return _mark(func, _SUB_MARK, self.subscriber_id, "Subscriber")


class DeadSubscriber:
    """Method decorator: `@DeadSubscriber("id")` handles the dead letters of subscriber `id`.

    Same signature as a `@Subscriber` handler.  Without one, dead letters of
    the subscriber run `WorkerBase.execute_dead` (log and succeed).
    """

    def __init__(self, subscriber_id: str) -> None:
        self.subscriber_id = _check_id(subscriber_id, "DeadSubscriber")

    def __call__(self, func: F) -> F:
        return _mark(func, _DEAD_MARK, self.subscriber_id, "DeadSubscriber")


class SubscriberWebhook:
    """Class decorator: `@SubscriberWebhook("id")` delivers subscriber `id` as a webhook.

    The subscriber's tasks call its `url` with `http_method` and `headers`
    (see `nsj_queue_lib.pubsub.webhook`).  A `@Subscriber` handler for the
    same id takes precedence.  Applies to the decorated class and its
    subclasses only.
    """

    def __init__(self, subscriber_id: str) -> None:
        self.subscriber_id = _check_id(subscriber_id, "SubscriberWebhook")

    def __call__(self, cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, WorkerPubSubBase)):
            raise TypeError("@SubscriberWebhook deve decorar uma subclasse de WorkerPubSubBase")
        cls._webhook_subscriber_ids = frozenset(
            cls._webhook_subscriber_ids | {self.subscriber_id})
        return cls


def _collect(cls: type, attr: str, what: str) -> Dict[str, str]:
    """subscriber id -> method name declared in the body of `cls` itself."""
    own: Dict[str, str] = {}
    for name, value in vars(cls).items():
        target = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        for sid in getattr(target, attr, ()):
            if sid in own and own[sid] != name:
                raise TypeError(f"{cls.__name__}: @{what}('{sid}') declarado em "
                                f"'{own[sid]}' e em '{name}'")
            own[sid] = name
    return own


def with_subscriber_table(settings: Settings) -> Settings:
    """`settings` with QUEUE_SUBSCRIBER_TABLE defaulted, when unset, to the subscriber
    table of QUEUE_TABLE that `nsj-queue schema apply` creates ('schema.fila' ->
    'schema.fila_subscriber')."""
    if settings.queue_subscriber_table or not settings.queue_table:
        return settings
    table = default_subscriber_table(settings.queue_table)
    logger.info("QUEUE_SUBSCRIBER_TABLE não definida: usando a tabela de assinaturas %s "
                "(a criada com a fila por nsj-queue schema apply)", table)
    return settings.replace(queue_subscriber_table=table)


def check_subscriber_table(session: DbSession, settings: Settings,
                           defaulted: bool = False) -> None:
    """ConfigError (the worker exits 2) when the subscriber table is missing or lacks the
    columns the workers read; a lost connection propagates (the reconnect loop's)."""
    from nsj_queue_lib.db.errors import MISSING, Fault, classify
    from nsj_queue_lib.db.identifiers import display
    from nsj_queue_lib.db.repository import TaskRepository

    repo = TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)
    try:
        repo.subscriber_get("")  # the statement the workers run, on no row
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        fault = classify(exc)
        if fault not in MISSING:
            raise
        dialect_name = session.dialect.name
        table = display(settings.queue_subscriber_table or "", dialect_name)
        queue = display(settings.queue_table, dialect_name)
        schema, _, fila = queue.rpartition(".")
        apply = (f"nsj-queue schema apply {schema or 'public'} {fila}"
                 + (" --mysql" if settings.is_mysql else ""))
        origin = (" (QUEUE_SUBSCRIBER_TABLE não definida: o padrão é <fila>_subscriber, ao "
                  "lado de QUEUE_TABLE)" if defaulted else "")
        if fault is Fault.NO_TABLE:
            raise ConfigError(
                f"QUEUE_SUBSCRIBER_TABLE: a tabela de assinaturas '{table}' não existe neste "
                f"banco{origin}; crie-a com '{apply}' (cria só o que falta) ou defina "
                "QUEUE_SUBSCRIBER_TABLE com a tabela certa") from None
        raise ConfigError(
            f"QUEUE_SUBSCRIBER_TABLE: a tabela '{table}' não tem as colunas de uma tabela de "
            f"assinaturas{origin} ({_first_line(exc)}); compare com o DDL de "
            f"'nsj-queue schema print {schema or 'public'} {fila}'") from None


def _first_line(exc: BaseException) -> str:
    from nsj_queue_lib.text import one_line

    return one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else "", 200)


class _SubscriberTableCheck:
    """Runs `check_subscriber_table` on a consumer's connection before its on_connect,
    until it passes once (at start; after that a reconnect does not repeat it); then
    `on_pass(session)` (the webhook worker's start checks)."""

    def __init__(self, settings: Settings, defaulted: bool,
                 on_pass: Optional[Callable[[Any], None]] = None) -> None:
        self.settings = settings
        self.defaulted = defaulted
        self.on_pass = on_pass
        self.passed = False

    def before(self, on_connect: Optional[Callable[[Any], None]]) -> Callable[[Any], None]:
        def checked(session: Any) -> None:
            if not self.passed:
                check_subscriber_table(session, self.settings, self.defaulted)
                if self.on_pass is not None:
                    self.on_pass(session)
                self.passed = True
            if on_connect is not None:
                on_connect(session)

        return checked


class WorkerPubSubBase(WorkerBase):
    """Base of pub/sub workers: routes each subscriber task to its handler.

    Subclasses declare handlers with `@Subscriber` / `@DeadSubscriber` and
    webhook subscribers with `@SubscriberWebhook`; see the module docstring
    for the handler signature and the payload shape.
    """

    _subscriber_methods: Mapping[str, str] = MappingProxyType({})
    _dead_subscriber_methods: Mapping[str, str] = MappingProxyType({})
    _webhook_subscriber_ids: FrozenSet[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        subs: Dict[str, str] = {}
        dead: Dict[str, str] = {}
        hooks: Set[str] = set()
        for base in reversed(cls.__mro__[1:]):
            if isinstance(base, type) and issubclass(base, WorkerPubSubBase):
                subs.update(base._subscriber_methods)
                dead.update(base._dead_subscriber_methods)
                hooks |= base._webhook_subscriber_ids
        subs.update(_collect(cls, _SUB_MARK, "Subscriber"))
        dead.update(_collect(cls, _DEAD_MARK, "DeadSubscriber"))
        cls._subscriber_methods = MappingProxyType(subs)
        cls._dead_subscriber_methods = MappingProxyType(dead)
        cls._webhook_subscriber_ids = frozenset(hooks)

    # -- runtime wiring ---------------------------------------------------
    def build_runtime(self, settings: Settings) -> Any:
        """WorkerBase's runtime with the subscriber table defaulted (`with_subscriber_table`)
        and checked once connected, before the first task: a missing table ends the worker
        (exit code 2) instead of failing each publication at run time."""
        defaulted = not settings.queue_subscriber_table
        settings = with_subscriber_table(settings)
        runtime = super().build_runtime(settings)
        on_pass = None
        if self.delivers_webhooks():
            def on_pass(session: Any) -> None:
                self._webhook_start(session, settings)
        check = _SubscriberTableCheck(settings, defaulted, on_pass)
        for consumer in getattr(runtime, "consumers", ()):
            consumer.on_connect = check.before(consumer.on_connect)
        return runtime

    # -- registrations ------------------------------------------------------
    @classmethod
    def subscriber_ids(cls) -> FrozenSet[str]:
        """Ids with a `@Subscriber` handler in this class (own or inherited)."""
        return frozenset(cls._subscriber_methods)

    @classmethod
    def dead_subscriber_ids(cls) -> FrozenSet[str]:
        """Ids with a `@DeadSubscriber` handler in this class (own or inherited)."""
        return frozenset(cls._dead_subscriber_methods)

    @classmethod
    def webhook_subscriber_ids(cls) -> FrozenSet[str]:
        """Ids marked with `@SubscriberWebhook` on this class or its bases."""
        return cls._webhook_subscriber_ids

    def is_webhook_subscriber(self, subscriber_id: str) -> bool:
        """True when tasks of `subscriber_id` without a handler are delivered as webhooks."""
        return subscriber_id in self._webhook_subscriber_ids

    def delivers_webhooks(self) -> bool:
        """Whether this worker may deliver webhooks (`@SubscriberWebhook` ids, or a class
        that redefines `is_webhook_subscriber`, as the webhook worker does)."""
        redefined = (type(self).is_webhook_subscriber
                     is not WorkerPubSubBase.is_webhook_subscriber)
        return bool(self._webhook_subscriber_ids) or redefined

    def subscriber_handler(self, subscriber_id: str,
                           dead: bool = False) -> Optional[Callable[..., Any]]:
        """The bound handler of `subscriber_id` (None when not registered)."""
        table = self._dead_subscriber_methods if dead else self._subscriber_methods
        name = table.get(subscriber_id)
        if name is None:
            return None
        handler = getattr(self, name, None)
        return handler if callable(handler) else None

    def wants_multi_db_conn(self, tarefa: Dict[str, Any]) -> bool:
        """Only handlers that declare `multi_db_conn` get a tenant connection; webhook
        deliveries and handlers without it run without one (even with no tenant)."""
        subscriber_id = tarefa.get("subscriber_id")
        if not subscriber_id:
            return False
        handler = self.subscriber_handler(str(subscriber_id), dead=bool(tarefa.get("dead")))
        if handler is None:
            return False
        return accepts_extra_arg(handler, _HANDLER_ARGS)

    # -- handlers the router calls (see nsj_queue_lib.runtime.router) ----------
    # The one router (runtime/router.py) sends subscriber and dead-letter tasks here
    # with the task's typed context; the subscription is read through its repository
    # (the task's own session, in its transaction).
    # A subclass that redefines `execute` / `execute_dead` (to wrap them, as code written
    # for 1.2.2 may) gets them called for every task, as 1.2.2 did; the base methods
    # reach the same handlers through `bd_conn`.
    def run_subscriber(self, ctx: TaskContext) -> Any:
        """A subscriber task: its `@Subscriber` handler, or its webhook."""
        if self._redefines("execute"):
            return self.internal_execute(ctx.tarefa, ctx.bd_conn, ctx.multi_db_conn)
        return self._run_subscriber(ctx, ctx.tarefa.get("payload"))

    def run_dead(self, ctx: TaskContext) -> Any:
        """A dead-letter task: its `@DeadSubscriber` handler, else `execute_dead`."""
        if self._redefines("execute_dead"):
            return self.internal_execute_dead(ctx.tarefa, ctx.bd_conn, ctx.multi_db_conn)
        handler = self._dead_handler(ctx.tarefa)
        if handler is None:
            return super().run_dead(ctx)
        return self._run_dead(ctx, handler, ctx.tarefa.get("payload"))

    def _redefines(self, name: str) -> bool:
        """True when the worker's class overrides WorkerPubSubBase's method `name`."""
        return getattr(type(self), name) is not getattr(WorkerPubSubBase, name)

    def _run_subscriber(self, ctx: TaskContext, payload: Optional[str]) -> Any:
        subscriber_id = self._subscriber_id(ctx.tarefa)
        payload = unwrap_legacy_envelope(payload, ctx.tarefa)  # rows written by 1.2.2
        handler = self.subscriber_handler(subscriber_id)
        if handler is not None:
            return self._call_handler(handler, payload, self.read_subscription(ctx, subscriber_id),
                                      ctx)
        if self.is_webhook_subscriber(subscriber_id):
            subscription = self.read_subscription(ctx, subscriber_id)
            if self._redefines("deliver_webhook"):  # a subclass's, written for 3 arguments
                return self.deliver_webhook(payload, subscription, ctx.tarefa)
            return self.deliver_webhook(payload, subscription, ctx.tarefa, ctx=ctx)
        raise SubscriberNotRegistered(
            f"Subscriber '{subscriber_id}' não registrado no worker {type(self).__name__}: "
            f"nenhum método com @Subscriber('{subscriber_id}') nem "
            f"@SubscriberWebhook('{subscriber_id}').")

    def _dead_handler(self, tarefa: Dict[str, Any]) -> Optional[Callable[..., Any]]:
        subscriber_id = tarefa.get("subscriber_id")
        return self.subscriber_handler(str(subscriber_id), dead=True) if subscriber_id else None

    def _run_dead(self, ctx: TaskContext, handler: Callable[..., Any],
                  payload: Optional[str]) -> Any:
        subscriber_id = str(ctx.tarefa["subscriber_id"])
        payload = unwrap_legacy_envelope(payload, ctx.tarefa)
        return self._call_handler(handler, payload, self.read_subscription(ctx, subscriber_id),
                                  ctx)

    # -- direct calls (the WorkerBase methods, for code that calls them itself) ------
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                multi_db_conn: Any = None) -> Optional[str]:
        """Run the handler (or the webhook) of the task's subscriber."""
        return self._run_subscriber(self._context(tarefa, bd_conn, multi_db_conn), payload)

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                     multi_db_conn: Any = None) -> Optional[str]:
        """Run the `@DeadSubscriber` handler, or `WorkerBase.execute_dead` when there is none."""
        handler = self._dead_handler(tarefa)
        if handler is None:
            # (None only for a null publication in a 1.2.2 envelope: passed on as it is)
            publication = cast(str, unwrap_legacy_envelope(payload, tarefa))
            return super().execute_dead(publication, tarefa, bd_conn, multi_db_conn)
        return self._run_dead(self._context(tarefa, bd_conn, multi_db_conn), handler, payload)

    def _context(self, tarefa: Dict[str, Any], bd_conn: Any, multi_db_conn: Any) -> TaskContext:
        from nsj_queue_lib.runtime.router import TaskContext

        return TaskContext.for_connection(tarefa, self.settings, bd_conn, multi_db_conn)

    def _subscriber_id(self, tarefa: Dict[str, Any]) -> str:
        subscriber_id = tarefa.get("subscriber_id")
        if not subscriber_id:
            raise NotASubscriberTask(
                f"Tarefa {tarefa.get('id')} não tem subscriber_id: um worker pub/sub só executa "
                "tarefas geradas pela publicação (QueueClient.insert_task_pub_sub).")
        return str(subscriber_id)

    def _call_handler(self, handler: Callable[..., Any], payload: Optional[str],
                      subscription: Dict[str, Any], ctx: TaskContext) -> Any:
        args = (handler_payload(payload, subscription), subscription, ctx.tarefa, ctx.bd_conn)
        if ctx.multi_db_conn is not None and accepts_extra_arg(handler, _HANDLER_ARGS):
            return handler(*args, ctx.multi_db_conn)
        return handler(*args)

    # -- subscription -------------------------------------------------------
    def read_subscription(self, ctx: TaskContext, subscriber_id: str) -> Dict[str, Any]:
        """The subscriber row as handlers see it, read now through the task's repository
        (its session and transaction)."""
        settings = ctx.settings or self.settings
        table = getattr(settings, "queue_subscriber_table", None)
        if not table:
            raise ConfigError("QUEUE_SUBSCRIBER_TABLE não configurada: o worker pub/sub "
                              "precisa da tabela de assinaturas.")
        row = ctx.repository().subscriber_get(subscriber_id)
        if row is None:
            raise SubscriptionNotFound(
                f"Assinatura '{subscriber_id}' não encontrada na tabela "
                f"{table} (removida após a publicação?).")
        return normalize_subscription(row)

    def load_subscription(self, subscriber_id: str, bd_conn: Any) -> Dict[str, Any]:
        """`read_subscription` on the connection `bd_conn` (for code that calls it itself)."""
        return self.read_subscription(self._context({}, bd_conn, None), subscriber_id)

    # -- webhook ------------------------------------------------------------
    def _thread_local(self) -> threading.local:
        """Per task thread state (QUEUE_CONCURRENCY: one HTTP session per thread, reused by
        every task of that thread)."""
        return self.__dict__.setdefault("_per_thread", threading.local())

    def _http_session(self) -> Any:
        local = self._thread_local()
        session = getattr(local, "session", None)
        if session is None:
            from nsj_queue_lib.pubsub.webhook import new_session

            session = local.session = new_session()
        return session

    def _secret_box(self) -> Any:
        """The SecretBox of WEBHOOK_SECRETS_KEY (the webhook start's, or made now)."""
        delivery = self.__dict__.get("_webhook_delivery")
        if delivery is not None:
            return delivery.box
        box = self.__dict__.get("_secret_box_")
        if box is None:
            from nsj_queue_lib.pubsub.secret_store import SecretBox

            box = self.__dict__["_secret_box_"] = SecretBox.from_settings(self.settings)
        return box

    def _webhook_start(self, session: Any, settings: Settings) -> None:
        """At start: which webhook features the queue's schema has, the secrets key
        (ConfigError when set without the webhook-crypto extra), and a warning naming the
        active subscriptions delivered unsigned."""
        from nsj_queue_lib.pubsub.delivery import WebhookDelivery
        from nsj_queue_lib.pubsub.secret_store import SecretBox
        from nsj_queue_lib.pubsub.webhook_store import WebhookFeatures, WebhookStore

        box = SecretBox.from_settings(settings)
        store = WebhookStore.for_settings(session, settings)
        features = WebhookFeatures.probe(store)
        self.__dict__["_webhook_delivery"] = WebhookDelivery(
            settings, features, box, delivers=lambda sub_id: (
                self.subscriber_handler(sub_id) is None and self.is_webhook_subscriber(sub_id)))
        if not (features.secrets and features.breaker and features.deliveries):
            logger.warning("A fila não tem os objetos de webhook da versão 5 do esquema "
                           "(segredos: %s, disjuntor: %s, registro de entregas: %s): o que "
                           "falta segue o comportamento anterior; rode nsj-queue schema "
                           "upgrade", *("sim" if f else "não" for f in (
                               features.secrets, features.breaker, features.deliveries)))
        if features.secrets:
            try:
                unsigned = store.unsigned_list()
            finally:
                session.rollback()
            if unsigned:
                logger.warning("Assinaturas de webhook sem segredo, entregues SEM assinatura "
                               "(nsj-queue subscriber rotate-secret ID): %s",
                               ", ".join(unsigned))

    def deliver_webhook(self, payload: Optional[str], subscription: Dict[str, Any],
                        tarefa: Dict[str, Any], ctx: Optional[TaskContext] = None) -> str:
        """Call the subscription's webhook with the publication; return the success message.
        With the task's context (the worker's runtime), signed, behind the endpoint's
        circuit breaker and logged (nsj_queue_lib.pubsub.delivery)."""
        from nsj_queue_lib.pubsub.webhook import build_request, deliver

        headers = subscription.get("headers")
        if isinstance(headers, dict):  # values stored encrypted (WEBHOOK_SECRETS_KEY)
            subscription = dict(subscription, headers=self._secret_box().open_headers(
                headers, subscription.get("id")))
        request = build_request(subscription, payload)
        timeout = getattr(self.settings, "default_webhook_timeout", None) \
            or DEFAULT_WEBHOOK_TIMEOUT
        delivery = self.__dict__.get("_webhook_delivery")
        if ctx is not None and ctx.session is not None and delivery is not None:
            return delivery.run(ctx, request, subscription, timeout, self._http_session())
        return deliver(request, timeout, self._http_session())


__all__ = [
    "DeadSubscriber",
    "Subscriber",
    "SubscriberNotRegistered",
    "SubscriberWebhook",
    "WorkerPubSubBase",
]
