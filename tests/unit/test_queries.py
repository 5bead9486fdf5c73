"""The named-query file of PostgreSQL: parsing, rendering and use by the repository."""

from __future__ import annotations

import re
from pathlib import Path

from nsj_queue_lib.db import repository
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.queries import TAREFA_COLUMNS, Queries, raw_parts, raw_queries, read_sql

PACKAGE = Path(repository.__file__).resolve().parents[1]
REPOSITORY_SOURCE = Path(repository.__file__).read_text(encoding="utf-8") + "".join(
    p.read_text(encoding="utf-8") for p in (PACKAGE / "engine").rglob("*.py"))
USED = set(re.findall(r"""(?:q|queries\([^)]*\))\[["'](\w+)["']\]""", REPOSITORY_SOURCE))
# Queries the repository selects through a helper that receives the name.
USED |= set(re.findall(r"""_insert_select\(["'](\w+)["']""", REPOSITORY_SOURCE))
# Every string literal of the library: a query may also be picked by name in a variable
# (the claim's prepared variants) or handed to the listener turn (engine/postgres/idle.py).
LITERALS = set(re.findall(r"""["'](\w+)["']""", "".join(
    p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))))


def test_every_named_query_is_parsed():
    common = (Path(repository.__file__).parent / "sql" / "common" / "queries.sql").read_text()
    text = read_sql(POSTGRES, "queries.sql") + "\n" + common
    headers = re.findall(r"^-- name: (\w+)\s*$", text, re.MULTILINE)
    assert len(headers) == len(set(headers)), "duplicate query name"
    # (part_* blocks are pieces of other queries, rendered into them)
    # (and the _compat variants the loader makes: db/queries.py, VARIANT)
    made = {"task_claim_locked_compat", "task_claim_batch_compat",
            "task_promote_scheduled_compat", "subscriber_fanout_compat",
            "part_claim_pick_compat", "part_claim_pick_full_compat"}
    assert set(raw_queries(POSTGRES)) | set(raw_parts(POSTGRES)) == set(headers) | made
    assert not made & set(headers)
    assert set(raw_parts(POSTGRES)) == {"part_claim_locked_tail",
                                        "part_claim_pick", "part_claim_pick_full",
                                        "part_claim_pick_compat", "part_claim_pick_full_compat",
                                        "part_claim_status", "part_claim_status_compat",
                                        "part_claim_lock", "part_claim_lock_compat",
                                        "part_claim_xact_lock", "part_claim_xact_lock_compat",
                                        "part_promote_guard_compat",
                                        "part_fanout_payload", "part_fanout_payload_compat",
                                        "part_fanout_source",
                                        "part_seconds_to_next_due_besides",
                                        "part_seconds_to_next_due_from"}
    # written once, rendered for the plain and the 1.2.2-compatible claims
    assert {"part_claim_pick", "part_claim_pick_compat", "part_claim_pick_full",
            "part_claim_pick_full_compat"} <= set(Queries(POSTGRES, "fila").parts)
    assert not any(name.startswith("part_") for name in Queries(POSTGRES, "fila").names())
    for name, body in raw_queries(POSTGRES).items():
        assert body, f"{name} is empty"
        assert "-- name:" not in body
        assert not any(line.lstrip().startswith("--") for line in body.splitlines()), name


def test_every_query_is_used_by_the_repository():
    assert set(raw_queries(POSTGRES)) - USED - LITERALS == set(), "queries nobody runs"


def test_repository_asks_only_for_existing_queries():
    # Some names exist in one dialect only (e.g. the MySQL multi-row INSERT template).
    known = set(raw_queries(POSTGRES)) | set(raw_queries(MYSQL))
    # (and MySQL native's idle turn, in a file of its own: engine/mysql/idle_turn.py)
    known |= set(raw_queries(MYSQL, "turn.sql"))
    # (and the catalog reads of PostgreSQL, such as the claim's column types)
    known |= set(raw_queries(POSTGRES, "catalog.sql"))
    assert USED - known == set()


def test_rendering_quotes_identifiers_and_leaves_no_placeholder():
    q = Queries(POSTGRES, "meu_schema.MinhaFila", "meu_schema.MinhaFila_subscriber")
    for name in q.names():
        sql = q[name]
        assert not re.search(r"\{\w+\}", sql), name
        assert "<no_subscriber_table>" not in sql
    assert '"meu_schema"."MinhaFila"' in q["task_insert"]
    assert '"meu_schema"."MinhaFila_subscriber"' in q["subscriber_get"]


def test_tarefa_columns_are_the_26_of_the_contract():
    assert len(TAREFA_COLUMNS) == 26
    assert len(set(TAREFA_COLUMNS)) == 26
    assert "reenfileirado" not in TAREFA_COLUMNS
    assert "estouro_tentativas" not in TAREFA_COLUMNS
    select = Queries(POSTGRES, "fila")["task_get"]
    for col in TAREFA_COLUMNS:
        assert col in select


def test_status_queries_have_the_same_names_and_parameters_in_both_dialects():
    param = re.compile(r"%\((\w+)\)s")
    pg, my = raw_queries(POSTGRES, "status.sql"), raw_queries(MYSQL, "status.sql")
    assert set(pg) == set(my)
    for name in pg:
        assert set(param.findall(pg[name])) == set(param.findall(my[name])), name
    lib = Path(__file__).resolve().parents[2] / "nsj_queue_lib" / "observability"
    source = (lib / "status.py").read_text() + (lib / "metrics.py").read_text()
    assert {n for n in pg if f'"{n}"' not in source} == set()


def test_statements_differing_by_a_word_are_written_once_with_the_dialect_words():
    """#25: a statement whose dialects differ only by a word (now() / UTC_TIMESTAMP(6), an
    interval, a cast) is one block in sql/common, the word filled in per dialect."""
    once = {"queries.sql": ("task_insert", "task_has_lost_pending"),
            "webhooks.sql": ("endpoint_take_probe",)}
    for filename, names in once.items():
        for dialect in (POSTGRES, MYSQL):
            own = read_sql(dialect, filename)
            for name in names:
                assert f"-- name: {name}\n" not in own, (dialect.name, name)
                assert name in raw_queries(dialect, filename)
    pg, my = Queries(POSTGRES, "s.f"), Queries(MYSQL, "s.f")
    assert pg["task_insert"].endswith(
        "coalesce(%(data_hora)s::timestamptz, now()), "
        "coalesce(%(data_hora)s::timestamptz, now()))\nRETURNING id")
    assert "coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6))" in my["task_insert"]
    assert "RETURNING" not in my["task_insert"] and "now()" not in my["task_insert"]
    assert "now() - %(seconds)s * interval '1 second'" in pg["task_has_lost_pending"]
    assert ("UTC_TIMESTAMP(6) - INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND"
            in my["task_has_lost_pending"])
    probe = {d.name: Queries(d, "s.f", filename="webhooks.sql")["endpoint_take_probe"]
             for d in (POSTGRES, MYSQL)}
    assert "aberto_ate <= now()" in probe["postgres"]
    assert "aberto_ate <= UTC_TIMESTAMP(6)" in probe["mysql"]


def test_compat_statements_are_the_plain_ones_with_their_variant_parts():
    """#25: the statements beside 1.2.2 workers are written once with their plain ones; the
    loader makes both at load time (no per-call building), differing only in the parts."""
    q = Queries(POSTGRES, "s.f", "s.sub")
    p = q.parts
    pairs = {"task_claim_locked": [("part_claim_pick", "part_claim_pick_compat"),
                                   ("part_claim_lock", "part_claim_lock_compat")],
             "task_claim_batch": [("part_claim_pick", "part_claim_pick_compat"),
                                  ("part_claim_xact_lock", "part_claim_xact_lock_compat")],
             "task_promote_scheduled": [("", "part_promote_guard_compat")],
             "subscriber_fanout": [("part_fanout_payload", "part_fanout_payload_compat")]}
    for name, swaps in pairs.items():
        plain, compat = q[name], q[name + "_compat"]
        assert plain != compat
        for old, new in swaps:
            assert p[new] in compat and p[new] not in plain, (name, new)
            if old:
                plain = plain.replace(p[old], p[new])
            else:  # an optional part: a line of its own in the _compat statement only
                compat = "\n".join(ln for ln in compat.splitlines() if ln.strip() != p[new])
        assert plain == compat, name
    assert "pg_try_advisory_xact_lock_shared(3)" in q["task_claim_locked_compat"]
    assert "pg_try_advisory_lock(t.id)" in q["task_claim_locked_compat"]
    assert "pg_try_advisory_lock(t.id)" not in q["task_claim_locked"]
    assert "lock_shared(3)" not in q["task_promote_scheduled"]
    # MySQL has no mixed-fleet statements
    assert not any(n.endswith("_compat") for n in Queries(MYSQL, "s.f", "s.sub").names())
