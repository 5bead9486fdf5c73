"""The Prometheus text of nsj_queue_lib.observability.metrics, read by the official parser."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from nsj_queue_lib.observability.metrics import histogram_family, render
from nsj_queue_lib.observability.observe import Histogram


def test_labels_are_escaped_and_numbers_formatted():
    text = render([
        ("x_total", "counter", 'ajuda com "aspas" e \\ barra', [
            ({"queue": 'a"b\\c\nd'}, 3), ({"queue": "z"}, 2.5)]),
        ("y", "gauge", "infinitos", [({}, math.inf), ({"k": "v"}, math.nan)]),
    ])
    assert 'x_total{queue="a\\"b\\\\c\\nd"} 3\n' in text
    assert "y +Inf\n" in text and 'y{k="v"} NaN\n' in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {s.labels["queue"]: s.value for s in fams["x"].samples} == {'a"b\\c\nd': 3.0,
                                                                       "z": 2.5}
    assert fams["x"].documentation == 'ajuda com "aspas" e \\ barra'


def test_histogram_buckets_are_cumulative():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 0.5, 3.0):
        h.observe(v)
    text = render(histogram_family("d_seconds", "duração", {"queue": "q"},
                                   (h.buckets, h.counts, h.total, h.sum)))
    fam = next(text_string_to_metric_families(text))
    assert fam.type == "histogram"
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert got[("d_seconds_bucket", "0.1")] == 1
    assert got[("d_seconds_bucket", "1.0")] == 3
    assert got[("d_seconds_bucket", "+Inf")] == 4
    assert got[("d_seconds_count", None)] == 4 and got[("d_seconds_sum", None)] == 4.05
