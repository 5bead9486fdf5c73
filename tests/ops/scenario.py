"""A queue history with retries, dead letters and fan-out, written by the runtime's own code.

Attempts are claimed (`task_mark_processing`), finished (`task_finish`) or failed
(`record_failure`, which inserts the retry or the dead letter) exactly as
TaskRunner does, and publications fan out through `subscriber_fanout`, without
worker processes, so the same history is built on PostgreSQL and on MariaDB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.failure import record_failure


class Driver:
    """Runs attempts of a queue by hand (QUEUE_MAX_RETRY of `settings` applies)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.session = DbSession.open(settings)
        self.repo = TaskRepository(self.session, settings.queue_table,
                                   settings.queue_subscriber_table)
        self.client = QueueClient(self.session.conn, settings.queue_table,
                                  settings.queue_subscriber_table)

    def close(self) -> None:
        self.session.close()

    def insert(self, chave: str, processo: str = "proc") -> int:
        return self.client.insert_task("teste", "teste", processo, chave, {"chave": chave})

    def publish(self, chave: str, processo: str = "pub") -> int:
        return self.client.insert_task_pub_sub("teste", "teste", processo, chave,
                                               {"chave": chave})

    def add_subscriber(self, sub_id: str, processo: str = "pub") -> None:
        table = self.session.dialect.quote_table(self.settings.queue_subscriber_table)
        self.session.execute(f"INSERT INTO {table} (id, processo) VALUES (%(id)s, %(p)s)",
                             {"id": sub_id, "p": processo})

    def _claim(self, task_id: int) -> dict:
        tarefa = self.repo.task_mark_processing(task_id)
        assert tarefa is not None, f"tarefa {task_id} não estava pendente/agendada"
        return tarefa

    def succeed(self, task_id: int) -> None:
        self._claim(task_id)
        with self.session.transaction():
            if self.repo.task_get(task_id)["pub_sub"]:
                self.repo.subscriber_fanout(task_id)
            assert self.repo.task_finish(task_id, f"ok {task_id}")

    def fail(self, task_id: int) -> int:
        """Fail the attempt; return the id of what comes next (retry or dead letter)."""
        tarefa = self._claim(task_id)
        with self.session.transaction():
            assert record_failure(self.repo, tarefa, f"erro {task_id}", self.settings)
        return self.last_id()

    def last_id(self) -> int:
        table = self.session.dialect.quote_table(self.settings.queue_table)
        return int(self.session.fetch_value(f"SELECT max(id) FROM {table}"))

    def subscriber_task(self, publication_id: int, sub_id: str) -> int:
        table = self.session.dialect.quote_table(self.settings.queue_table)
        return int(self.session.fetch_value(
            f"SELECT id FROM {table} WHERE publication_id = %(p)s AND subscriber_id = %(s)s "
            "AND id_inicial IS NULL AND NOT dead", {"p": publication_id, "s": sub_id}))


@dataclass
class History:
    """Chain ids of the scenario (first attempt ids), by name."""

    ids: Dict[str, int] = field(default_factory=dict)
    dead: Dict[str, int] = field(default_factory=dict)  # live chain name -> dead chain id
    attempts: Dict[str, List[int]] = field(default_factory=dict)


def build(driver: Driver) -> History:
    """QUEUE_MAX_RETRY must be 2.

    ok          succeeds at once
    retry_ok    fails, then succeeds on the 2nd attempt
    to_dead     fails twice: dead letter, which fails once and then succeeds
    waiting     never claimed (pendente)
    retrying    failed once, its retry not yet run (agendada)
    pub         publication (processo 'pub') fanned out to s1 and s2:
                s1 succeeds; s2 fails twice and its dead letter is still pendente
    pub_nosub   publication of a processo with no subscriber (succeeds, no fan-out)
    """
    assert driver.settings.queue_max_retry == 2
    h = History()
    h.ids["ok"] = driver.insert("ok")
    driver.succeed(h.ids["ok"])

    h.ids["retry_ok"] = driver.insert("retry_ok")
    second = driver.fail(h.ids["retry_ok"])
    driver.succeed(second)
    h.attempts["retry_ok"] = [h.ids["retry_ok"], second]

    h.ids["to_dead"] = driver.insert("to_dead", processo="outro")
    second = driver.fail(h.ids["to_dead"])
    dead = driver.fail(second)
    h.dead["to_dead"] = dead
    dead_second = driver.fail(dead)
    driver.succeed(dead_second)
    h.attempts["to_dead"] = [h.ids["to_dead"], second]
    h.attempts["to_dead_dead"] = [dead, dead_second]

    h.ids["waiting"] = driver.insert("waiting")

    h.ids["retrying"] = driver.insert("retrying")
    h.attempts["retrying"] = [h.ids["retrying"], driver.fail(h.ids["retrying"])]

    driver.add_subscriber("s1")
    driver.add_subscriber("s2")
    h.ids["pub"] = driver.publish("pub")
    driver.succeed(h.ids["pub"])
    h.ids["s1"] = driver.subscriber_task(h.ids["pub"], "s1")
    h.ids["s2"] = driver.subscriber_task(h.ids["pub"], "s2")
    driver.succeed(h.ids["s1"])
    s2_second = driver.fail(h.ids["s2"])
    h.dead["s2"] = driver.fail(s2_second)
    h.attempts["s2"] = [h.ids["s2"], s2_second]

    h.ids["pub_nosub"] = driver.publish("pub_nosub", processo="ninguem")
    driver.succeed(h.ids["pub_nosub"])
    return h


def expected_chains(h: History) -> Dict[int, dict]:
    """Per chain id: the view columns the scenario determines."""
    def chain(tipo: str, status: str, tentativas: int, ultimo: int, processo: str = "proc",
              morta_id: Optional[int] = None, morta_status: Optional[str] = None,
              morta_tentativas: Optional[int] = None, estouro: bool = False,
              live_id: Optional[int] = None, publication_id: Optional[int] = None,
              subscriber_id: Optional[str] = None) -> dict:
        return {"tipo": tipo, "status": status, "tentativas": tentativas, "ultimo_id": ultimo,
                "processo": processo, "enviada_fila_mortos": morta_id is not None,
                "morta_id": morta_id, "morta_status": morta_status,
                "morta_tentativas": morta_tentativas, "estouro_tentativas": estouro,
                "dead": tipo == "morta", "live_id": live_id,
                "publication_id": publication_id, "subscriber_id": subscriber_id}

    i, d, a = h.ids, h.dead, h.attempts
    return {
        i["ok"]: chain("tarefa", "sucesso", 1, i["ok"]),
        i["retry_ok"]: chain("tarefa", "sucesso", 2, a["retry_ok"][1]),
        i["to_dead"]: chain("tarefa", "falha", 2, a["to_dead"][1], "outro", d["to_dead"],
                            "sucesso", 2, estouro=True),
        d["to_dead"]: chain("morta", "sucesso", 2, a["to_dead_dead"][1], "outro",
                            live_id=i["to_dead"]),
        i["waiting"]: chain("tarefa", "pendente", 1, i["waiting"]),
        i["retrying"]: chain("tarefa", "agendada", 2, a["retrying"][1]),
        i["pub"]: chain("publicacao", "sucesso", 1, i["pub"], "pub"),
        i["s1"]: chain("assinatura", "sucesso", 1, i["s1"], "pub", publication_id=i["pub"],
                       subscriber_id="s1"),
        i["s2"]: chain("assinatura", "falha", 2, a["s2"][1], "pub", d["s2"], "pendente", 1,
                       estouro=True, publication_id=i["pub"], subscriber_id="s2"),
        d["s2"]: chain("morta", "pendente", 1, d["s2"], "pub", live_id=i["s2"],
                       publication_id=i["pub"], subscriber_id="s2"),
        i["pub_nosub"]: chain("publicacao", "sucesso", 1, i["pub_nosub"], "ninguem"),
    }


# (processo, tipo, status) -> number of chains
EXPECTED_SUMMARY = {
    ("proc", "tarefa", "sucesso"): 2,
    ("proc", "tarefa", "pendente"): 1,
    ("proc", "tarefa", "agendada"): 1,
    ("outro", "tarefa", "falha"): 1,
    ("outro", "morta", "sucesso"): 1,
    ("pub", "publicacao", "sucesso"): 1,
    ("pub", "assinatura", "sucesso"): 1,
    ("pub", "assinatura", "falha"): 1,
    ("pub", "morta", "pendente"): 1,
    ("ninguem", "publicacao", "sucesso"): 1,
}


def normalize(row: dict) -> dict:
    """View row with MySQL's 0/1 booleans as bool, for comparison."""
    out = dict(row)
    for key in ("enviada_fila_mortos", "estouro_tentativas", "dead"):
        if out.get(key) is not None:
            out[key] = bool(out[key])
    for key in ("tentativas", "morta_tentativas", "ultimo_id", "morta_id", "live_id",
                "publication_id", "id_inicial", "cadeias"):
        if out.get(key) is not None:
            out[key] = int(out[key])
    return out
