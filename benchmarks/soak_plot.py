"""Draws a soak results file's resident memory over time as an SVG (standard library only).

    python benchmarks/soak_plot.py benchmarks/results/<soak>.json docs/images/<soak>.svg

One line per process (trainer, evaluator): VmRSS in MiB against minutes since the start, the
samples `benchmarks/soak.py` took while both processes ran, with a dashed vertical line at each
evaluation the evaluator finished (from the samples' `evaluations` count) and a shaded band for
the evaluator's judged window (after its warm-up evaluations). The same file always gives the
same SVG, so the docs' image can be checked against its results file
(tests/test_soak_harness.py).
"""

from __future__ import annotations

import json
import sys
from typing import Dict, List, Tuple

WIDTH, HEIGHT = 760, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 50
COLOURS = {"trainer": "#1f77b4", "evaluator": "#d62728"}


def _scale(lo: float, hi: float, out_lo: float, out_hi: float):
    span = (hi - lo) or 1.0
    return lambda v: out_lo + (v - lo) * (out_hi - out_lo) / span


def _ticks(lo: float, hi: float, count: int = 6) -> List[float]:
    """Round tick values covering [lo, hi]."""
    raw = (hi - lo) / max(count - 1, 1) or 1.0
    magnitude = 10 ** len(str(int(raw))) / 10
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = (lo // step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 2)
            if lo <= first + i * step <= hi]


def series(data: Dict) -> Tuple[Dict[str, List[Tuple[float, float]]], List[float]]:
    """({process: [(minute, RSS MiB)]}, minutes at which an evaluation finished)."""
    lines = {name: [] for name in COLOURS}
    evaluations, seen = [], 0
    for sample in data["samples"]:
        minute = sample["time_s"] / 60
        for name in COLOURS:
            if sample.get(name):
                lines[name].append((minute, sample[name]["rss_kib"] / 1024))
        count = sample.get("evaluations", 0)
        if count > seen:
            evaluations.append(minute)
            seen = count
    return lines, evaluations


def render(data: Dict) -> str:
    """The SVG text of `data`'s RSS-over-time plot."""
    lines, evaluations = series(data)
    points = [p for line in lines.values() for p in line]
    x_hi = max(p[0] for p in points)
    y_lo, y_hi = 0.0, max(p[1] for p in points) * 1.08
    x = _scale(0.0, x_hi, LEFT, WIDTH - RIGHT)
    y = _scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    warm_up = data.get("evaluator_warm_up_evaluations", 0)
    if warm_up and len(evaluations) >= warm_up:
        start = x(evaluations[warm_up - 1])
        out.append(f'<rect x="{start:.1f}" y="{TOP}" width="{WIDTH - RIGHT - start:.1f}" '
                   f'height="{HEIGHT - BOTTOM - TOP}" fill="#d62728" fill-opacity="0.06"/>')
    for minute in evaluations:
        out.append(f'<line x1="{x(minute):.1f}" x2="{x(minute):.1f}" y1="{TOP}" '
                   f'y2="{HEIGHT - BOTTOM}" stroke="#bbbbbb" stroke-dasharray="3,3"/>')
    for value in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" '
                   f'y2="{y(value):.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                   f'{value:g}</text>')
    for value in _ticks(0.0, x_hi, 8):
        out.append(f'<text x="{x(value):.1f}" y="{HEIGHT - BOTTOM + 18}" '
                   f'text-anchor="middle">{value:g}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 10}" '
               f'text-anchor="middle">minutes since start (dashed: an evaluation finished)'
               f'</text>')
    out.append(f'<text x="16" y="{(TOP + HEIGHT - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(TOP + HEIGHT - BOTTOM) / 2})">RSS (MiB)</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
               f'height="{HEIGHT - TOP - BOTTOM}" fill="none" stroke="black"/>')
    for i, (name, line) in enumerate(lines.items()):
        path = " ".join(f"{x(m):.1f},{y(r):.1f}" for m, r in line)
        out.append(f'<polyline points="{path}" fill="none" stroke="{COLOURS[name]}" '
                   f'stroke-width="1.5"/>')
        out.append(f'<text x="{LEFT + 10 + 110 * i}" y="{TOP - 10}" fill="{COLOURS[name]}">'
                   f'{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit("usage: python benchmarks/soak_plot.py RESULTS.json OUT.svg")
    with open(argv[0]) as f:
        svg = render(json.load(f))
    with open(argv[1], "w") as f:
        f.write(svg)
    print(f"wrote {argv[1]}")


if __name__ == "__main__":
    main()
