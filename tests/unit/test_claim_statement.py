"""The per-task claim's SQL variants (TaskRepository._claim_statement)."""
from __future__ import annotations

from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.repository import TaskRepository


class _Session:
    dialect = POSTGRES


def _repo(legacy: bool, json: bool = False) -> TaskRepository:
    repo = TaskRepository(_Session(), "s.fila", legacy=legacy)  # type: ignore[arg-type]
    repo._json_claim = json  # (decided from the catalog on a real session)
    return repo


def test_claim_from_start_is_the_single_scan():
    for legacy in (False, True):
        repo = _repo(legacy)
        query = "task_claim_locked_compat" if legacy else "task_claim_locked"
        for lean in (False, True):
            name, sql = repo._claim_statement(query, True, lean, 1)
            assert "_full" in name and name.endswith("_1")
            assert "json_build_array" not in sql
            assert "prioridade >" not in sql and "pos_prio" not in sql  # not part_claim_pick
            assert "%(limit)s" not in sql and "LIMIT 1" in sql
            name, sql = repo._claim_statement(query, False, lean, 1)
            assert "_full" not in name and "%(pos_prio)s" in sql


def test_lean_claim_is_the_update_alone():
    repo = _repo(False)
    name, sql = repo._claim_statement("task_claim_locked", True, True, 1)
    assert name == "nsjq_claim_full_lean_1"
    assert sql.lstrip().startswith("UPDATE") and "nsjq_next_due" not in sql
    assert "%(unlock)s" in sql and "set_config('synchronous_commit'" in sql
    full_name, full_sql = repo._claim_statement("task_claim_locked", True, False, 1)
    assert full_name == "nsjq_claim_full_1" and "nsjq_turn_released" in full_sql
    assert repo._claim_statement("task_claim_locked", True, True, 1)[1] is sql  # cached


def test_json_claim_returns_the_id_and_one_text_value():
    for legacy in (False, True):
        query = "task_claim_locked_compat" if legacy else "task_claim_locked"
        repo, plain = _repo(legacy, json=True), _repo(legacy)
        for full in (False, True):
            for lean in (False, True):
                name, sql = repo._claim_statement(query, full, lean, 1)
                plain_name, plain_sql = plain._claim_statement(query, full, lean, 1)
                assert name == plain_name + "_j"  # its own prepared statement
                returning = sql.split("RETURNING ", 1)[1]
                assert returning.startswith("t.id, json_build_array(t.id, t.id_inicial, ")
                assert "::text AS tarefa_json" in returning
                # the same statement but for its RETURNING list
                assert sql.split("RETURNING ", 1)[0] == plain_sql.split("RETURNING ", 1)[0]


def test_one_row_claim_finds_its_row_by_equality():
    # (a generic plan for `= ANY(array)` may scan the whole table: tests/core/test_claim_plan)
    for legacy in (False, True):
        query = "task_claim_locked_compat" if legacy else "task_claim_locked"
        for full in (False, True):
            for lean in (False, True):
                _, one = _repo(legacy)._claim_statement(query, full, lean, 1)
                assert "t.id = (SELECT" in one and "ANY(ARRAY(" not in one
                _, many = _repo(legacy)._claim_statement(query, full, lean, 4)
                assert "t.id = ANY(ARRAY(SELECT" in many
