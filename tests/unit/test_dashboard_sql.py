"""The dashboard's named queries: same names and parameters in both dialects, all used."""

from __future__ import annotations

import re
from pathlib import Path

from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.queries import raw_queries


def test_dashboard_queries_match_across_dialects_and_are_used():
    param = re.compile(r"%\((\w+)\)s")
    pg, my = raw_queries(POSTGRES, "dashboard.sql"), raw_queries(MYSQL, "dashboard.sql")
    assert set(pg) == set(my)
    for name in pg:
        assert set(param.findall(pg[name])) == set(param.findall(my[name])), name
    source = (Path(__file__).resolve().parents[2] / "nsj_queue_lib" / "dashboard" /
              "data.py").read_text()
    assert {n for n in pg if f'"{n}"' not in source} == set()
