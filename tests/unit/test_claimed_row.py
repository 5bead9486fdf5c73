"""The claimed row's JSON form (db/claimed_row.py): PostgreSQL's JSON timestamps and the
column types it is used for."""

from __future__ import annotations

import datetime as dt

import pytest

from nsj_queue_lib.db import claimed_row
from nsj_queue_lib.db.queries import TAREFA_COLUMNS


def _tz(**offset: int) -> dt.timezone:
    return dt.timezone(dt.timedelta(**offset))


@pytest.mark.parametrize("text, expected", [
    # (PostgreSQL drops the fraction's trailing zeros, and writes +HH for whole hours)
    ("2026-01-02T03:04:05.12+05:30",
     dt.datetime(2026, 1, 2, 3, 4, 5, 120000, _tz(hours=5, minutes=30))),
    ("2026-01-02T03:04:05.123456+00:00", dt.datetime(2026, 1, 2, 3, 4, 5, 123456, dt.timezone.utc)),
    ("2026-01-02T03:04:05-03", dt.datetime(2026, 1, 2, 3, 4, 5, 0, _tz(hours=-3))),
    ("2026-01-02T03:04:05.5+00", dt.datetime(2026, 1, 2, 3, 4, 5, 500000, dt.timezone.utc)),
    ("1890-01-02T03:04:05-03:06:28",
     dt.datetime(1890, 1, 2, 3, 4, 5, 0, _tz(hours=-3, minutes=-6, seconds=-28))),
    ("2026-01-02T03:04:05.7", dt.datetime(2026, 1, 2, 3, 4, 5, 700000)),  # without time zone
])
def test_timestamps_as_postgresql_writes_them_in_json(text, expected):
    got = claimed_row.timestamp(text)
    assert got == expected and got.utcoffset() == expected.utcoffset()
    assert (got.tzinfo is None) == (expected.tzinfo is None)


@pytest.mark.parametrize("text", ["infinity", "-infinity", "0044-03-15T12:00:00+00:00 BC"])
def test_timestamps_python_cannot_hold_are_refused(text):
    with pytest.raises(ValueError):
        claimed_row.timestamp(text)


def test_json_form_only_for_the_types_it_maps_back_exactly():
    ddl = {col: "text" for col in TAREFA_COLUMNS}
    ddl.update(id="bigint", data_hora="timestamp with time zone", pub_sub="boolean")
    assert claimed_row.json_safe(ddl.items())
    assert not claimed_row.json_safe({**ddl, "tenant": "numeric"}.items())  # (Decimal)
    assert not claimed_row.json_safe({**ddl, "payload": "jsonb"}.items())
    missing = dict(ddl)
    del missing["live_id"]
    assert not claimed_row.json_safe(missing.items())
