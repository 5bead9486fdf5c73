"""The reliability table of the chaos suite: one row per scenario run.

Rows are collected for the whole pytest session, printed at the end
(pytest_terminal_summary in conftest.py) and written to NSJQ_CHAOS_REPORT
(default /tmp/nsjq-chaos-report.md) after every scenario, so a partial run
still leaves its numbers behind.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path
from typing import Any, Dict, List

ROWS: List[Dict[str, Any]] = []

COLUMNS = (
    ("scenario", "scenario"),
    ("database", "database"),
    ("tasks", "tasks"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("recovery_s", "recovery time s"),
    ("max_stall_s", "max stall s"),
    ("faults", "faults"),
    ("notes", "notes"),
)


def report_path() -> Path:
    return Path(os.environ.get("NSJQ_CHAOS_REPORT", "/tmp/nsjq-chaos-report.md"))


def add(row: Dict[str, Any]) -> None:
    ROWS.append(row)
    write()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value).replace("|", "/")


def render(rows: List[Dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    header = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [header, rule]
    for row in sorted(rows, key=lambda r: str(r.get("scenario", ""))):
        lines.append("| " + " | ".join(_cell(row.get(key, "")) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def write() -> None:
    """Write the table collected so far to the report file."""
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    text = (
        "# nsj_queue_lib: chaos suite reliability report\n\n"
        f"Generated {now} on {platform.node()} ({os.cpu_count()} CPUs); "
        f"NSJQ_CHAOS_N={os.environ.get('NSJQ_CHAOS_N', '200')}.\n\n"
        "lost = tasks enqueued that never succeeded nor reached a finished dead letter; "
        "duplicated = committed effects (rows written through bd_conn) beyond one per task, "
        "plus extra 'sucesso' attempts of one chain or extra fan-out rows; recovery time = "
        "from the end of the last fault to the queue drained (nothing pendente, agendada or "
        "processando); max stall = longest time without a completed task while work "
        "was waiting.\n\n"
        + render(ROWS) + "\n"
    )
    path = report_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
