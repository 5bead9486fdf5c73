"""The MySQL query file against the PostgreSQL one (no database needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsj_queue_lib.db import repository
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.queries import Queries, raw_queries

PARAM = re.compile(r"%\((\w+)\)s")

# Queries of one backend's own claim exist only in that dialect's file.
POSTGRES_ONLY = {"task_claim_locked", "task_finish_unlock", "notify", "task_claim_batch",
                 "task_finish_unlock_at_commit",
                 # 1.2.2-compatible claim keys (engine/keys.py)
                 "task_claim_locked_compat", "task_claim_batch_compat",
                 # locks a failed claim took (engine/postgres/backend.py PgGuard)
                 "task_locks_release_stale",
                 "task_promote_scheduled_compat", "subscriber_fanout_compat", "compat_evidence",
                 # the listener turn's granting statement (engine/postgres/listener_turn.py)
                 "task_due_beyond_one",
                 # the claim and the idle probe from the session's claim position
                 # (db/claim_position.py)
                 "task_seconds_to_next_due_from", "xmin_horizon_held"}
MYSQL_ONLY = {"task_claim_skip_locked", "task_mark_processing_locked", "task_list_processing",
              "task_finish_release", "task_finish_release_mark", "task_mark_processing_batch",
              "task_claim_ahead_pending",
              # the rescue's fence on servers without SKIP LOCKED (db/server_version.py)
              "task_try_lock_row_nowait", "session_lock_wait_get", "session_lock_wait_set",
              "session_lock_wait_get_singlestore", "session_lock_wait_set_singlestore",
              # READ COMMITTED only when the binary log is not in STATEMENT format
              "server_binlog_statement"}


def test_mysql_and_postgres_have_the_same_query_names_but_their_backends_own():
    assert set(raw_queries(MYSQL)) - MYSQL_ONLY == set(raw_queries(POSTGRES)) - POSTGRES_ONLY


@pytest.mark.parametrize("name", sorted(set(raw_queries(POSTGRES)) - POSTGRES_ONLY))
def test_each_query_takes_the_same_parameters_in_both_dialects(name):
    assert set(PARAM.findall(raw_queries(MYSQL)[name])) == set(
        PARAM.findall(raw_queries(POSTGRES)[name]))


def test_no_stub_queries_kept_for_name_parity():
    for body in raw_queries(MYSQL).values():
        assert "SIGNAL SQLSTATE" not in body.upper()
    assert not POSTGRES_ONLY & set(raw_queries(MYSQL))


def test_every_query_is_used_by_the_repository():
    source = Path(repository.__file__).read_text(encoding="utf-8")
    unused = {n for n in raw_queries(MYSQL) if f'"{n}"' not in source}
    assert unused == set()


def test_mysql_queries_render_with_backticks_and_no_stray_percent():
    q = Queries(MYSQL, "banco.fila", "banco.fila_subscriber")
    assert q.names() == set(raw_queries(MYSQL))
    assert "`banco`.`fila`" in q["task_get"]
    assert "`banco`.`fila_subscriber`" in q["subscriber_fanout"]
    for name in q.names():
        assert "%" not in PARAM.sub("", q[name]), name
        assert "RETURNING" not in q[name].upper(), name


def test_mysql_queries_use_microsecond_utc_clock():
    for name, body in raw_queries(MYSQL).items():
        upper = body.upper()
        assert "CURRENT_TIMESTAMP" not in upper and "NOW(" not in upper, name
    assert "UTC_TIMESTAMP(6)" in raw_queries(MYSQL)["task_claim_candidates"]
