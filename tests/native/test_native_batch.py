"""Batch mode (QUEUE_BATCH_SIZE) in MySQL native mode on MariaDB, with real workers: what
only MariaDB has (its joint success mark, deadlocks, statement counts, a producer beside a
running batch).  Batch mode and QUEUE_CONCURRENCY on every backend: tests/contract."""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.runtime.batch import BatchClaimer, BatchRunner
from tests.fixtures.database import statements_per_task
from tests.fixtures.processes import wait_ready
from tests.fixtures.routers import FunctionRouter, insert_effect
from tests.fixtures.waiting import eventually


def test_joint_success_mark_on_mariadb_and_a_refused_one_redoes_the_batch(mariadb_queue):
    """The successes of a batch are marked in one UPDATE at its end, each with its own
    message and never on a failed task; when a trigger refuses one message that UPDATE
    fails, the batch is rolled back and runs again marking each task at once, so only
    the refused task fails."""
    mariadb_queue.sql(f"""CREATE TRIGGER {mariadb_queue.schema}.{mariadb_queue.fila}_recusa
               BEFORE UPDATE ON {mariadb_queue.table} FOR EACH ROW
               BEGIN
                 IF NEW.status = 'sucesso' AND NEW.mensagem = 'recusada' THEN
                   SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensagem recusada pelo gatilho';
                 END IF;
               END""")
    payloads = [{"efeito": f"j{i}", "fail": i % 4 == 1} for i in range(8)]
    ids = mariadb_queue.insert_many(payloads)
    worker = mariadb_queue.start_worker(QUEUE_BATCH_SIZE="8", QUEUE_MAX_RETRY="1")
    wait_ready(worker)
    for task_id in ids:
        mariadb_queue.wait_chain_done(task_id)
    failed = {i for i, p in zip(ids, payloads) if p["fail"]}
    for task_id in ids:
        row = mariadb_queue.row(task_id)
        if task_id in failed:
            assert row["status"] == "falha" and "falha programada" in row["mensagem"]
        else:
            assert (row["status"], row["mensagem"]) == ("sucesso", f"ok {task_id}")
    assert "marca de sucesso conjunta" not in worker.log()
    # Now a batch with a message the trigger refuses.
    more = mariadb_queue.insert_many([{"efeito": f"k{i}",
                                       **({"return": "recusada"} if i == 2 else {})}
                                      for i in range(4)])
    for task_id in more:
        mariadb_queue.wait_chain_done(task_id)
    assert mariadb_queue.row(more[2])["status"] == "falha"
    assert "recusada pelo gatilho" in mariadb_queue.row(more[2])["mensagem"]
    assert all(mariadb_queue.row(i)["status"] == "sucesso" for i in more if i != more[2])
    effects = [e["tarefa_id"] for e in mariadb_queue.effects("tipo = 'execute'")]
    assert sorted(effects) == sorted(i for i in [*ids, *more] if i not in failed
                                     and i != more[2])  # once each
    assert "marca de sucesso conjunta" in worker.log()
    assert worker.proc.poll() is None


def test_a_producer_inserts_while_a_batch_runs(mariadb_queue, tmp_path):
    # Fails before the fix: at REPEATABLE READ the batch claim's next-key locks made every
    # INSERT of a waiting task wait for the batch's COMMIT (here: lock wait timeout).
    started, release = tmp_path / "started", tmp_path / "release"
    ids = mariadb_queue.insert_many([{"efeito": "a", "started_file": str(started),
                                      "wait_file": str(release)}, {"efeito": "b"}])
    worker = mariadb_queue.start_worker(QUEUE_BATCH_SIZE="5")
    eventually(started.exists, 30, message="batch started")
    conn = mariadb_queue.new_conn()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 5")
        late = mariadb_queue.client(conn).insert_task("teste", "teste", "teste", None,
                                                      '{"efeito": "c"}')
        conn.commit()
    finally:
        conn.close()
    assert mariadb_queue.row(late)["status"] == "pendente"
    release.touch()
    mariadb_queue.wait_idle(timeout=30)
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == sorted([*ids, late])
    assert worker.proc.poll() is None


def test_a_batch_on_mariadb_costs_two_statements_per_task_and_six_per_batch(mariadb_queue):
    """Counted by the server for the session: per task its SAVEPOINT (no RELEASE: the
    next SAVEPOINT replaces it) and its work; per batch BEGIN, the claim's SELECT and
    UPDATE, one SAVEPOINT whose answer shows the transaction still open (see the deadlock
    test above), the joint success UPDATE and COMMIT.  (Before: 4 per task and 4 per
    batch.)"""
    settings = mariadb_queue.settings()
    ids = [mariadb_queue.insert({"n": n}) for n in range(4 * 9)]
    session = DbSession.open(settings)
    try:
        repo = TaskRepository(session, settings.queue_table)
        backend = make_backend(settings)
        backend.check(session)
        claimer = BatchClaimer(backend.guard(session, repo), backend.capabilities, 4)
        runner = BatchRunner(settings, repo, FunctionRouter(insert_effect(mariadb_queue.qeffects)))

        def run_batch() -> None:
            assert runner.run(claimer.claim()) == 4

        run_batch()  # steady state: the claim is prepared once per connection (MariaDB)
        cost = statements_per_task(session, run_batch, short=2, long=6)
        assert cost == {"Questions": 4 * 2 + 6, "Com_begin": 1, "Com_commit": 1}
    finally:
        session.close()
    assert sorted(e["tarefa_id"] for e in mariadb_queue.effects()) == ids  # each once
    assert all(r["status"] == "sucesso" and r["mensagem"] == "Concluído com sucesso"
               for r in mariadb_queue.rows())


@pytest.mark.parametrize("raises", [False, True], ids=["caught", "raised"])
def test_a_deadlock_caught_by_the_last_task_never_marks_tasks_it_no_longer_holds(
        mariadb_queue, raises):
    """MariaDB: the last task of a batch catches a deadlock that rolled the whole batch
    transaction back (claim and effects); its error answer carries no transaction status,
    so the client still believes the transaction open.  Meanwhile another worker claims
    the tasks, now waiting again.  The joint success UPDATE must not run in autocommit and
    mark that worker's running tasks 'sucesso' (their effects were rolled back): the batch
    is given up instead.  `raises`: the task lets the deadlock out (a plain failure in
    per-task mode); the batch is given up too (before: ROLLBACK TO SAVEPOINT of a savepoint
    the rollback ended raised 1305, and the worker restarted its connection with a
    traceback, as for a bug)."""
    import threading

    import pymysql

    from nsj_queue_lib.db.mysql_driver import error_classes

    # (bd_conn is the driver DB_MYSQL_DRIVER chose: NSJQ_TEST_MYSQL_DRIVER)
    task_errors = error_classes("OperationalError")

    settings = mariadb_queue.settings()
    scratch = f"{mariadb_queue.schema}.nsjq_impasse"
    mariadb_queue.sql(f"CREATE TABLE {scratch} (k INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    mariadb_queue.sql(f"CREATE TABLE {scratch}_peso (k INT AUTO_INCREMENT PRIMARY KEY, v INT) "
                      "ENGINE=InnoDB")
    mariadb_queue.sql(f"INSERT INTO {scratch} SELECT seq, 0 FROM "
                      f"{mariadb_queue.schema}.seq_1_to_10")
    mariadb_queue.sql(f"INSERT INTO {scratch}_peso (v) SELECT seq FROM "
                      f"{mariadb_queue.schema}.seq_1_to_2000")
    ids = [mariadb_queue.insert({"n": n}) for n in range(3)]
    other = mariadb_queue.server.connect(mariadb_queue.schema,
                                         autocommit=True)  # the rival transaction
    rival = mariadb_queue.server.connect(mariadb_queue.schema,
                                         autocommit=True)  # another worker's claim
    with rival.cursor() as cur:  # (should the batch still hold the rows: fail fast)
        cur.execute("SET SESSION innodb_lock_wait_timeout = 5")
    caught: list = []
    errors: list = []
    session = DbSession.open(settings)
    try:
        rival_errors: list = []

        def rival_asks_for(k: int) -> None:
            try:
                with other.cursor() as cur:
                    cur.execute(f"SELECT v FROM {scratch} WHERE k = %s FOR UPDATE", (k,))
            except pymysql.err.OperationalError as exc:
                rival_errors.append(exc.args)
            other.rollback()

        effect = insert_effect(mariadb_queue.qeffects)

        def handler(tarefa, bd_conn):
            effect(tarefa, bd_conn)
            if tarefa["id"] != ids[-1]:
                return None
            # The rival is the heavier transaction, so the server rolls the batch back;
            # should it roll the rival back instead (its choice), try on two other rows.
            for first in (1, 3, 5, 7, 9):
                with bd_conn.cursor() as cur:
                    cur.execute(f"SELECT v FROM {scratch} WHERE k = %s FOR UPDATE", (first,))
                with other.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(f"UPDATE {scratch}_peso SET v = v + 1")
                    cur.execute(f"SELECT v FROM {scratch} WHERE k = %s FOR UPDATE",
                                (first + 1,))
                thread = threading.Thread(target=rival_asks_for, args=(first,))
                thread.start()
                try:  # a cycle, whichever of the two requests comes first
                    with bd_conn.cursor() as cur:
                        cur.execute(f"SELECT v FROM {scratch} WHERE k = %s FOR UPDATE",
                                    (first + 1,))
                except task_errors as exc:  # caught by the task's code
                    caught.append(exc.args[0])
                    errors.append(exc)
                thread.join(20)
                if caught:
                    break
            with rival.cursor() as cur:  # the tasks wait again: another worker takes them
                cur.execute(f"UPDATE {mariadb_queue.table} SET status = 'processando' "
                            f"WHERE id IN ({', '.join(map(str, ids))}) AND status = 'pendente'")
            if raises and errors:
                raise errors[-1]
            return None

        repo = TaskRepository(session, settings.queue_table)
        backend = make_backend(settings)
        backend.check(session)
        claimer = BatchClaimer(backend.guard(session, repo), backend.capabilities, 3)
        from nsj_queue_lib.observability.observe import TaskObserver
        observer = TaskObserver(settings.queue_name, settings.queue_max_retry)
        runner = BatchRunner(settings, repo, FunctionRouter(handler), observer)
        batch = claimer.claim()
        assert [t["id"] for t in batch.tasks] == ids
        ran = runner.run(batch)
        assert caught == [1213], rival_errors
        assert ran == 0
        # Each claim the given-up batch reported ends there (no outcome kept, no leak).
        snap = observer.snapshot()
        assert (snap["claims"], snap["taken_over"]) == (3, 3)
        assert observer._starts == {}
    finally:
        session.close()
        for conn in (other, rival):
            conn.close()
    assert [r["status"] for r in (mariadb_queue.row(i) for i in ids)] == ["processando"] * 3
    assert mariadb_queue.effects() == []


@pytest.mark.parametrize("raises", [False, True], ids=["caught", "raised"])
def test_a_task_that_deadlocks_on_every_run_gets_a_recorded_failure(mariadb_queue, raises):
    """MariaDB, batch mode, a real worker: the middle task of a batch deadlocks on every
    run (a rival session of its own locks two rows in the opposite order), caught by its
    code or let out.  Each deadlock rolls the whole batch back.  The worker must bound
    the reruns: after BATCH_DEADLOCK_RUNS runs that ended the batch, the task's attempt is
    a recorded failure (retry with tentativa 2) and the other tasks are done once each.
    Before: the batch ran again for ever, with no failure recorded."""
    from nsj_queue_lib.runtime.batch import BATCH_DEADLOCK_RUNS

    scratch = f"{mariadb_queue.schema}.nsjq_impasse"
    mariadb_queue.sql(f"CREATE TABLE {scratch} (k INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    mariadb_queue.sql(f"CREATE TABLE {scratch}_peso (k INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    mariadb_queue.sql(f"INSERT INTO {scratch} VALUES (1, 0), (2, 0)")
    mariadb_queue.sql(f"INSERT INTO {scratch}_peso SELECT seq, 0 FROM "
                      f"{mariadb_queue.schema}.seq_1_to_2000")
    spec = {"tabela": scratch, "peso": f"{scratch}_peso", "raise": raises}
    ids = mariadb_queue.insert_many([{"efeito": "a"}, {"efeito": "b", "impasse": spec},
                                     {"efeito": "c"}])
    culprit = ids[1]
    worker = mariadb_queue.start_worker("tests.workers.deadlocking", QUEUE_BATCH_SIZE="3",
                                        QUEUE_BASE_INTERVAL_RETRY="10")  # the retry waits 600 s
    row = mariadb_queue.wait_status(culprit, "falha", timeout=60)
    assert row["tentativa"] == 1
    assert "impasse" in row["mensagem"] and "reenfileirada" in row["mensagem"], row
    for task_id in (ids[0], ids[2]):
        mariadb_queue.wait_status(task_id, "sucesso")
    # The task ran a bounded number of times, each ending in a deadlock of its own.
    runs = mariadb_queue.effects("tipo = 'impasse'")
    assert [(e["tarefa_id"], e["chave"]) for e in runs] == \
        [(culprit, "1213")] * BATCH_DEADLOCK_RUNS, runs
    # The others' work committed once; the culprit's was rolled back every time.
    assert (sorted(e["tarefa_id"] for e in mariadb_queue.effects("tipo = 'execute'"))
            == [ids[0], ids[2]])
    [retry] = [r for r in mariadb_queue.rows() if r["id"] not in ids]
    assert (retry["tentativa"], retry["status"], retry["id_inicial"]) == (2, "agendada", culprit)
    assert "impasse" in worker.log()
    assert worker.proc.poll() is None
