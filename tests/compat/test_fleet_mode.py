"""Mixed-fleet mode is a property of the queue (engine/fleet_mode.py): a queue the
current DDL creates is out of it, a queue brought by `schema upgrade` is in it, `nsj-queue
compat on|off` changes it, running workers follow within about a second, and a worker that
sees a real 1.2.2 worker on a queue out of it puts the queue back."""

from __future__ import annotations

import subprocess
import sys
import uuid

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import POSTGRES
from tests.compat.mixed import LEGACY_PLAIN
from tests.fixtures.processes import ROOT, wait_ready
from tests.fixtures.waiting import eventually


def _stored(conn, table):
    return QueueAdmin(conn, table).compat_state()["gravado"]


def _nsjq(env, *args):
    return subprocess.run([sys.executable, "-m", "nsj_queue_lib", *args], env=env,
                          cwd=str(ROOT), capture_output=True, text=True, timeout=60)


def _raw_key_holders(queue, task_id):
    """pids holding 1.2.2's key of `task_id` (one-bigint advisory lock of the raw id)."""
    rows = queue.sql("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                     "AND classid = %s AND objid = %s AND objsubid = 1",
                     (task_id >> 32, task_id & 0xFFFFFFFF))
    return [r["pid"] for r in rows]


def test_every_way_of_creating_a_queue_starts_out_of_mixed_fleet_mode(pg_server):
    conn = pg_server.connect()
    conn.autocommit = True
    s = f"fm_{uuid.uuid4().hex[:10]}"
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {s}")
        # 1. the printed DDL alone, through psql (autocommit, statement by statement)
        ddl = subprocess.run([sys.executable, "-m", "nsj_queue_lib.db_gen", s, "impressa"],
                             cwd=str(ROOT), capture_output=True, text=True, check=True).stdout
        env = pg_server.env()
        psql = subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-q", "-h", env["DB_HOST"],
                               "-p", env["DB_PORT"], "-U", env["DB_USER"], env["DB_BASE"]],
                              input=ddl, capture_output=True, text=True)
        assert psql.returncode == 0, psql.stderr
        # 2. schema.apply (one transaction)
        schema.apply(conn, POSTGRES, s, "aplicada")
        for fila in ("impressa", "aplicada"):
            assert _stored(conn, f"{s}.{fila}") is False, fila
            assert schema.verify(conn, POSTGRES, s, fila).ok
        # Applying again changes nothing, even after `compat on`.
        QueueAdmin(conn, f"{s}.aplicada").compat_on(por="teste")
        schema.apply(conn, POSTGRES, s, "aplicada")
        assert _stored(conn, f"{s}.aplicada") is True
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        conn.close()


def test_upgrade_of_a_previous_2x_queue_keeps_it_in_mixed_fleet_mode(pg_server):
    """A queue at the previous schema version (its control table without the mode, a row
    written by an earlier pause): in mixed-fleet mode before and after `schema upgrade`."""
    conn = pg_server.connect()
    conn.autocommit = True
    s = f"fm_{uuid.uuid4().hex[:10]}"
    table = f"{s}.anterior"
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {s}")
        schema.apply(conn, POSTGRES, s, "anterior")
        with conn.cursor() as cur:  # what the previous version had
            cur.execute(f"ALTER TABLE {s}.anterior_controle DROP COLUMN compat_1_2_2, "
                        "DROP COLUMN compat_alterado_em, DROP COLUMN compat_alterado_por")
            cur.execute(f"UPDATE {s}.anterior_controle SET pausada = false")
            cur.execute(f"COMMENT ON TABLE {table} IS 'nsj_queue_lib schema 3 (a2dce0afe6e4)'")
        state = QueueAdmin(conn, table).compat_state()
        assert (state["gravado"], state["misto"]) == (None, True)
        schema.upgrade(conn, POSTGRES, s, "anterior")
        assert schema.verify(conn, POSTGRES, s, "anterior").ok
        assert _stored(conn, table) is True
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        conn.close()


def test_upgrade_of_a_1_2_2_table_is_mixed_until_compat_off(legacy_queue):
    conn, fleet = legacy_queue
    table = f"{fleet.schema}.{fleet.fila}"
    schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
    state = QueueAdmin(conn, table).compat_state()
    assert (state["gravado"], state["misto"]) == (None, True)
    env = {**fleet.v2_env(), "QUEUE_TABLE": table}
    off = _nsjq(env, "compat", "off")
    assert off.returncode == 0, off.stderr
    assert "fora do modo de frota mista" in off.stdout
    assert _stored(conn, table) is False
    status = _nsjq(env, "compat", "status", "--json")
    assert status.returncode == 0 and '"modo_misto": false' in status.stdout


def test_compat_off_is_refused_beside_a_live_1_2_2_worker_and_a_2x_worker_puts_it_back(
        legacy_queue):
    """`compat off` refuses while a real 1.2.2 worker is connected; forced, the queue is out
    of mixed-fleet mode until a 2.x worker starts, sees the 1.2.2 worker and puts it back;
    then both run the tasks, each exactly once."""
    conn, fleet = legacy_queue
    s, f = fleet.schema, fleet.fila
    table = f"{s}.{f}"
    schema.upgrade(conn, POSTGRES, s, f)
    fleet.start_legacy(LEGACY_PLAIN, "vivo")
    fleet.produce_legacy("plain", 0, 3, "r")
    eventually(lambda: QueueAdmin(conn, table).compat_state()["sinais"], 30,
               message="a sessão da 1.2.2 é vista")
    env = {**fleet.v2_env(), "QUEUE_TABLE": table}
    refused = _nsjq(env, "compat", "off")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "conexão(ões) de outro programa com" in refused.stderr
    assert _stored(conn, table) is None  # unchanged
    forced = _nsjq(env, "compat", "off", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith("Forçado.")
    assert _stored(conn, table) is False

    v2 = fleet.start_v2("tests.compat.worker_v2", "vigia")
    eventually(lambda: _stored(conn, table) is True, 30,
               message="o worker 2.x devolve a fila ao modo de frota mista")
    state = QueueAdmin(conn, table).compat_state()
    assert "viu um worker 1.2.2" in state["alterado_por"]
    eventually(lambda: "Worker nsj-queue-lib 1.2.2 visto na fila" in v2.log(), 10,
               message="o aviso do worker 2.x")
    fleet.produce_legacy("plain", 3, 200, "r")

    def done():
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(DISTINCT chave), count(*) FROM {s}.efeitos")
            return cur.fetchone() == (203, 203)

    eventually(done, 120, interval=0.5, message="todas as tarefas uma vez")


def test_a_running_worker_follows_the_queue_mode_without_restart(pg_queue):
    """No QUEUE_COMPAT_1_2_2: the worker holds 1.2.2's key of a running task only while the
    queue is in mixed-fleet mode, and follows `compat on|off` within about a second."""
    worker = pg_queue.start_worker(drop_env=["QUEUE_COMPAT_1_2_2"])
    wait_ready(worker)
    admin = QueueAdmin(pg_queue.new_conn(), pg_queue.table)
    admin.session.conn.autocommit = True

    def run_and_look(name):
        task = pg_queue.insert({"efeito": name, "sleep": 1.5})
        pg_queue.wait_status(task, "processando")
        held = _raw_key_holders(pg_queue, task)
        pg_queue.wait_status(task, "sucesso")
        return held

    assert run_and_look("novo") == []  # a new queue: not mixed
    admin.compat_on(por="teste")
    eventually(lambda: run_and_look("ligado") != [], 10, interval=0,
               message="o worker passa a segurar a chave da 1.2.2")
    admin.compat_off(por="teste")
    eventually(lambda: run_and_look("desligado") == [], 10, interval=0,
               message="o worker deixa de segurar a chave da 1.2.2")
    assert "modo de frota mista com a 1.2.2" in worker.log()


def test_a_role_that_cannot_see_other_sessions_says_it_cannot_tell(pg_queue, pg_server):
    """Without pg_read_all_stats, sessions of other roles hide their statements: `compat
    off` names them and refuses (a 1.2.2 worker could be among them); --force overrides."""
    import psycopg2

    role = f"nsjq_r_{uuid.uuid4().hex[:8]}"
    pg_queue.sql(f"CREATE ROLE {role} LOGIN")
    pg_queue.sql(f'GRANT USAGE ON SCHEMA "{pg_queue.schema}" TO {role}')
    pg_queue.sql(f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{pg_queue.schema}" TO '
                 f'{role}')
    env = pg_server.env()
    other = psycopg2.connect(host=env["DB_HOST"], port=env["DB_PORT"], user=env["DB_USER"],
                             dbname=env["DB_BASE"], application_name="outro programa")
    limited = psycopg2.connect(host=env["DB_HOST"], port=env["DB_PORT"], user=role,
                               dbname=env["DB_BASE"])
    limited.autocommit = True
    try:
        with other.cursor() as cur:
            cur.execute("SELECT 1")
        admin = QueueAdmin(limited, pg_queue.table)
        state = admin.compat_state()
        assert state["ocultas"] >= 1 and state["sinais"] == []
        try:
            admin.compat_off(por="teste")
        except Exception as exc:
            assert "não é possível saber" in str(exc)
        else:
            raise AssertionError("compat off aceito sem ver as outras conexões")
        admin.compat_on(por="teste")
        assert admin.compat_off(por="teste", force=True)
        assert admin.compat_state()["gravado"] is False
    finally:
        other.close()
        limited.close()
        pg_queue.sql(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{pg_queue.schema}" FROM {role}')
        pg_queue.sql(f'REVOKE ALL ON SCHEMA "{pg_queue.schema}" FROM {role}')
        pg_queue.sql(f"DROP ROLE {role}")
