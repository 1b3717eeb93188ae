"""The server-rendered SVG: step lines through the known values, one marker per entry, and
nothing a strict Content-Security-Policy would block (no inline style or script)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from app.ui.charts import ChartPoint, spend_bar, spend_chart

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def point(i: int, kind: str, composed: float | None, plain: float) -> ChartPoint:
    return ChartPoint(T0 + timedelta(seconds=i), kind, f"job{i}", 1.0, composed, plain)


def test_the_chart_marks_each_entry_and_steps_through_known_values():
    points = [
        point(0, "reserve", 1.0, 1.0),
        point(1, "commit", 1.0, 1.0),
        point(2, "reserve", None, 2.0),  # left out of a long ledger's compositions
        point(3, "release", 1.0, 1.0),
    ]
    svg = str(spend_chart(points, budget=3.0))
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag == "svg"
    for kind, count in (("reserve", 2), ("commit", 1), ("release", 1)):
        assert svg.count(f'class="marker marker-{kind}"') == count
    composed = re.search(r'class="line-composed" d="([^"]+)"', svg)
    assert composed and "None" not in svg and "nan" not in svg
    # Three known values: three rises (V) and three runs (H) after the start.
    assert composed.group(1).count("V") == 3
    assert "style=" not in svg and "<script" not in svg
    assert "composed not computed" in svg


def test_the_bar_fills_to_the_composed_spend_and_marks_sum_and_budget():
    svg = str(spend_bar(budget=4.0, composed=1.0, plain_sum=2.0, width=200))
    ET.fromstring(svg)
    fill = re.search(r'class="bar-composed"[^>]*width="([\d.]+)"', svg)
    assert fill and float(fill.group(1)) == 50.0
    over = str(spend_bar(budget=1.0, composed=1.0, plain_sum=2.0, width=200))
    fill = re.search(r'class="bar-composed"[^>]*width="([\d.]+)"', over)
    assert fill and float(fill.group(1)) == 100.0  # the track grows to the sum
