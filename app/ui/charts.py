"""Inline SVG charts for the dashboard, rendered on the server (no JavaScript library, and
nothing from a CDN: the machines may be offline). Pure functions of public numbers: budgets,
spends and ledger timestamps. Colours and sizes are SVG attributes, not inline CSS, so the
page's Content-Security-Policy can forbid inline styles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

COMPOSED = "#2563eb"
PLAIN_SUM = "#d97706"
BUDGET = "#dc2626"
MARKERS = {"reserve": "#2563eb", "commit": "#059669", "release": "#6b7280"}


def _num(value: float) -> str:
    return f"{value:.4g}"


def spend_bar(budget: float, composed: float, plain_sum: float, width: int = 240) -> Markup:
    """One dataset's bar: composed spend filled, the plain sum as a tick, the budget as the
    end of the track (the track grows when the plain sum passes the budget)."""
    height, top = 20, 4
    scale_max = max(budget, plain_sum, 1e-12)
    fill = min(composed, scale_max) / scale_max * width
    budget_x = budget / scale_max * width
    sum_x = min(plain_sum, scale_max) / scale_max * width
    label = f"composed spend {_num(composed)} of budget {_num(budget)}; plain sum {_num(plain_sum)}"
    return Markup(
        f'<svg class="bar" width="{width + 2}" height="{height + 2 * top}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<rect x="1" y="{top}" width="{width}" height="{height}" fill="#f3f4f6" '
        f'stroke="#d1d5db"/>'
        f'<rect class="bar-composed" x="1" y="{top}" width="{fill:.1f}" height="{height}" '
        f'fill="{COMPOSED}"/>'
        f'<line x1="{sum_x + 1:.1f}" x2="{sum_x + 1:.1f}" y1="1" y2="{height + 2 * top - 1}" '
        f'stroke="{PLAIN_SUM}" stroke-width="3"/>'
        f'<line x1="{budget_x + 1:.1f}" x2="{budget_x + 1:.1f}" y1="1" '
        f'y2="{height + 2 * top - 1}" stroke="{BUDGET}" stroke-width="2"/>'
        "</svg>"
    )


@dataclass(frozen=True)
class ChartPoint:
    """The spend right after one ledger entry."""

    at: datetime
    kind: str  # reserve, commit or release
    job_id: str
    job_epsilon: float
    composed: float | None  # None: not composed (a long ledger's chart composes a subset)
    plain_sum: float


def _ticks(top: float, count: int = 5) -> list[float]:
    step = top / count
    return [step * i for i in range(count + 1)]


def _marker_shape(kind: str, x: float, y: float) -> str:
    """A ledger entry's marker: a square for commit, a triangle for release, else a dot."""
    colour = MARKERS.get(kind, "#111827")
    if kind == "commit":
        return f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9" fill="{colour}"/>'
    if kind == "release":
        return (
            f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y + 4:.1f} '
            f'{x - 6:.1f},{y + 4:.1f}" fill="{colour}"/>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"/>'


def spend_chart(points: Sequence[ChartPoint], budget: float) -> Markup:
    """Composed spend and plain sum (step lines) against time, the ledger's entries marked by
    kind, and the budget as a dashed line."""
    width, height = 760, 300
    left, right, top, bottom = 56, 150, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    y_max = max([budget, *(p.plain_sum for p in points), 1e-9]) * 1.08
    times = [p.at.timestamp() for p in points]
    t0 = min(times) if times else 0.0
    span = (max(times) - t0) if times else 0.0

    def x_of(i: int) -> float:
        if span <= 0:  # one instant: spread the entries evenly, in ledger order
            return left + (plot_w * (i + 1) / (len(points) + 1))
        return left + (times[i] - t0) / span * plot_w * 0.92 + plot_w * 0.04

    def y_of(value: float) -> float:
        return top + plot_h - value / y_max * plot_h

    parts: list[str] = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="privacy spend over time">'
    ]
    for tick in _ticks(y_max / 1.08):
        y = y_of(tick)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#374151">{_num(tick)}</text>'
        )
    parts.append(
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#6b7280"/>'
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        'stroke="#6b7280"/>'
        f'<text x="14" y="{top + plot_h / 2:.0f}" font-size="12" fill="#374151" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.0f})" text-anchor="middle">epsilon</text>'
    )
    budget_y = y_of(budget)
    parts.append(
        f'<line class="budget-line" x1="{left}" x2="{left + plot_w}" y1="{budget_y:.1f}" '
        f'y2="{budget_y:.1f}" stroke="{BUDGET}" stroke-width="2" stroke-dasharray="6 4"/>'
    )
    if points:
        for name, values, colour in (
            ("plain-sum", [p.plain_sum for p in points], PLAIN_SUM),
            ("composed", [p.composed for p in points], COMPOSED),
        ):
            # Steps after each known value; an unknown one (None) keeps the line level until
            # the next known value (the caption says so).
            known = [(i, v) for i, v in enumerate(values) if v is not None]
            path = [f"M {left} {y_of(0):.1f}", f"H {x_of(known[0][0]) if known else left:.1f}"]
            for n, (_, value) in enumerate(known):
                end = x_of(known[n + 1][0]) if n + 1 < len(known) else left + plot_w
                path.append(f"V {y_of(value):.1f}")
                path.append(f"H {end:.1f}")
            parts.append(
                f'<path class="line-{name}" d="{" ".join(path)}" fill="none" '
                f'stroke="{colour}" stroke-width="2.5"/>'
            )
        for i, point in enumerate(points):
            x = x_of(i)
            y = y_of(point.composed if point.composed is not None else point.plain_sum)
            composed = "not computed" if point.composed is None else _num(point.composed)
            tip = escape(
                f"{point.at:%Y-%m-%d %H:%M:%S} {point.kind} job {point.job_id} "
                f"(epsilon {_num(point.job_epsilon)}): composed {composed}, "
                f"sum {_num(point.plain_sum)}"
            )
            shape = _marker_shape(point.kind, x, y)
            parts.append(f'<g class="marker marker-{point.kind}"><title>{tip}</title>{shape}</g>')
        first, last = points[0].at, points[-1].at
        fmt = "%H:%M:%S" if first.date() == last.date() else "%m-%d %H:%M"
        parts.append(
            f'<text x="{x_of(0):.1f}" y="{top + plot_h + 18}" font-size="11" fill="#374151" '
            f'text-anchor="middle">{first:{fmt}}</text>'
        )
        if len(points) > 1 and span > 0:
            parts.append(
                f'<text x="{x_of(len(points) - 1):.1f}" y="{top + plot_h + 18}" font-size="11" '
                f'fill="#374151" text-anchor="middle">{last:{fmt}}</text>'
            )
        parts.append(
            f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" font-size="12" fill="#374151" '
            'text-anchor="middle">time (UTC)</text>'
        )
    legend = [
        ("line", COMPOSED, "composed spend"),
        ("line", PLAIN_SUM, "plain sum"),
        ("dash", BUDGET, f"budget {_num(budget)}"),
        ("circle", MARKERS["reserve"], "reserve"),
        ("rect", MARKERS["commit"], "commit"),
        ("tri", MARKERS["release"], "release"),
    ]
    lx = left + plot_w + 16
    for i, (shape_kind, colour, text) in enumerate(legend):
        y = top + 10 + i * 20
        if shape_kind in ("line", "dash"):
            dash = ' stroke-dasharray="6 4"' if shape_kind == "dash" else ""
            mark = (
                f'<line x1="{lx}" x2="{lx + 22}" y1="{y}" y2="{y}" stroke="{colour}" '
                f'stroke-width="2.5"{dash}/>'
            )
        elif shape_kind == "circle":
            mark = f'<circle cx="{lx + 11}" cy="{y}" r="5" fill="{colour}"/>'
        elif shape_kind == "rect":
            mark = f'<rect x="{lx + 6.5}" y="{y - 4.5}" width="9" height="9" fill="{colour}"/>'
        else:
            mark = (
                f'<polygon points="{lx + 11},{y - 6} {lx + 17},{y + 4} {lx + 5},{y + 4}" '
                f'fill="{colour}"/>'
            )
        parts.append(
            f'{mark}<text x="{lx + 28}" y="{y + 4}" font-size="12" fill="#111827">'
            f"{escape(text)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
