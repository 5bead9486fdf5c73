"""`retry ID` on a chain that failed and waits for its next attempt runs that attempt now
(a real worker, woken at once), and `tasks list --falhando` lists such chains."""

from __future__ import annotations

import json
import os

from tests.admin.test_cli import cli
from tests.fixtures.processes import ROOT, wait_ready
from tests.fixtures.waiting import eventually


def test_retry_runs_the_waiting_attempt_of_a_failed_chain_now(pg_queue):
    # Back-off of 10 minutes per attempt: without the retry the second attempt would wait.
    worker = pg_queue.start_worker(QUEUE_MAX_RETRY="3", QUEUE_BASE_INTERVAL_RETRY="10",
                                   QUEUE_WAIT_NOTIFY_INTERVAL="300")
    wait_ready(worker)
    env = {**os.environ, **pg_queue.env(), "PYTHONPATH": str(ROOT)}
    root = pg_queue.insert({"efeito": "x", "fail_until": 2})
    waiting = eventually(lambda: pg_queue.rows("id_inicial = %s AND status = 'agendada'", (root,)),
                         20, message="a segunda tentativa aguarda o intervalo")[0]
    ok = pg_queue.insert({"efeito": "outra"})
    pg_queue.wait_status(ok, "sucesso")

    listed = cli("tasks", "list", "--falhando", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [waiting["id"]]

    # Any attempt's id names the chain: here the failed first attempt.
    res = cli("retry", str(root), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"tentativa #{waiting['id']} antecipada para agora" in res.stdout
    pg_queue.wait_status(waiting["id"], "sucesso", timeout=10)
    assert [e["chave"] for e in pg_queue.effects() if e["chave"] == "x"] == ["x"]
    assert cli("tasks", "list", "--falhando", "--json", env=env).stdout.strip() == "[]"

    # A task waiting for its first time (not after a failure) is not run early.
    later = pg_queue.insert({"efeito": "futura"}, data_hora=pg_queue.db_now().replace(year=2099))
    refused = cli("retry", str(later), env=env)
    assert refused.returncode == 1, refused.stdout
    assert "aguarda nova tentativa após uma falha" in refused.stderr
    assert pg_queue.row(later)["data_hora"].year == 2099
