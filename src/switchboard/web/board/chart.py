"""A small server-rendered SVG chart: closed attempts per day for one queue, stacked by outcome.

No script: the SVG is markup built with escaping, labelled for assistive technology (`role="img"`,
a title and a description), each bar segment has a tooltip title, and the page shows the same numbers
in a table. Outcomes differ by colour and by pattern, so colour is not the only cue.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from ...core.stats import OUTCOMES, QueueOutcomes

WIDTH, HEIGHT = 560, 180
LEFT, RIGHT, TOP, BOTTOM = 36, 8, 10, 28
# outcome: (colour, texture: None, "sb-hatch" or "sb-dots")
STYLE = {
    "completed": ("#2e7d32", None),
    "failed": ("#c62828", "sb-hatch"),
    "released": ("#1565c0", None),
    "lease_expired": ("#6d4c41", "sb-dots"),
    "reaped": ("#4a148c", "sb-dots"),
    "canceled": ("#616161", None),
    "revoked": ("#e65100", "sb-hatch"),
}


def defs_svg() -> Markup:
    """The patterns, once per page, referenced by every swatch and chart on it."""
    return Markup('<svg class="sb-defs" width="0" height="0" aria-hidden="true" focusable="false">'
                  + _defs() + '</svg>')


def _defs() -> str:
    out = ["<defs>"]
    for outcome, (colour, kind) in STYLE.items():
        if kind == "sb-hatch":
            out.append(f'<pattern id="sb-p-{outcome}" width="6" height="6" patternUnits="userSpaceOnUse" '
                       f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{colour}"/>'
                       f'<line x1="0" y1="0" x2="0" y2="6" stroke="#fff" stroke-width="2"/></pattern>')
        elif kind == "sb-dots":
            out.append(f'<pattern id="sb-p-{outcome}" width="6" height="6" patternUnits="userSpaceOnUse">'
                       f'<rect width="6" height="6" fill="{colour}"/><circle cx="3" cy="3" r="1.3" fill="#fff"/>'
                       f'</pattern>')
    out.append("</defs>")
    return "".join(out)


def _fill(outcome: str) -> str:
    colour, kind = STYLE.get(outcome, ("#000", None))
    return f"url(#sb-p-{outcome})" if kind else colour


def swatch(outcome: str) -> Markup:
    return Markup('<svg class="sb-swatch" width="14" height="14" viewBox="0 0 14 14" aria-hidden="true" '
                  'focusable="false"><rect width="14" height="14" fill="{f}"/></svg>').format(f=_fill(outcome))


def outcome_chart(q: QueueOutcomes, chart_id: str) -> Markup:
    days = q.days
    totals = [sum(q.counts.get(d, {}).values()) for d in days]
    peak = max(totals + [1])
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(days), 1)
    bar_w = max(2.0, slot * 0.7)
    parts = [
        f'<svg class="sb-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d" xmlns="http://www.w3.org/2000/svg">',
        str(Markup('<title id="{}-t">Attempt outcomes per day for queue {} of endpoint {}</title>').format(
            chart_id, q.queue, q.endpoint)),
        str(Markup('<desc id="{}-d">{} closed attempts over {} days, most on one day: {}. '
                   'The table below lists the same numbers.</desc>').format(chart_id, q.total, len(days), peak)),
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" stroke="#555"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="11" fill="#333">{peak}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="11" fill="#333">0</text>',
    ]
    for i, day in enumerate(days):
        x = LEFT + i * slot + (slot - bar_w) / 2
        y: float = TOP + plot_h
        per = q.counts.get(day, {})
        for outcome in OUTCOMES:
            n = per.get(outcome, 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(str(Markup(
                '<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}">'
                '<title>{}: {} {}</title></rect>').format(x, y, bar_w, h, _fill(outcome), day.isoformat(), n,
                                                           outcome.replace("_", " "))))
        if i == 0 or i == len(days) - 1 or (len(days) > 7 and i % 7 == 0):
            parts.append(str(Markup('<text x="{:.1f}" y="{}" text-anchor="middle" font-size="11" fill="#333">{}'
                                    '</text>').format(x + bar_w / 2, HEIGHT - 10, day.strftime("%m-%d"))))
    parts.append("</svg>")
    return Markup("".join(parts))


def legend_items() -> list[tuple[str, Markup]]:
    return [(o, swatch(o)) for o in OUTCOMES]


__all__ = ["outcome_chart", "legend_items", "swatch", "defs_svg", "escape"]
