"""MariaDB instructions per task of MariaDB native workers, trees compared, load-independent.

    python bench/bench_mysql_callgrind.py TASKS label=/path/to/tree[@driver] ...

Starts a private MariaDB (the `mariadbd` of this machine, a scratch data directory, its
own port and socket; the shared server is not touched) under `valgrind --tool=callgrind`
with instrumentation off.  For each tree: loads TASKS tasks (each inserts a side-effect
row, bench/worker_noop.py), starts 4 native workers from that tree and counts the
server's instructions (all its threads, background purge included) between 15% and 85%
of the tasks done, per task.  Instruction counts do not move with the machine's load, so
a change of a few percent on the server side shows in one pair; the rates under valgrind
mean nothing.  Needs valgrind and mariadb-install-db (Debian: valgrind, mariadb-server);
takes about a minute per tree for TASKS=1500, plus about half a minute to start.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: str, port: int) -> subprocess.Popen:
    data = os.path.join(workdir, "data")
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The shared server's settings that matter here (defaults, no binlog); native AIO off
    # and a bounded buffer-pool reservation, which valgrind needs.
    cnf = os.path.join(workdir, "my.cnf")
    with open(cnf, "w") as f:
        f.write(f"[mariadbd]\ndatadir={data}\nport={port}\nbind-address=127.0.0.1\n"
                f"socket={workdir}/mysqld.sock\npid-file={workdir}/mysqld.pid\nuser=root\n"
                "skip-log-bin\ninnodb_buffer_pool_size=128M\n"
                "innodb_buffer_pool_size_max=256M\ninnodb_use_native_aio=0\n"
                "performance_schema=OFF\n")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={workdir}/cg.out.%p", "mariadbd",
                             f"--defaults-file={cnf}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import pymysql

    deadline = time.monotonic() + 300
    while True:
        try:
            pymysql.connect(host="127.0.0.1", port=port, user="root", password="").close()
            return proc
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("MariaDB privado (valgrind) não iniciou") from None
            time.sleep(1)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def one_tree(label: str, spec: str, n: int, pid: int, workdir: str) -> float:
    from bench import bench_cs

    tree, _, driver = spec.partition("@")
    target = bench_cs.Target("mariadb", None)
    target.load(n)
    run = bench_cs.ClientServerRun(target, server=False, mysql_driver=driver or None,
                                   tree=Path(tree).resolve())
    run.start_workers(4)
    try:
        deadline = time.monotonic() + 1800
        target.wait_done(0.15 * n, deadline)
        _control("-z", str(pid))
        _control("-i", "on", str(pid))
        first = target.done()
        target.wait_done(0.85 * n, deadline)
        _control("-i", "off", str(pid))
        last = target.done()
        before = set(glob.glob(f"{workdir}/cg.out.{pid}.*"))
        _control(f"--dump={label}", str(pid))
        dumped = sorted(set(glob.glob(f"{workdir}/cg.out.{pid}.*")) - before,
                        key=os.path.getmtime)
        with open(dumped[-1]) as f:
            total = int(re.search(r"^totals: (\d+)", f.read(), re.M).group(1))
    finally:
        target.close()
        run.stop()
    return total / (last - first)


def main() -> int:
    n = int(sys.argv[1])
    trees = [arg.split("=", 1) for arg in sys.argv[2:]]
    workdir = tempfile.mkdtemp(prefix="nsjq_callgrind_")
    port = _free_port()
    os.environ.update({"NSJQ_TEST_MYSQL_HOST": "127.0.0.1", "NSJQ_TEST_MYSQL_PORT": str(port),
                       "NSJQ_TEST_MYSQL_USER": "root", "NSJQ_TEST_MYSQL_PASS": ""})
    server = start_server(workdir, port)
    try:
        # (the process callgrind names its output after: the server's pid)
        pid = int(min(glob.glob(f"{workdir}/cg.out.*"), key=len).rsplit(".", 1)[1])
        for label, spec in trees:
            per_task = one_tree(label, spec, n, pid, workdir)
            print(f"{label:12s} {per_task / 1e6:6.3f} M MariaDB instructions per task",
                  flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
