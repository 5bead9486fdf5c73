"""A worker driven by its payload, for tests (python -m tests.workers.scripted).

Payload keys (JSON object):
  efeito: str        insert a row into <schema>.efeitos through bd_conn (the task's tx)
  sleep: float       sleep before finishing
  wait_file: str     wait until this file exists (crash tests)
  started_file: str  create this file when the task starts
  fail: bool         raise RuntimeError
  sql_error: bool    run SQL that fails through bd_conn, catch the error and return normally
                     (PostgreSQL: the task's transaction is left aborted)
  fail_until: int    raise while tentativa < fail_until
  fail_dead: bool    raise in execute_dead too
  return: any        value returned by execute (default "ok <id>")
  system_exit: bool  raise SystemExit
  long_message: int  raise an error whose message has this many characters
  raise: str         raise RuntimeError(raise) (JSON escapes give NUL and lone surrogates)
  raise_unprintable: bool  raise an exception whose str() itself fails
  report: bool       insert an effect (tipo 'report') whose chave is a JSON description of
                     what execute received: sorted tarefa keys, payload type and text,
                     tentativa, id_inicial
Non-JSON payloads are parsed with json.loads, so they fail as a recorded error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict

from nsj_queue_lib.worker_base import WorkerBase
from tests.workers.effects import record_effect


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise ValueError("str() desta exceção falha")


class ScriptedWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> Any:
        data = json.loads(payload) if payload else {}
        if data.get("started_file"):
            Path(data["started_file"]).write_text(str(os.getpid()))
        if data.get("efeito"):
            record_effect(bd_conn, tarefa, data["efeito"], "execute")
        if data.get("sql_error"):
            try:
                bd_conn.execute("SELECT * FROM nsjq_tabela_que_nao_existe")
            except Exception:
                pass
        if data.get("report"):
            info = {"keys": sorted(tarefa.keys()), "payload_type": type(payload).__name__,
                    "payload": payload, "tentativa": tarefa["tentativa"],
                    "id_inicial": tarefa["id_inicial"]}
            record_effect(bd_conn, tarefa, json.dumps(info), "report")
        if data.get("wait_file"):
            while not Path(data["wait_file"]).exists():
                time.sleep(0.02)
        if data.get("sleep"):
            time.sleep(float(data["sleep"]))
        if data.get("system_exit"):
            raise SystemExit(3)
        if data.get("raise_unprintable"):
            raise UnprintableError("argumento")
        if "raise" in data:
            raise RuntimeError(data["raise"])
        if data.get("long_message"):
            raise ValueError("x" * int(data["long_message"]))
        if data.get("fail") or tarefa["tentativa"] < int(data.get("fail_until", 0)):
            raise RuntimeError(f"falha programada na tentativa {tarefa['tentativa']}")
        return data.get("return", f"ok {tarefa['id']}")

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> Any:
        data = json.loads(payload) if payload else {}
        record_effect(bd_conn, tarefa, data.get("efeito") or "morta", "dead")
        if data.get("fail_dead"):
            raise RuntimeError("falha programada na fila de mortos")
        return f"morta tratada {tarefa['id']} (original {tarefa['live_id']})"


if __name__ == "__main__":
    ScriptedWorker().run()
