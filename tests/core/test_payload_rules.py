"""What a producer may enqueue (nsj_queue_lib/task_input.py), on the real PostgreSQL and
MariaDB: refused inputs raise a Portuguese error before the database sees them (no row,
the caller's transaction still usable), accepted ones are stored as documented, and a
task larger than the server takes is PayloadTooLarge, not a lost connection."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import uuid
from typing import Any, Callable, Dict

import pytest

from nsj_queue_lib import task_input
from nsj_queue_lib.db.payload import to_text
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.task_input import InvalidTaskInput, PayloadTooLarge, payload_text
from tests.fixtures.queue import Queue

DEFAULTS = {"origem": "o", "destino": "d", "processo": "p", "chave_externa": "c"}


def _fields(task: dict) -> dict:
    return {**DEFAULTS, **task}


def _single(method: str) -> Callable[[Any, dict], int]:
    def run(client: Any, task: dict) -> int:
        t = _fields(task)
        extra = {k: t[k] for k in ("tenant", "grupo_empresarial", "prioridade") if k in t}
        return getattr(client, method)(t["origem"], t["destino"], t["processo"],
                                       t["chave_externa"], t.get("payload"), **extra)
    return run


def _bulk(client: Any, task: dict) -> int:
    # The task second in its batch: the error names it, and the first is not written.
    return client.insert_tasks([{**DEFAULTS, "payload": "antes"}, _fields(task)])[1]


PATHS: Dict[str, Callable[[Any, dict], int]] = {
    "insert_task": _single("insert_task"),
    "insert_task_pub_sub": _single("insert_task_pub_sub"),
    "insert_task_webhook": _single("insert_task_webhook"),
    "insert_tasks": _bulk,
}
PREFIX = {"insert_tasks": "insert_tasks: tarefa 1: "}

DBS = [pytest.param("pg_queue", id="postgres"),
       pytest.param("mariadb_queue", id="mariadb", marks=pytest.mark.mysql)]


@pytest.fixture(params=DBS)
def q(request) -> Queue:
    return request.getfixturevalue(request.param)


circular: dict = {}
circular["eu"] = circular

NAN = "payload contém NaN ou Infinity, que não são JSON válido (use None ou um texto)"
REFUSED = {
    "nan": ({"payload": float("nan")}, ValueError, NAN),
    "infinity_inside": ({"payload": {"v": [1, float("-inf")]}}, ValueError, NAN),
    "bytes_not_utf8": ({"payload": b"ok\xff"}, ValueError,
                       "payload: bytes que não são UTF-8 válido (byte 2); a fila guarda "
                       "texto: decodifique-os antes ou codifique-os (base64, por exemplo)"),
    "bytes_not_utf8_inside": ({"payload": {"b": b"\xc3"}}, ValueError,
                              "payload: bytes que não são UTF-8 válido (byte 0); a fila "
                              "guarda texto: decodifique-os antes ou codifique-os (base64, "
                              "por exemplo)"),
    "object": ({"payload": object()}, TypeError,
               "payload do tipo object não é aceito: use str, bytes em UTF-8, dict, list, "
               "tupla, set, ou um int, float, bool, Decimal, data/hora ou UUID (gravado como "
               "texto, como antes)"),
    "object_inside": ({"payload": {"a": [object()]}}, TypeError,
                      "payload contém um valor do tipo object, que não tem forma em JSON"),
    "circular": ({"payload": circular}, ValueError,
                 "payload contém uma referência circular"),
    "tuple_key": ({"payload": {(1, 2): "x"}}, ValueError,
                  "payload contém uma chave de dict que não é str, int, float, bool nem "
                  "None (JSON só tem chaves de texto)"),
    "nul_in_payload": ({"payload": "a\x00b"}, ValueError,
                       "payload contém o caractere NUL (\\x00) na posição 1, que o banco "
                       "não guarda em texto"),
    "surrogate_in_payload": ({"payload": "x\udcffy"}, ValueError,
                             "payload contém um surrogate isolado (\\udcff, sem forma em "
                             "UTF-8) na posição 1, que o banco não guarda em texto"),
    "nul_in_processo": ({"processo": "fat\x00"}, ValueError,
                        "processo contém o caractere NUL (\\x00) na posição 3, que o banco "
                        "não guarda em texto"),
    "surrogate_in_origem": ({"origem": "\ud800"}, ValueError,
                            "origem contém um surrogate isolado (\\ud800, sem forma em "
                            "UTF-8) na posição 0, que o banco não guarda em texto"),
    "nul_in_destino": ({"destino": "\x00"}, ValueError,
                       "destino contém o caractere NUL (\\x00) na posição 0, que o banco "
                       "não guarda em texto"),
    "surrogate_in_chave_externa": ({"chave_externa": "k-\udc80"}, ValueError,
                                   "chave_externa contém um surrogate isolado (\\udc80, "
                                   "sem forma em UTF-8) na posição 2, que o banco não "
                                   "guarda em texto"),
    "nul_in_grupo_empresarial": ({"grupo_empresarial": "G\x00"}, ValueError,
                                 "grupo_empresarial contém o caractere NUL (\\x00) na "
                                 "posição 1, que o banco não guarda em texto"),
    "prioridade_above_int": ({"prioridade": 2**31}, ValueError,
                             "prioridade fora do intervalo da coluna (int, de -2147483648 a "
                             "2147483647): 2147483648"),
    "prioridade_below_int": ({"prioridade": -2**31 - 1}, ValueError,
                             "prioridade fora do intervalo da coluna (int, de -2147483648 a "
                             "2147483647): -2147483649"),
    "prioridade_bool": ({"prioridade": True}, TypeError, "prioridade deve ser um inteiro"),
    "tenant_above_bigint": ({"tenant": 2**63}, ValueError,
                            "tenant fora do intervalo da coluna (bigint, de "
                            "-9223372036854775808 a 9223372036854775807): "
                            "9223372036854775808"),
}


def _commit_good_task(conn: Any, client: Any) -> int:
    """The producer's transaction is still usable after the refusal: a good task in it
    commits (on PostgreSQL a statement error would have aborted the transaction)."""
    good = client.insert_task("o", "d", "p", "c", {"ok": 1})
    conn.commit()
    return good


@pytest.mark.parametrize("path", list(PATHS))
def test_refused_inputs_raise_before_the_database_and_write_nothing(q, path):
    conn = q.new_conn()
    try:
        client = q.client(conn)
        kept = []
        for name, (task, kind, message) in REFUSED.items():
            with pytest.raises(kind) as info:
                PATHS[path](client, task)
            assert str(info.value) == PREFIX.get(path, "") + message, name
            if kind is ValueError:
                assert isinstance(info.value, InvalidTaskInput), name
            kept.append(_commit_good_task(conn, client))
            assert [r["id"] for r in q.rows()] == kept, name  # nothing else written
    finally:
        conn.close()
    assert [r["payload"] for r in q.rows()] == ['{"ok": 1}'] * len(REFUSED)


ACCEPTED = {
    # As every earlier version stored them:
    "dict": ({"pedido": 10, "nome": "João", "itens": [1, 2]},
             '{"pedido": 10, "nome": "João", "itens": [1, 2]}'),
    "list": ([1, "b", None], '[1, "b", null]'),
    # Scalars: their str(), as earlier versions stored them.
    "bool": (True, "True"),
    "decimal": (decimal.Decimal("1.10"), "1.10"),
    "uuid": (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    "datetime": (dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02 03:04:05"),
    "str": ("texto livre { não json", "texto livre { não json"),
    "int": (42, "42"),
    "none": (None, None),
    "dict_with_dates_decimal_uuid": (
        {"d": dt.datetime(2024, 1, 2, 3, 4, 5), "n": decimal.Decimal("1.10"),
         "u": uuid.UUID(int=1)},
        '{"d": "2024-01-02T03:04:05", "n": "1.10", '
        '"u": "00000000-0000-0000-0000-000000000001"}'),
    "dict_with_nul": ({"z": "a\x00b"}, '{"z": "a\\u0000b"}'),
    # Stored by the rule (earlier: repr-like text or a driver error):
    "bytes_utf8": ('{"a": "é"}'.encode(), '{"a": "é"}'),
    "bytes_inside": ({"b": b"ok"}, '{"b": "ok"}'),
    "set": ({1, 2}, "[1, 2]"),
    "tuple": ((1, "x"), '[1, "x"]'),
    "float": (1.5, "1.5"),
    "dict_with_lone_surrogate": ({"s": "a\udcffb"}, '{"s": "a\\udcffb"}'),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_accepted_payloads_are_stored_as_the_rule_says(q, path):
    conn = q.new_conn()
    try:
        client = q.client(conn)
        ids = {name: PATHS[path](client, {"payload": payload})
               for name, (payload, _) in ACCEPTED.items()}
        conn.commit()
    finally:
        conn.close()
    for name, (_payload, stored) in ACCEPTED.items():
        row = q.row(ids[name])
        assert row["payload"] == stored, name
        expected_hash = hashlib.sha256(stored.encode()).hexdigest() if stored else None
        assert row["payload_hash"] == expected_hash, name
    assert json.loads(q.row(ids["dict_with_lone_surrogate"])["payload"]) == {"s": "a\udcffb"}


def test_dict_list_str_and_scalar_payloads_keep_their_earlier_text():
    for payload in ({"a": 1, "nome": "João", "l": [1.5, None, True]}, [1, {"x": "y"}],
                    "texto", 0, -7, 10**20, {"d": dt.date(2024, 5, 6)}, True, 1.5,
                    decimal.Decimal("1.10"), uuid.UUID(int=1), dt.datetime(2024, 1, 2, 3, 4),
                    dt.date(2024, 5, 6)):
        assert payload_text(payload) == to_text(payload)


@pytest.mark.parametrize("path", list(PATHS))
def test_column_range_limits_are_accepted(q, path):
    conn = q.new_conn()
    try:
        client = q.client(conn)
        top = PATHS[path](client, {"payload": "a", "prioridade": 2**31 - 1,
                                   "tenant": 2**63 - 1})
        low = PATHS[path](client, {"payload": "b", "prioridade": -2**31, "tenant": -2**63})
        conn.commit()
    finally:
        conn.close()
    assert (q.row(top)["prioridade"], q.row(top)["tenant"]) == (2**31 - 1, 2**63 - 1)
    assert (q.row(low)["prioridade"], q.row(low)["tenant"]) == (-2**31, -2**63)


def test_list_equivalent_task_finds_a_set_payload_as_stored(q):
    conn = q.new_conn()
    try:
        client = q.client(conn)
        task_id = client.insert_task("o", "d", "p", "c", {3, 4})
        conn.commit()
        assert [r["id"] for r in client.list_equivalent_task("o", "d", "p", "c", {3, 4})] == [
            task_id]
        with pytest.raises(ValueError) as info:
            client.list_equivalent_task("o", "d", "p", "c", float("nan"))
        assert str(info.value) == NAN
    finally:
        conn.close()


# -- too large ---------------------------------------------------------------------------
def _overhead(fields: int = 4) -> int:
    """The statement estimate beyond the payload's literal (task_input's upper bound):
    statement and row overhead, the quotes of the payload, the one-letter text fields."""
    return task_input.STATEMENT_OVERHEAD + task_input.ROW_OVERHEAD + 3 + fields * 4


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


@pytest.mark.parametrize("path", list(PATHS))
def test_mariadb_payload_above_max_allowed_packet_is_payload_too_large(mariadb_queue, path):
    limit = int(mariadb_queue.value("SELECT @@max_allowed_packet"))
    conn = mariadb_queue.new_conn()
    try:
        client = mariadb_queue.client(conn)
        with pytest.raises(PayloadTooLarge) as info:
            PATHS[path](client, {"payload": "x" * limit})
        statement = limit + _overhead()
        assert str(info.value) == (
            f"{PREFIX.get(path, '')}payload grande demais para o servidor MariaDB/MySQL: o "
            f"comando teria cerca de {statement} bytes ({_mb(statement)}) e o servidor "
            f"aceita até {limit} bytes ({_mb(limit)}) por comando (max_allowed_packet). "
            f"Reduza o payload ou aumente max_allowed_packet no servidor")
        assert not isinstance(info.value, DatabaseUnavailable)
        # Refused before sending: the connection and the caller's transaction live on.
        good = _commit_good_task(conn, client)
    finally:
        conn.close()
    assert [r["id"] for r in mariadb_queue.rows()] == [good]


@pytest.mark.mysql
def test_mariadb_payload_just_under_the_limit_is_stored(mariadb_queue):
    limit = int(mariadb_queue.value("SELECT @@max_allowed_packet"))
    size = limit - _overhead() - 16
    conn = mariadb_queue.new_conn()
    try:
        task_id = mariadb_queue.client(conn).insert_task("o", "d", "p", "c", "y" * size)
        conn.commit()
    finally:
        conn.close()
    assert mariadb_queue.value(f"SELECT length(payload) FROM {mariadb_queue.qtable} WHERE id = %s",
                               (task_id,)) == size


@pytest.mark.mysql
def test_mariadb_batch_above_max_allowed_packet_is_sent_in_several_statements(mariadb_queue):
    limit = int(mariadb_queue.value("SELECT @@max_allowed_packet"))
    part = limit // 3 + 4096  # three of them exceed one statement; each fits alone
    conn = mariadb_queue.new_conn()
    try:
        ids = mariadb_queue.client(conn).insert_tasks(
            [{**DEFAULTS, "payload": c * part} for c in "abc"])
        conn.commit()
    finally:
        conn.close()
    assert ids == sorted(ids) and len(set(ids)) == 3
    rows = mariadb_queue.sql(f"SELECT id, left(payload, 1) AS c, length(payload) AS n "
                             f"FROM {mariadb_queue.qtable} ORDER BY id")
    assert [(r["id"], r["c"], r["n"]) for r in rows] == [
        (ids[0], "a", part), (ids[1], "b", part), (ids[2], "c", part)]


@pytest.mark.mysql
def test_mariadb_statement_above_max_allowed_packet_is_not_a_lost_connection(mariadb_queue):
    """Past QueueClient (any statement of the library's sessions): the server's error
    1153 is PayloadTooLarge, naming max_allowed_packet, not DatabaseUnavailable."""
    limit = int(mariadb_queue.value("SELECT @@max_allowed_packet"))
    session = DbSession(mariadb_queue.server.connect(mariadb_queue.database))
    try:
        with pytest.raises(PayloadTooLarge) as info:
            session.execute("SELECT %(p)s", {"p": "z" * (limit + 1024)})
        assert str(info.value) == (
            "Comando maior que o servidor MariaDB/MySQL aceita (max_allowed_packet; erro "
            "1153; o servidor encerrou a conexão): reduza o valor enviado (o payload, por "
            "exemplo) ou aumente max_allowed_packet no servidor")
        # The server did end that connection: the next statement says so.
        with pytest.raises(DatabaseUnavailable):
            session.execute("SELECT 1")
    finally:
        session.close()
    assert mariadb_queue.value("SELECT @@max_allowed_packet") == limit  # server untouched


@pytest.mark.parametrize("path", list(PATHS))
def test_postgres_payload_above_512_mb_is_payload_too_large(pg_queue, path):
    # Verified by hand on PostgreSQL 15: 536870911 bytes insert; one more byte fails in
    # the server's parser ("invalid memory alloc request size 1073741824").
    size = task_input.PG_LITERAL_MAX + 1
    conn = pg_queue.new_conn()
    try:
        client = pg_queue.client(conn)
        with pytest.raises(PayloadTooLarge) as info:
            PATHS[path](client, {"payload": "x" * size})
        assert str(info.value) == (
            f"{PREFIX.get(path, '')}payload grande demais para o PostgreSQL: {size} bytes "
            f"(512.0 MB); um texto enviado num comando vai até 536870911 bytes (512 MB; a "
            f"coluna text guarda até 1 GB, mas o servidor não lê um literal acima de 512 "
            f"MB). Reduza o payload ou guarde o conteúdo fora da fila e enfileire a "
            f"referência")
        good = _commit_good_task(conn, client)
    finally:
        conn.close()
    assert [r["id"] for r in pg_queue.rows()] == [good]


def test_postgres_batch_beyond_its_budget_is_sent_in_several_statements(pg_queue, monkeypatch):
    monkeypatch.setattr(task_input, "PG_BATCH_BUDGET", 20_000)
    calls = []
    original = TaskRepository.task_insert_many

    def spy(self, rows):
        calls.append(len(rows))
        return original(self, rows)

    monkeypatch.setattr(TaskRepository, "task_insert_many", spy)
    conn = pg_queue.new_conn()
    try:
        ids = pg_queue.client(conn).insert_tasks(
            [{**DEFAULTS, "payload": str(i) * 6000} for i in range(5)])
        conn.commit()
    finally:
        conn.close()
    assert calls == [2, 2, 1]
    assert [(r["id"], r["payload"]) for r in pg_queue.rows()] == [
        (ids[i], str(i) * 6000) for i in range(5)]


def test_latin1_database_escapes_json_and_refuses_text_it_cannot_hold(pg_server):
    name = f"nsjq_latin1_{uuid.uuid4().hex[:8]}"
    admin = pg_server.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                    "TEMPLATE template0")
    q = Queue.create(dataclasses.replace(pg_server, dbname=name, embedded=None),
                     schema="t_latin", fila=f"fila_{uuid.uuid4().hex[:8]}")
    try:
        conn = q.new_conn()
        try:
            client = q.client(conn)
            with pytest.raises(InvalidTaskInput) as info:
                client.insert_task("o", "d", "p", "c", "preço € 10")
            assert str(info.value) == ("payload contém '€' na posição 6, que a codificação "
                                       "do banco (iso8859_1) não representa")
            task_id = client.insert_task("o", "d", "p", "c", {"v": "€ é 😀"})
            conn.commit()
        finally:
            conn.close()
        stored = q.row(task_id)["payload"]
        assert stored == '{"v": "\\u20ac é \\ud83d\\ude00"}'
        assert json.loads(stored) == {"v": "€ é 😀"}
        assert q.count() == 1
    finally:
        q.destroy()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
