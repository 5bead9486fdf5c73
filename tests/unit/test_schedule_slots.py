"""Slots of periodic tasks (nsj_queue_lib/scheduling/slots.py): intervals aligned to the
epoch, cron in a time zone, the catch-up rule, and the errors in Portuguese."""

from __future__ import annotations

import datetime as dt
import sys

import pytest

from nsj_queue_lib.exceptions import ConfigError, FeatureUnavailable
from nsj_queue_lib.scheduling.slots import Rule, format_every, parse_every

UTC = dt.timezone.utc


def test_every_parses_and_aligns_to_the_clock():
    assert [parse_every(t) for t in ("30s", "5m", "2h", " 1 s ")] == [30, 300, 7200, 1]
    assert format_every(300) == "5m" and format_every(45) == "45s"
    for bad in ("", "10", "1d", "0s", "-5s", "999h"):
        with pytest.raises(ConfigError):
            parse_every(bad)
    rule = Rule(every=30)
    now = dt.datetime(2026, 1, 1, 10, 0, 45, 500, tzinfo=UTC)
    assert rule.next_after(now) == dt.datetime(2026, 1, 1, 10, 1, tzinfo=UTC)
    assert rule.next_after(dt.datetime(2026, 1, 1, 10, 1, tzinfo=UTC)) == dt.datetime(
        2026, 1, 1, 10, 1, 30, tzinfo=UTC)


def test_catch_up_keeps_only_the_most_recent_missed_slots():
    rule = Rule(every=3600)
    proximo = dt.datetime(2026, 1, 1, 5, tzinfo=UTC)
    now = dt.datetime(2026, 1, 1, 10, 20, tzinfo=UTC)
    slots, nxt = rule.due(proximo, now, 1)
    assert slots == [dt.datetime(2026, 1, 1, 10, tzinfo=UTC)]
    assert nxt == dt.datetime(2026, 1, 1, 11, tzinfo=UTC)
    slots, _ = rule.due(proximo, now, 3)
    assert [s.hour for s in slots] == [8, 9, 10]
    slots, _ = rule.due(dt.datetime(2026, 1, 1, 9, tzinfo=UTC), now, 10)  # never before proximo
    assert [s.hour for s in slots] == [9, 10]


def test_cron_in_a_time_zone():
    rule = Rule(cron="0 9 * * 1-5", tz="America/Sao_Paulo")  # 09:00 in São Paulo = 12:00 UTC
    friday = dt.datetime(2026, 1, 2, 13, tzinfo=UTC)
    assert rule.next_after(friday) == dt.datetime(2026, 1, 5, 12, tzinfo=UTC)  # Monday
    assert rule.latest(friday, 2) == [dt.datetime(2026, 1, 1, 12, tzinfo=UTC),
                                      dt.datetime(2026, 1, 2, 12, tzinfo=UTC)]
    steps = Rule(cron="*/15 8-9,18 * * *")
    at = dt.datetime(2026, 1, 1, 9, 45, tzinfo=UTC)
    assert steps.latest(at, 1) == [at]  # a slot at exactly now is due
    assert steps.next_after(at) == dt.datetime(2026, 1, 1, 18, tzinfo=UTC)
    assert rule.describe() == "cron '0 9 * * 1-5' (America/Sao_Paulo)"
    assert Rule(every=90).describe() == "a cada 90s"


def test_bad_rules_are_refused_in_portuguese(monkeypatch):
    for kwargs, text in (({"cron": "61 * * * *"}, "cron inválida"),
                         ({"cron": "* * *"}, "cinco campos"),
                         ({}, "exatamente um"),
                         ({"cron": "* * * * *", "every": 5}, "exatamente um"),
                         ({"every": 5, "tz": "Lua/Base"}, "fuso horário desconhecido")):
        with pytest.raises(ConfigError, match=text):
            Rule(**kwargs)
    monkeypatch.setitem(sys.modules, "cronsim", None)  # the extra not installed
    with pytest.raises(FeatureUnavailable, match=r"nsj-queue-lib\[cron\]"):
        Rule(cron="* * * * *")
    assert Rule(every=5).every == 5  # --every needs no extra


def test_the_job_costs_nothing_until_the_control_row_names_a_slot():
    from nsj_queue_lib.scheduling.hint import ScheduleHint
    from nsj_queue_lib.scheduling.job import ScheduleJob

    hint = ScheduleHint()
    job = ScheduleJob("public.fila", hint=hint)
    assert job.next_delay() == float("inf")  # no schedule known: never due
    hint.note(None)
    assert job.next_delay() == float("inf") and hint.version == 0
    hint.note(dt.datetime.now(UTC) + dt.timedelta(seconds=30))
    assert 28 < job.next_delay() <= 30
    hint.note((dt.datetime.now(UTC) + dt.timedelta(seconds=30)).replace(tzinfo=None)
              .isoformat())  # (a naive value is UTC; a text, the listener turn's JSON)
    assert 28 < job.next_delay() <= 30
    hint.poke()  # known already: nothing changes
    assert job.next_delay() > 1
    other = ScheduleHint()
    other.poke()  # a slot's task claimed, no value seen: look at once
    assert ScheduleJob("public.fila", hint=other).next_delay() == 0.0
