"""Mixed fleets: real nsj-queue-lib 1.2.2 workers and producers beside 2.x ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

from tests.compat.legacy import Legacy
from tests.fixtures.processes import ROOT

LEGACY_PLAIN = textwrap.dedent('''
    import os, random, time
    from nsj_queue_lib.worker_base import WorkerBase
    from nsj_queue_lib.settings import logger  # as 1.2.2's example workers do

    EFFECTS = os.environ["TEST_EFFECTS_TABLE"]
    SLEEP = float(os.environ.get("TEST_TASK_SLEEP", "0.01"))

    class Plain(WorkerBase):
        def execute(self, payload, tarefa, bd_conn):
            time.sleep(random.uniform(0, SLEEP))
            with bd_conn.conn.cursor() as cur:
                cur.execute(f"INSERT INTO {EFFECTS} (chave, tipo, pid) VALUES (%s, 'v1', %s)",
                            (payload, os.getpid()))
            return "ok v1"

    if __name__ == "__main__":
        Plain().run()
''')

LEGACY_PUBSUB = textwrap.dedent('''
    import os, random, time
    from nsj_queue_lib.worker_pub_sub_base import WorkerPubSubBase, Subscriber

    EFFECTS = os.environ["TEST_EFFECTS_TABLE"]
    SLEEP = float(os.environ.get("TEST_TASK_SLEEP", "0.01"))

    def effect(bd_conn, chave):
        time.sleep(random.uniform(0, SLEEP))
        with bd_conn.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {EFFECTS} (chave, tipo, pid) VALUES (%s, 'v1', %s)",
                        (chave, os.getpid()))

    class PubSub(WorkerPubSubBase):
        @Subscriber("s1")
        def s1(self, payload, subscription, tarefa, bd_conn):
            effect(bd_conn, "s1:" + payload["publication"])

        @Subscriber("s2")
        def s2(self, payload, subscription, tarefa, bd_conn):
            effect(bd_conn, "s2:" + payload["publication"])

        @Subscriber("s3")
        def s3(self, payload, subscription, tarefa, bd_conn):
            effect(bd_conn, "s3:" + payload["publication"])

    if __name__ == "__main__":
        PubSub().run()
''')

# Producer: python producer.py <kind: plain|pubsub|webhook> <first> <count> <prefix>
LEGACY_PRODUCER = textwrap.dedent('''
    import os, sys
    import psycopg2
    from nsj_queue_lib.queue_client import QueueClient

    kind, first, count, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    conn = psycopg2.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"],
                            dbname=os.environ["DB_BASE"], user=os.environ["DB_USER"])
    client = QueueClient(conn, os.environ["QUEUE_TABLE"], os.environ.get("QUEUE_SUBSCRIBER_TABLE"))
    insert = client.insert_task if kind == "plain" else client.insert_task_pub_sub
    for i in range(first, first + count):
        insert("teste", "teste", "proc", None, f"{prefix}{i:05d}")
        if i % 50 == 0:
            conn.commit()
    conn.commit()
    conn.close()
''')

ALL_MINUTES = ",".join(str(m) for m in range(60))


class Proc:
    """A process with its log file; SIGKILL-able."""

    def __init__(self, argv: List[str], env: Dict[str, str], cwd: Path, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


class Fleet:
    """Starts 1.2.2 and 2.x processes on one queue; stops them all at the end."""

    def __init__(self, legacy: Legacy, db_env: Dict[str, str], schema: str, fila: str,
                 log_dir: Path, extra: Optional[Dict[str, str]] = None) -> None:
        self.legacy = legacy
        self.schema, self.fila = schema, fila
        self.log_dir = log_dir
        self.procs: List[Proc] = []
        self.common = {
            **db_env,
            "QUEUE_NAME": fila,
            "QUEUE_TABLE": f"{schema}.{fila}",
            "QUEUE_SUBSCRIBER_TABLE": f"{schema}.{fila}_subscriber",
            "QUEUE_MAX_RETRY": "5",
            "QUEUE_BASE_INTERVAL_RETRY": "0",
            "QUEUE_MINUTE_RETRY_THREAD": ALL_MINUTES,
            "QUEUE_MINUTE_NOTIFY_THREAD": ALL_MINUTES,
            "QUEUE_MINUTE_PURGE_THREAD": "0",
            "TEST_EFFECTS_TABLE": f"{schema}.efeitos",
            "PYTHONUNBUFFERED": "1",
            **(extra or {}),
        }
        self.n = 0

    def _log(self, name: str) -> Path:
        self.n += 1
        return self.log_dir / f"{self.schema}-{self.n:02d}-{name}.log"

    def legacy_env(self) -> Dict[str, str]:
        env = self.legacy.env(self.common)
        env["DB_PASS"] = env.get("DB_PASS") or "nao-usada"  # 1.2.2 refuses an empty one
        env["DB_DRIVER"] = "POSTGRES"
        env["QUEUE_PURGE_LIMIT"] = "5"  # also 1.2.2's wait-notify interval (its defect)
        return env

    def v2_env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")}
        env.update(self.common)
        env["QUEUE_BASE_INTERVAL_RETRY"] = "0.001"
        env["QUEUE_WAIT_NOTIFY_INTERVAL"] = "2"
        env["PYTHONPATH"] = str(ROOT)
        return env

    def start_legacy(self, script: str, name: str, args: Optional[List[str]] = None) -> Proc:
        path = self.legacy.script(f"{name}.py", script)
        p = Proc([self.legacy.python, str(path), *(args or [])], self.legacy_env(),
                 self.legacy.workdir, self._log(f"v1-{name}"))
        self.procs.append(p)
        return p

    def start_legacy_module(self, module: str, name: str) -> Proc:
        p = Proc([self.legacy.python, "-m", module], self.legacy_env(), self.legacy.workdir,
                 self._log(f"v1-{name}"))
        self.procs.append(p)
        return p

    def start_v2(self, module: str, name: str, **env: str) -> Proc:
        p = Proc([sys.executable, "-m", module], {**self.v2_env(), **env}, ROOT,
                 self._log(f"v2-{name}"))
        self.procs.append(p)
        return p

    def produce_legacy(self, kind: str, first: int, count: int, prefix: str) -> None:
        path = self.legacy.script("producer.py", LEGACY_PRODUCER)
        res = subprocess.run([self.legacy.python, str(path), kind, str(first), str(count),
                              prefix], env=self.legacy_env(), cwd=str(self.legacy.workdir),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr

    def stop(self) -> None:
        for p in self.procs:
            p.stop()

    def logs(self) -> str:
        return "\n".join(f"== {p.log_path.name}\n{p.log()[-3000:]}" for p in self.procs)
