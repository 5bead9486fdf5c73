from __future__ import annotations


def test_worker_runs_a_task_and_commits_its_effect(queue):
    task_id = queue.insert({"efeito": "a"})
    queue.start_worker()
    row = queue.wait_status(task_id, "sucesso")
    assert row["mensagem"] == f"ok {task_id}"
    effects = queue.effects()
    assert [(e["tarefa_id"], e["chave"]) for e in effects] == [(task_id, "a")]
