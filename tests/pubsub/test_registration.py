"""Unit tests (no database): registrations per class, handler calls, payload shape."""

from __future__ import annotations

import datetime as dt
from typing import Any, Dict

import pytest

from nsj_queue_lib.exceptions import SubscriberNotRegistered
from nsj_queue_lib.pubsub.message import NotASubscriberTask, parse_publication
from nsj_queue_lib.worker_base import WorkerBase
from nsj_queue_lib.worker_pub_sub_base import (
    DeadSubscriber,
    Subscriber,
    SubscriberWebhook,
    WorkerPubSubBase,
)
from nsj_queue_lib.worker_webhook import WorkerWebhook

SUBSCRIPTION = {
    "id": "x", "tenant": None, "grupo_empresarial": None, "processo": "p", "url": None,
    "http_method": None, "headers": {}, "ativo": True,
    "created_at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
}


class _NoDb:
    """Mixin: subscriptions come from memory instead of the subscriber table."""

    def read_subscription(self, ctx: Any, subscriber_id: str) -> Dict[str, Any]:
        return dict(SUBSCRIPTION, id=subscriber_id)


class WorkerOne(_NoDb, WorkerPubSubBase):
    @Subscriber("x")
    def one_x(self, payload, subscription, tarefa, bd_conn):
        return "one:x"

    @DeadSubscriber("x")
    def one_dead_x(self, payload, subscription, tarefa, bd_conn):
        return "one:dead:x"


@SubscriberWebhook("w1")
class WorkerTwo(_NoDb, WorkerPubSubBase):
    @Subscriber("x")
    def two_x(self, payload, subscription, tarefa, bd_conn):
        return "two:x"

    @Subscriber("y")
    def two_y(self, payload, subscription, tarefa, bd_conn, multi_db_conn):
        return f"two:y:{multi_db_conn}"


class WorkerTwoChild(WorkerTwo):
    @Subscriber("z")
    def child_z(self, payload, subscription, tarefa, bd_conn):
        return f"child:z:{payload['publication']!r}"

    def two_y(self, payload, subscription, tarefa, bd_conn, multi_db_conn=None):
        return "child overrides y"


def task(sub_id: Any, payload: str = '{"k": 1}', dead: bool = False, **extra: Any) -> dict:
    row = {"id": 7, "subscriber_id": sub_id, "payload": payload, "dead": dead,
           "pub_sub": False, "tentativa": 1, "live_id": 3 if dead else None,
           "publication_id": 1}
    row.update(extra)
    return row


def test_two_worker_classes_in_one_process_keep_separate_registrations():
    assert WorkerOne().dispatch(task("x"), None) == "one:x"
    assert WorkerTwo().dispatch(task("x"), None) == "two:x"
    assert WorkerOne.subscriber_ids() == {"x"}
    assert WorkerTwo.subscriber_ids() == {"x", "y"}
    assert WorkerOne.dead_subscriber_ids() == {"x"}
    assert WorkerTwo.dead_subscriber_ids() == set()
    # the base class has no registrations at all
    assert WorkerPubSubBase.subscriber_ids() == set()
    assert WorkerPubSubBase.webhook_subscriber_ids() == set()


def test_webhook_marks_belong_to_the_decorated_class_and_its_subclasses():
    assert WorkerTwo.webhook_subscriber_ids() == {"w1"}
    assert WorkerTwoChild.webhook_subscriber_ids() == {"w1"}
    assert WorkerOne.webhook_subscriber_ids() == set()
    assert not WorkerOne().is_webhook_subscriber("w1")
    assert WorkerWebhook().is_webhook_subscriber("anything")

    @SubscriberWebhook("w2")
    class Other(WorkerTwo):
        pass

    assert Other.webhook_subscriber_ids() == {"w1", "w2"}
    assert WorkerTwo.webhook_subscriber_ids() == {"w1"}


def test_subclass_inherits_and_overrides_handlers():
    child = WorkerTwoChild()
    assert WorkerTwoChild.subscriber_ids() == {"x", "y", "z"}
    assert child.dispatch(task("x"), None) == "two:x"
    assert child.dispatch(task("z"), None) == "child:z:{'k': 1}"
    assert child.dispatch(task("y"), None, "mdb") == "child overrides y"


def test_dead_letter_uses_dead_handler_or_falls_back_to_workerbase():
    assert WorkerOne().dispatch(task("x", dead=True), None) == "one:dead:x"
    message = WorkerTwo().dispatch(task("x", dead=True), None)
    assert message == WorkerBase.execute_dead(WorkerTwo(), "", task("x", dead=True), None)
    assert "excedeu o número de tentativas" in message
    # a dead publication (no subscriber) falls back too
    assert "excedeu" in WorkerOne().dispatch(task(None, dead=True, pub_sub=True), None)


def test_multi_db_conn_only_for_handlers_that_accept_it():
    two = WorkerTwo()
    assert two.dispatch(task("y"), None, "MDB") == "two:y:MDB"
    assert two.dispatch(task("x"), None, "MDB") == "two:x"  # 4-parameter handler
    assert two.internal_execute(task("y"), None, "MDB") == "two:y:MDB"


def test_unregistered_subscriber_fails_naming_it():
    with pytest.raises(SubscriberNotRegistered, match="'nao-existe'") as info:
        WorkerOne().dispatch(task("nao-existe"), None)
    assert "WorkerOne" in str(info.value)
    with pytest.raises(NotASubscriberTask):
        WorkerOne().dispatch(task(None), None)


def test_uuid_shaped_subscriber_id_matches_its_string_key():
    sid = "0f8fad5b-d9cb-469f-a165-70867728950e"

    class W(_NoDb, WorkerPubSubBase):
        @Subscriber(sid)
        def h(self, payload, subscription, tarefa, bd_conn):
            return subscription["id"]

    assert W().dispatch(task(sid), None) == sid


def test_decorator_validation():
    with pytest.raises(TypeError):
        Subscriber("")
    with pytest.raises(TypeError):
        DeadSubscriber(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SubscriberWebhook("w")(object)
    with pytest.raises(TypeError, match="'a'"):
        class Dup(WorkerPubSubBase):
            @Subscriber("a")
            def h1(self, payload, subscription, tarefa, bd_conn):
                return "1"

            @Subscriber("a")
            def h2(self, payload, subscription, tarefa, bd_conn):
                return "2"


def test_payload_shape_given_to_handlers():
    seen = {}

    class W(_NoDb, WorkerPubSubBase):
        @Subscriber("s")
        def h(self, payload, subscription, tarefa, bd_conn):
            seen["payload"] = payload
            seen["subscription"] = subscription
            return "ok"

    text = '{"data": "2024-01-02", "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e", "n": 1}'
    W().dispatch(task("s", payload=text), None)
    assert seen["payload"]["publication"] == {
        "data": "2024-01-02", "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e", "n": 1}
    assert seen["payload"]["subscription"] is seen["subscription"]
    assert seen["subscription"]["id"] == "s"


@pytest.mark.parametrize("text, expected", [
    ('{"a": "2024-01-01T10:00:00"}', {"a": "2024-01-01T10:00:00"}),
    ('[1, "0f8fad5b-d9cb-469f-a165-70867728950e"]', [1, "0f8fad5b-d9cb-469f-a165-70867728950e"]),
    ("texto livre 2024-01-01", "texto livre 2024-01-01"),
    ('"2024-01-01"', '"2024-01-01"'),
    ("42", "42"),
    ("{não é json", "{não é json"),
    ("", ""),
    (None, None),
])
def test_parse_publication(text, expected):
    assert parse_publication(text) == expected
