"""`python -m nsj_queue_lib.health --url`: the compose healthcheck of the workers (their
/healthz with METRICS_PORT) and of the dashboard, against a real worker process."""

from __future__ import annotations

import os
import signal

from tests.fixtures.processes import run_python, wait_ready
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import free_port


def probe(*args: str):
    env = {"PATH": os.environ.get("PATH", "")}  # the URL probe needs no DB_*
    return run_python(["-m", "nsj_queue_lib.health", *args], env=env, timeout=30)


def test_url_probe_follows_the_worker_healthz(pg_queue):
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    worker = pg_queue.start_worker(METRICS_PORT=port)
    wait_ready(worker)
    res = eventually(lambda: (r := probe("--url", url)).returncode == 0 and r,
                     message="healthz answers 200 once the worker is connected")
    assert res.stdout.startswith(f"saudável: {url} respondeu 200 (ok: "), res.stdout
    task = pg_queue.insert({"efeito": "ok"})
    pg_queue.wait_status(task, "sucesso")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(15) == 0, worker.log()
    res = probe("--url", url, "--json")
    assert res.returncode == 1
    assert '"saudavel": false' in res.stdout and "não respondeu" in res.stdout


def test_url_probe_rejects_other_schemes():
    res = probe("--url", "file:///etc/passwd")
    assert res.returncode == 2 and "--url: use http:// ou https://" in res.stderr
    res = probe("--url", "http://x", "--servidor")
    assert res.returncode == 2 and "não pode ser usado com o argumento" in res.stderr


def test_url_probe_of_the_dashboard_as_compose_runs_it(pg_queue):
    """The compose service's settings: DASHBOARD_BIND_HOST=0.0.0.0, probed with --url."""
    import subprocess
    import sys

    from tests.fixtures.processes import ROOT

    port = free_port()
    env = dict(pg_queue.server.env(), PATH=os.environ.get("PATH", ""), PYTHONPATH=str(ROOT),
               DASHBOARD_BIND_HOST="0.0.0.0", DASHBOARD_PORT=str(port), DASHBOARD_TOKEN="t0k")
    proc = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.dashboard"], env=env,
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        res = eventually(lambda: (r := probe("--url", f"http://127.0.0.1:{port}/"))
                         .returncode == 0 and r, message="dashboard answers 200")
        assert res.stdout.startswith(f"saudável: http://127.0.0.1:{port}/ respondeu 200")
        listening = {int(line.split()[1].split(":")[1], 16): line.split()[1].split(":")[0]
                     for line in open("/proc/net/tcp").read().splitlines()[1:]
                     if line.split()[3] == "0A"}
        assert listening.get(port) == "00000000", "not bound to 0.0.0.0"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out
    assert "t0k" not in out
