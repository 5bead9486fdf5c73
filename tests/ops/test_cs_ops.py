"""Health, status and views on MariaDB with the real queue server and a real worker."""

from __future__ import annotations

import json

from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually


def _probe(env: dict):
    return run_python(["-m", "nsj_queue_lib.health", "--json"], env=env)


def test_mariadb_worker_health_status_and_views(mariadb_socket_queue, tmp_path):
    q = mariadb_socket_queue
    path = tmp_path / "w.health"
    q.start_server()
    q.start_ready_worker(QUEUE_HEALTH_FILE=str(path), QUEUE_MAX_RETRY="2")
    env = q.env(QUEUE_HEALTH_FILE=str(path))
    res = eventually(lambda: (r := _probe(env)).returncode == 0 and r, timeout=15,
                     message="saudável")
    assert json.loads(res.stdout)["estado"]["consumidor_conectado"] is True

    ok = q.insert({"efeito": "ok"})
    bad = q.insert({"fail": True, "efeito": "ruim"})
    q.wait_chain_done(ok)
    q.wait_chain_done(bad)
    q.wait_idle()

    status_env = {k: v for k, v in env.items() if k.startswith("DB_") or k == "QUEUE_TABLE"}
    res = run_python(["-m", "nsj_queue_lib.status", "--json"], env=status_env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["banco"] == "mysql"
    assert data["cadeias_por_status"] == {"falha": 1, "sucesso": 1}
    assert data["mortas_por_status"] == {"sucesso": 1}
    assert data["mortas_24h"]["ultimas"][0]["live_id"] == bad
    chains = {r["id_inicial"]: r for r in q.sql(f"SELECT * FROM {q.quote(q.schema)}."
                                                 f"{q.quote(q.fila + '_cadeias')}")}
    assert chains[bad]["status"] == "falha" and chains[bad]["tentativas"] == 2
    assert chains[bad]["enviada_fila_mortos"] == 1 and chains[bad]["morta_status"] == "sucesso"
    assert chains[ok]["status"] == "sucesso" and chains[ok]["tentativas"] == 1

    # The queue server goes away: the worker's next heartbeat says so.
    q.current_server.stop()
    res = eventually(lambda: (r := _probe(env)).returncode == 1 and r, timeout=30,
                     message="não saudável sem o servidor")
    assert "servidor de filas" in json.loads(res.stdout)["motivo"]
