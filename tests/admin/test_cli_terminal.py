"""What the operator's commands print is text only: control characters that came from the
queue (a webhook response stored in `mensagem`, a process name) reach the terminal as
visible escapes, in the real bytes the command writes."""

from __future__ import annotations

import json
import os

from tests.admin.test_cli import cli
from tests.fixtures.processes import ROOT

HOSTILE = "ok\x1b]0;titulo\x07\x1b[2J\rFORJADA\x9b31m\x08fim"


def test_tasks_list_show_and_json_escape_control_characters(queue):
    env = {**os.environ, **queue.env(), "PYTHONPATH": str(ROOT)}
    task = queue.insert({"n": 1}, processo="proc\x1b[31m")
    queue.sql(f"UPDATE {queue.table} SET status = 'falha', mensagem = %s WHERE id = %s",
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
