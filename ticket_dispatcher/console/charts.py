"""Charts drawn on the server as SVG, with no front-end build: horizontal bars that read at
phone width (each label above its bar), scaled by their ``viewBox``, coloured by classes of
console.css (no inline style: the console's content policy forbids it). Each chart has a
title and a description; the page gives its numbers as a table as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH = 320  # the viewBox's width: a phone's; wider screens scale it up to the CSS max-width
ROW = 30  # a labelled bar: its label line, then the bar
BAR = 12


@dataclass(frozen=True)
class Segment:
    """One part of a stacked bar: its value and the CSS class that colours it."""

    value: float
    css: str


@dataclass(frozen=True)
class Bar:
    label: str
    segments: tuple[Segment, ...]
    marker: float | None = None  # a tick across the bar, e.g. the fair share
    note: str = ""  # written after the label: the numbers

    @property
    def total(self) -> float:
        return sum(segment.value for segment in self.segments)


def bar_chart(ident: str, title: str, description: str, bars: Sequence[Bar], *,
              legend: Sequence[tuple[str, str]] = ()) -> Markup:
    """Horizontal bars, stacked by segment, one row each, on one scale; ``ident`` names the
    chart's title and description in the page (unique in it)."""
    scale_to = max([bar.total for bar in bars] + [bar.marker or 0 for bar in bars] + [1])
    top = 18 if legend else 0
    height = top + ROW * max(len(bars), 1) + 4
    parts = [_head(ident, title, description, height)]
    parts += _legend(legend)
    for n, bar in enumerate(bars):
        y = top + n * ROW
        parts.append(f'<text x="0" y="{y + 11}" class="chart-label">{escape(bar.label)}'
                     f'<tspan class="chart-note"> {escape(bar.note)}</tspan></text>')
        x = 0.0
        for segment in bar.segments:
            width = (WIDTH - 2) * segment.value / scale_to
            if width > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y + 14}" width="{width:.1f}" '
                             f'height="{BAR}" class="{segment.css}"/>')
            x += width
        if bar.marker is not None:
            at = (WIDTH - 2) * bar.marker / scale_to
            parts.append(f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{y + 11}" y2="{y + 29}" '
                         'class="chart-marker"/>')
    if not bars:
        parts.append(f'<text x="0" y="{top + 14}" class="chart-note">nothing to show</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def column_chart(ident: str, title: str, description: str,
                 columns: Sequence[tuple[str, float]], css: str) -> Markup:
    """Vertical bars over time (the weekly trend), the first and last labels under them."""
    height, base = 120, 100
    scale_to = max([value for _, value in columns] + [1])
    step = WIDTH / max(len(columns), 1)
    parts = [_head(ident, title, description, height)]
    for n, (label, value) in enumerate(columns):
        tall = (base - 14) * value / scale_to
        x = n * step + step * 0.15
        parts.append(f'<rect x="{x:.1f}" y="{base - tall:.1f}" width="{step * 0.7:.1f}" '
                     f'height="{tall:.1f}" class="{css}"><title>{escape(label)}: '
                     f'{value:g}</title></rect>')
    parts.append(f'<line x1="0" x2="{WIDTH}" y1="{base}" y2="{base}" class="chart-axis"/>')
    if columns:
        parts.append(f'<text x="0" y="{base + 14}" class="chart-note">'
                     f'{escape(columns[0][0])}</text>')
        parts.append(f'<text x="{WIDTH}" y="{base + 14}" text-anchor="end" '
                     f'class="chart-note">{escape(columns[-1][0])}</text>')
        parts.append(f'<text x="0" y="10" class="chart-note">most in a week: '
                     f'{max(value for _, value in columns):g}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _head(ident: str, title: str, description: str, height: int) -> str:
    key = escape(ident)
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-labelledby="{key}-t {key}-d" xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{key}-t">{escape(title)}</title>'
            f'<desc id="{key}-d">{escape(description)}</desc>')


def _legend(legend: Sequence[tuple[str, str]]) -> list[str]:
    parts, x = [], 0
    for label, css in legend:
        parts.append(f'<rect x="{x}" y="2" width="10" height="10" class="{css}"/>'
                     f'<text x="{x + 14}" y="11" class="chart-note">{escape(label)}</text>')
        x += 14 + 7 * len(label) + 12
    return parts
