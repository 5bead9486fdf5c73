"""The scripted worker plus a task that deadlocks on every run (python -m
tests.workers.deadlocking), for batch-mode tests on MySQL/MariaDB.

Payload key `impasse` (object): `tabela` a table of the queue's database with rows
k = 1 and 2, `peso` a table with many rows; `raise` whether the task lets the deadlock
error out (else its code catches it and returns normally).  The task locks row 1 through
`bd_conn`; a rival session of its own, heavier (it updates every row of `peso`, so InnoDB
rolls the task's transaction back), locks row 2 and then asks for row 1; the task asks
for row 2: a cycle, whichever request comes first.  Each deadlock is appended as an
effect of tipo 'impasse' on a connection of its own (committed, so the test can count
the runs although the task's transaction is rolled back).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict

from nsj_queue_lib.db.mysql_driver import error_classes
from tests.workers.effects import effects_table
from tests.workers.scripted import ScriptedWorker


def _connect(autocommit: bool) -> Any:
    import pymysql

    return pymysql.connect(host=os.environ["DB_HOST"], port=int(os.environ["DB_PORT"]),
                           user=os.environ["DB_USER"], password=os.environ.get("DB_PASS", ""),
                           database=os.environ["DB_BASE"], autocommit=autocommit,
                           charset="utf8mb4", connect_timeout=5)


def _deadlock(spec: Dict[str, Any], tarefa: Dict[str, Any], bd_conn: Any) -> None:
    tabela, peso = spec["tabela"], spec["peso"]
    rival = _connect(autocommit=False)
    try:
        with bd_conn.cursor() as cur:
            cur.execute(f"SELECT v FROM {tabela} WHERE k = 1 FOR UPDATE")
        with rival.cursor() as cur:
            cur.execute(f"UPDATE {peso} SET v = v + 1")  # the heavier transaction
            cur.execute(f"SELECT v FROM {tabela} WHERE k = 2 FOR UPDATE")

        def rival_asks() -> None:
            try:
                with rival.cursor() as cur:
                    cur.execute(f"SELECT v FROM {tabela} WHERE k = 1 FOR UPDATE")
            except Exception:  # the rival chosen as victim: no deadlock for the task
                pass

        thread = threading.Thread(target=rival_asks, daemon=True)
        thread.start()
        try:
            with bd_conn.cursor() as cur:
                cur.execute(f"SELECT v FROM {tabela} WHERE k = 2 FOR UPDATE")
        except error_classes("OperationalError") as exc:
            log = _connect(autocommit=True)
            try:
                with log.cursor() as cur:
                    cur.execute(f"INSERT INTO {effects_table()} (tarefa_id, chave, tipo, pid) "
                                "VALUES (%s, %s, 'impasse', %s)",
                                (tarefa["id"], str(exc.args[0]), os.getpid()))
            finally:
                log.close()
            if spec.get("raise"):
                raise
        finally:
            thread.join(30)
            rival.rollback()
    finally:
        rival.close()


class DeadlockingWorker(ScriptedWorker):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> Any:
        data = json.loads(payload) if payload else {}
        result = super().execute(payload, tarefa, bd_conn)
        if data.get("impasse"):
            _deadlock(data["impasse"], tarefa, bd_conn)
        return result


if __name__ == "__main__":
    DeadlockingWorker().run()
