"""Inline SVG charts for the dashboard, rendered on the server (no JavaScript library, and
nothing from a CDN: the machines may be offline). Pure functions of public numbers: budgets,
spends and ledger timestamps. Colours and sizes are SVG attributes, not inline CSS, so the
page's Content-Security-Policy can forbid inline styles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from markupsafe import Markup, escape

from app.db.models import DEFAULT_WARN_THRESHOLD
from app.privacy.display import budget_percent, epsilon_text
from app.services.budgets import spend_fraction, spend_level

COMPOSED = "#2563eb"
PLAIN_SUM = "#d97706"
BUDGET = "#dc2626"
MARKERS = {"reserve": "#2563eb", "commit": "#059669", "release": "#6b7280", "counts": "#7c3aed"}


def _num(value: float) -> str:
    """An ε in a chart's labels, as every page prints it (app.privacy.display)."""
    return epsilon_text(value)


#: A bar's fill by level (app.services.budgets.SpendLevel): below the warn threshold,
#: at or past it, the budget used up.
LEVEL_FILL = {"ok": "#16a34a", "warn": "#f59e0b", "over": "#dc2626"}
BAR_SUM = "#111827"
BAR_BUDGET = "#7f1d1d"
BAR_THRESHOLD = "#6b7280"


def spend_bar(
    budget: float,
    composed: float,
    plain_sum: float | None,
    width: int = 240,
    threshold: float = DEFAULT_WARN_THRESHOLD,
) -> Markup:
    """One dataset's (or label group's) bar: the composed spend filled in its level's colour
    (:data:`LEVEL_FILL`) with its percentage of the budget beside it, the warn threshold
    dashed, the plain sum as a dark tick (None: no tick, e.g. a label group's bar), the budget
    as the end of the track (the track grows when the plain sum passes the budget)."""
    height, top, text_w = 20, 4, 48
    level = spend_level(composed, budget, threshold).value
    fraction = spend_fraction(composed, budget)
    shown = budget_percent(fraction)
    scale_max = max(budget, plain_sum or 0.0, 1e-12)
    fill = min(composed, scale_max) / scale_max * width
    budget_x = budget / scale_max * width
    warn_x = threshold * budget / scale_max * width
    label = (
        f"composed spend {_num(composed)} of budget {_num(budget)} ({shown}, {level}); "
        + (f"plain sum {_num(plain_sum)}; " if plain_sum is not None else "")
        + f"warn at {threshold * 100:.0f}%"
    )
    full = height + 2 * top
    tick = ""
    if plain_sum is not None:
        sum_x = min(plain_sum, scale_max) / scale_max * width
        tick = (
            f'<line class="bar-sum" x1="{sum_x + 1:.1f}" x2="{sum_x + 1:.1f}" y1="1" '
            f'y2="{full - 1}" stroke="{BAR_SUM}" stroke-width="3"/>'
        )
    return Markup(
        f'<svg class="bar" width="{width + 2 + text_w}" height="{full}" role="img" '
        f'aria-label="{escape(label)}" data-level="{level}" data-percent="{fraction * 100:.1f}">'
        f"<title>{escape(label)}</title>"
        f'<rect x="1" y="{top}" width="{width}" height="{height}" fill="#f3f4f6" '
        f'stroke="#d1d5db"/>'
        f'<rect class="bar-composed" x="1" y="{top}" width="{fill:.1f}" height="{height}" '
        f'fill="{LEVEL_FILL[level]}"/>'
        f'<line class="bar-threshold" x1="{warn_x + 1:.1f}" x2="{warn_x + 1:.1f}" y1="{top}" '
        f'y2="{top + height}" stroke="{BAR_THRESHOLD}" stroke-width="1" '
        f'stroke-dasharray="3 2"/>'
        f"{tick}"
        f'<line x1="{budget_x + 1:.1f}" x2="{budget_x + 1:.1f}" y1="1" '
        f'y2="{full - 1}" stroke="{BAR_BUDGET}" stroke-width="2"/>'
        f'<text class="bar-percent" x="{width + text_w - 2}" y="{top + height - 5}" '
        f'text-anchor="end" font-size="13" font-weight="600" '
        f'fill="{LEVEL_FILL[level] if level != "ok" else "#374151"}">{shown}</text>'
        "</svg>"
    )


@dataclass(frozen=True)
class ChartPoint:
    """The spend right after one ledger entry."""

    at: datetime
    kind: str  # reserve, commit or release; counts: the dataset's count release
    job_id: str
    job_epsilon: float
    composed: float | None  # None: not composed (a long ledger's chart composes a subset)
    plain_sum: float


def _ticks(top: float, count: int = 5) -> list[float]:
    step = top / count
    return [step * i for i in range(count + 1)]


def _marker_shape(kind: str, x: float, y: float) -> str:
    """A ledger entry's marker: a square for commit, a triangle for release, a diamond for
    the count release, else a dot."""
    colour = MARKERS.get(kind, "#111827")
    if kind == "counts":
        return (
            f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y:.1f} {x:.1f},{y + 6:.1f} '
            f'{x - 6:.1f},{y:.1f}" fill="{colour}"/>'
        )
    if kind == "commit":
        return f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9" fill="{colour}"/>'
    if kind == "release":
        return (
            f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y + 4:.1f} '
            f'{x - 6:.1f},{y + 4:.1f}" fill="{colour}"/>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"/>'


@dataclass(frozen=True)
class _Frame:
    """The chart's geometry: where an entry (by ledger index) and an epsilon are drawn."""

    points: Sequence[ChartPoint]
    budget: float
    width: int = 760
    height: int = 300
    left: int = 56
    right: int = 150
    top: int = 16
    bottom: int = 44

    @property
    def plot_w(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> int:
        return self.height - self.top - self.bottom

    # Computed once per chart (an entry's x is asked for several times).
    @cached_property
    def y_max(self) -> float:
        return max([self.budget, *(p.plain_sum for p in self.points), 1e-9]) * 1.08

    @cached_property
    def times(self) -> list[float]:
        return [p.at.timestamp() for p in self.points]

    @cached_property
    def t0(self) -> float:
        return min(self.times) if self.times else 0.0

    @cached_property
    def span(self) -> float:
        return (max(self.times) - self.t0) if self.times else 0.0

    def x_of(self, i: int) -> float:
        if self.span <= 0:  # one instant: spread the entries evenly, in ledger order
            return self.left + (self.plot_w * (i + 1) / (len(self.points) + 1))
        offset = (self.times[i] - self.t0) / self.span * self.plot_w * 0.92
        return self.left + offset + self.plot_w * 0.04

    def y_of(self, value: float) -> float:
        return self.top + self.plot_h - value / self.y_max * self.plot_h


def _axes(f: _Frame) -> list[str]:
    """The grid with its epsilon ticks, the two axes and the dashed budget line."""
    left, top, plot_w, plot_h = f.left, f.top, f.plot_w, f.plot_h
    parts = []
    for tick in _ticks(f.y_max / 1.08):
        y = f.y_of(tick)
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
    budget_y = f.y_of(f.budget)
    parts.append(
        f'<line class="budget-line" x1="{left}" x2="{left + plot_w}" y1="{budget_y:.1f}" '
        f'y2="{budget_y:.1f}" stroke="{BUDGET}" stroke-width="2" stroke-dasharray="6 4"/>'
    )
    return parts


def _step_line(f: _Frame, name: str, values: list[float | None], colour: str) -> str:
    """Steps after each known value; an unknown one (None) keeps the line level until the
    next known value (the page's caption says so)."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    path = [f"M {f.left} {f.y_of(0):.1f}", f"H {f.x_of(known[0][0]) if known else f.left:.1f}"]
    for n, (_, value) in enumerate(known):
        end = f.x_of(known[n + 1][0]) if n + 1 < len(known) else f.left + f.plot_w
        path.append(f"V {f.y_of(value):.1f}")
        path.append(f"H {end:.1f}")
    return (
        f'<path class="line-{name}" d="{" ".join(path)}" fill="none" '
        f'stroke="{colour}" stroke-width="2.5"/>'
    )


def _markers(f: _Frame) -> list[str]:
    """One marker per ledger entry, its tooltip the entry's public numbers."""
    parts = []
    for i, point in enumerate(f.points):
        y = f.y_of(point.composed if point.composed is not None else point.plain_sum)
        composed = "not computed" if point.composed is None else _num(point.composed)
        what = "count release" if point.kind == "counts" else f"{point.kind} job"
        tip = escape(
            f"{point.at:%Y-%m-%d %H:%M:%S} {what} {point.job_id} "
            f"(epsilon {_num(point.job_epsilon)}): composed {composed}, "
            f"sum {_num(point.plain_sum)}"
        )
        shape = _marker_shape(point.kind, f.x_of(i), y)
        parts.append(f'<g class="marker marker-{point.kind}"><title>{tip}</title>{shape}</g>')
    return parts


def _time_labels(f: _Frame) -> list[str]:
    """The first and last entry's time under the plot, and the axis's name."""
    points, base = f.points, f.top + f.plot_h + 18
    first, last = points[0].at, points[-1].at
    fmt = "%H:%M:%S" if first.date() == last.date() else "%m-%d %H:%M"
    parts = [
        f'<text x="{f.x_of(0):.1f}" y="{base}" font-size="11" fill="#374151" '
        f'text-anchor="middle">{first:{fmt}}</text>'
    ]
    if len(points) > 1 and f.span > 0:
        parts.append(
            f'<text x="{f.x_of(len(points) - 1):.1f}" y="{base}" font-size="11" '
            f'fill="#374151" text-anchor="middle">{last:{fmt}}</text>'
        )
    parts.append(
        f'<text x="{f.left + f.plot_w / 2:.0f}" y="{f.height - 6}" font-size="12" '
        'fill="#374151" text-anchor="middle">time (UTC)</text>'
    )
    return parts


def _legend_mark(shape_kind: str, colour: str, lx: int, y: int) -> str:
    if shape_kind in ("line", "dash"):
        dash = ' stroke-dasharray="6 4"' if shape_kind == "dash" else ""
        return (
            f'<line x1="{lx}" x2="{lx + 22}" y1="{y}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2.5"{dash}/>'
        )
    if shape_kind == "circle":
        return f'<circle cx="{lx + 11}" cy="{y}" r="5" fill="{colour}"/>'
    if shape_kind == "rect":
        return f'<rect x="{lx + 6.5}" y="{y - 4.5}" width="9" height="9" fill="{colour}"/>'
    if shape_kind == "diamond":
        return (
            f'<polygon points="{lx + 11},{y - 6} {lx + 17},{y} {lx + 11},{y + 6} {lx + 5},{y}" '
            f'fill="{colour}"/>'
        )
    return (
        f'<polygon points="{lx + 11},{y - 6} {lx + 17},{y + 4} {lx + 5},{y + 4}" fill="{colour}"/>'
    )


def _has_counts(f: _Frame) -> bool:
    return any(p.kind == "counts" for p in f.points)


def _legend(f: _Frame) -> list[str]:
    """The legend, right of the plot."""
    legend = [
        ("line", COMPOSED, "composed spend"),
        ("line", PLAIN_SUM, "plain sum"),
        ("dash", BUDGET, f"budget {_num(f.budget)}"),
        ("circle", MARKERS["reserve"], "reserve"),
        ("rect", MARKERS["commit"], "commit"),
        ("tri", MARKERS["release"], "release"),
        *([("diamond", MARKERS["counts"], "count release")] if _has_counts(f) else []),
    ]
    lx = f.left + f.plot_w + 16
    parts = []
    for i, (shape_kind, colour, text) in enumerate(legend):
        y = f.top + 10 + i * 20
        parts.append(
            f'{_legend_mark(shape_kind, colour, lx, y)}<text x="{lx + 28}" y="{y + 4}" '
            f'font-size="12" fill="#111827">{escape(text)}</text>'
        )
    return parts


def spend_chart(points: Sequence[ChartPoint], budget: float) -> Markup:
    """Composed spend and plain sum (step lines) against time, the ledger's entries marked by
    kind, and the budget as a dashed line."""
    f = _Frame(points, budget)
    parts: list[str] = [
        f'<svg class="chart" viewBox="0 0 {f.width} {f.height}" width="{f.width}" '
        f'height="{f.height}" role="img" aria-label="privacy spend over time">',
        *_axes(f),
    ]
    if points:
        parts.append(_step_line(f, "plain-sum", [p.plain_sum for p in points], PLAIN_SUM))
        parts.append(_step_line(f, "composed", [p.composed for p in points], COMPOSED))
        parts += _markers(f)
        parts += _time_labels(f)
    parts += _legend(f)
    parts.append("</svg>")
    return Markup("".join(parts))
