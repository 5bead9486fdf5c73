from __future__ import annotations


def test_worker_runs_a_task_and_commits_its_effect(pg_queue):
    task_id = pg_queue.insert({"efeito": "a"})
    pg_queue.start_worker()
    row = pg_queue.wait_status(task_id, "sucesso")
    assert row["mensagem"] == f"ok {task_id}"
    effects = pg_queue.effects()
    assert [(e["tarefa_id"], e["chave"]) for e in effects] == [(task_id, "a")]
