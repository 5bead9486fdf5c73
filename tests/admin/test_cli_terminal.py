"""What the operator's commands print is text only: control characters that came from the
queue (a webhook response stored in `mensagem`, a process name) reach the terminal as
visible escapes, in the real bytes the command writes."""

from __future__ import annotations

import json
import os

from tests.admin.test_cli import cli
from tests.fixtures.processes import ROOT

HOSTILE = "ok\x1b]0;titulo\x07\x1b[2J\rFORJADA\x9b31m\x08fim"


def test_tasks_list_show_and_json_escape_control_characters(pg_queue):
    env = {**os.environ, **pg_queue.env(), "PYTHONPATH": str(ROOT)}
    task = pg_queue.insert({"n": 1}, processo="proc\x1b[31m")
    pg_queue.sql(f"UPDATE {pg_queue.table} SET status = 'falha', mensagem = %s WHERE id = %s",
                 (HOSTILE, task))
    for args in (("tasks", "list"), ("tasks", "show", str(task)),
                 ("tasks", "list", "--json"), ("tasks", "show", str(task), "--json")):
        res = cli(*args, env=env)
        assert res.returncode == 0, res.stderr
        raw = res.stdout.encode("utf-8")
        for byte in (b"\x1b", b"\x07", b"\r", b"\x08", "\x9b".encode()):
            assert byte not in raw, (args, byte, raw)
        if "--json" in args:
            data = json.loads(res.stdout)
            rows = data if isinstance(data, list) else data["tentativas"]
            assert rows[0]["mensagem"] == HOSTILE  # the same text, escaped as JSON
        else:
            assert "\\u001b]0;titulo\\u0007" in res.stdout


def test_status_watch_still_clears_the_screen_on_a_terminal(pg_queue):
    """The library's own clear-screen sequence of `status --watch` reaches a real terminal
    (a pty) unescaped, while stored text stays escaped."""
    import pty
    import select
    import subprocess
    import sys
    import time

    env = {**os.environ, **pg_queue.env(), "PYTHONPATH": str(ROOT)}
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib", "status", "--watch", "1"],
                            env=env, cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 20
        while out.count(b"\x1b[H\x1b[2J") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(master)
    assert out.count(b"\x1b[H\x1b[2J") >= 2, out[-2000:]
    assert b"\\u001b[H" not in out
