"""Geometry for the console's inline SVG: line charts (weights, realised loss, trust), bars
(drift per expert) and the per-row weight bar.

The templates draw what these return; every drawn series also carries its values as text
(``data-values``), and the templates put the same numbers in a table beside the chart, so
the chart has a text alternative and a test can check the drawing against the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Okabe-Ito: told apart with the common colour-vision deficiencies.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000")
WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 28
DASHES = ("", "6 3", "2 3", "8 3 2 3")


def colour(j: int) -> str:
    return PALETTE[j % len(PALETTE)]


def value_text(v: float | None) -> str:
    return "-" if v is None else repr(float(v))


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    dash: str
    paths: list[str]  # one polyline per unbroken run of values
    values: str  # every value as text, "-" where there is none
    # Every value's point: a marker, so that a run of one value (a lone bucket of sparse
    # traffic) is drawn too; a missing value is a gap, not a point.
    points: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    series: list[Series]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    plot: tuple[int, int, int, int]  # left, top, right, bottom


def y_range(values: Sequence[float | None], floor: float | None = 0.0) -> tuple[float, float]:
    """A range holding every value (and ``floor``), a little wider than they are."""
    seen = [v for v in values if v is not None]
    if floor is not None:
        seen.append(floor)
    lo, hi = (min(seen), max(seen)) if seen else (0.0, 1.0)
    pad = 0.05 * ((hi - lo) or abs(hi) or 1.0)
    return (lo if lo == floor else lo - pad), hi + pad


def line_chart(
    x: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    x_labels: Sequence[str],
    y: tuple[float, float] = (0.0, 1.0),
) -> LineChart:
    """Values in ``y`` (clipped to it) against ``x``; a missing value breaks the line."""
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    lo, hi = (min(x), max(x)) if x else (0.0, 1.0)
    span = (hi - lo) or 1.0
    y_lo, y_hi = y
    y_span = (y_hi - y_lo) or 1.0
    y_values = [y_lo + y_span * k / 4 for k in range(5)]
    y_labels = [tick_label(v) for v in y_values]
    left = left_margin(y_labels)

    def px(v: float) -> float:
        return left + (v - lo) / span * (right - left)

    def py(v: float) -> float:
        return bottom - min(max((v - y_lo) / y_span, 0.0), 1.0) * (bottom - TOP)

    drawn = []
    for j, (name, values) in enumerate(series.items()):
        paths: list[str] = []
        run: list[str] = []
        points: list[tuple[float, float]] = []
        for xv, v in zip(x, values, strict=True):
            if v is None:
                if run:
                    paths.append(" ".join(run))
                run = []
            else:
                run.append(f"{px(xv):.1f},{py(v):.1f}")
                points.append((round(px(xv), 1), round(py(v), 1)))
        if run:
            paths.append(" ".join(run))
        drawn.append(
            Series(
                name,
                colour(j),
                DASHES[j % len(DASHES)],
                paths,
                " ".join(value_text(v) for v in values),
                tuple(points),
            )
        )
    step = max(1, len(x) // 6)
    x_ticks = [Tick(px(x[i]), x_labels[i]) for i in range(0, len(x), step)]
    y_ticks = [Tick(py(v), label) for v, label in zip(y_values, y_labels, strict=True)]
    return LineChart(WIDTH, HEIGHT, drawn, x_ticks, y_ticks, (round(left), TOP, right, bottom))


# An axis label's characters are at most this wide at the console's 12 px type; the
# labels are drawn right-aligned against the axis, so the margin must hold the longest.
CHAR_PX = 7.5


def tick_label(v: float) -> str:
    """A y-axis value, its minus sign the typographic one (as wide as a digit)."""
    text = f"{v:.3g}"
    return "\u2212" + text[1:] if text.startswith("-") else text


def left_margin(labels: Sequence[str]) -> float:
    """The plot's left edge: room for the longest y label and the gap before the axis."""
    return max(float(LEFT), 8 + CHAR_PX * max((len(t) for t in labels), default=0))


@dataclass(frozen=True)
class Bar:
    name: str
    colour: str
    x: float
    y: float
    width: float
    height: float
    value: float | None


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    marks: list[Tick]  # horizontal reference lines, e.g. drift thresholds
    y_ticks: list[Tick]
    plot: tuple[int, int, int, int]


def bar_chart(
    values: Mapping[str, float | None], marks: Sequence[tuple[float, str]] = ()
) -> BarChart:
    """One bar per name from 0; a missing value draws no bar. ``marks`` are reference
    levels drawn across the plot."""
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    top = max([v for v in values.values() if v is not None] + [m for m, _ in marks] + [0.0])
    top = top * 1.1 or 1.0

    def py(v: float) -> float:
        return bottom - min(max(v / top, 0.0), 1.0) * (bottom - TOP)

    slot = (right - LEFT) / max(1, len(values))
    bars = [
        Bar(name, colour(j), LEFT + slot * (j + 0.2), py(v or 0.0), slot * 0.6,
            bottom - py(v or 0.0), v)
        for j, (name, v) in enumerate(values.items())
    ]  # fmt: skip
    y_ticks = [Tick(py(top * k / 4), f"{top * k / 4:.3g}") for k in range(5)]
    return BarChart(
        WIDTH, HEIGHT, bars, [Tick(py(m), label) for m, label in marks], y_ticks,
        (LEFT, TOP, right, bottom),
    )  # fmt: skip


@dataclass(frozen=True)
class BarPart:
    name: str
    colour: str
    x: float
    width: float
    value: float


def weight_bar(
    weights: dict[str, float], experts: Sequence[str], width: int = 120
) -> list[BarPart]:
    """A stacked bar of one record's weights, experts in the bundle's order."""
    parts, at = [], 0.0
    for j, name in enumerate(experts):
        v = float(weights.get(name, 0.0))
        parts.append(BarPart(name, colour(j), at, v * width, v))
        at += v * width
    return parts
