"""Draw one token step of a trace as an SVG timeline, for the docs (no browser can take a
screenshot of the Perfetto UI here): the calling thread's slices nested by depth (the step, its
splits `graph CPU` / `graph Vulkan0`, the copies and the wait, then the ops and submits inside
a split), the other threads' slices, and the device's track (`Vulkan0`, from
`record --gpu-timestamps`) below; a second panel zooms on the step's first milliseconds, where
the host records the Vulkan split's ops, a third on the device's first tens of milliseconds.
Read through the project's query API (either engine).

    python -m scripts.timeline_svg TRACE OUT.svg [--step N] [--zoom-ms MS] [--device-ms MS]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from html import escape
from pathlib import Path

from profinfer_perfetto.query.session import TraceQuery

WIDTH, LEFT, RIGHT, ROW = 1100, 150, 40, 18
CHAR = 6.0
"""About the width of a character of the labels' 11 px sans-serif font, in pixels."""
COLOURS = {"graph Vulkan0": "#c0392b", "graph CPU": "#2471a3", "submit": "#f39c12",
           "wait for device": "#7d3c98", "copy": "#17a589", "barrier wait": "#aab7b8"}
STEP_COLOUR, OP_COLOUR = "#34495e", "#839192"
DEVICE_COLOURS = {"MUL_MAT": "#e74c3c", "FLASH_ATTN_EXT": "#8e44ad", "RMS_NORM": "#d68910",
                  "": "#5dade2"}
"""The device's slices by their op (the first that starts the slice's name; "": the others)."""


@dataclass(frozen=True)
class Bar:
    row: tuple[int, int]
    """(thread, depth): thread 0 the calling thread, 1... the others, DEVICE the device."""
    name: str
    ts: int
    dur: int


DEVICE = 1 << 20


def _colour(bar: Bar) -> str:
    if bar.row[0] == DEVICE:
        return next(c for op, c in DEVICE_COLOURS.items() if bar.name.startswith(op))
    key = "copy" if bar.name.startswith("copy ") else bar.name
    return COLOURS.get(key, STEP_COLOUR if bar.row[1] == 0 else OP_COLOUR)


def _row_label(row: tuple[int, int]) -> str:
    thread, depth = row
    if thread == DEVICE:
        return "Vulkan0 (device)"
    return f"{'main' if thread == 0 else f'worker {thread}'}, depth {depth}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.0f} ms" if ns >= 1e8 else f"{ns / 1e6:.3g} ms"


def step_bars(q: TraceQuery, step: int) -> tuple[int, int, list[Bar]]:
    """The step's start and duration (the `step`-th decode slice, from 0; -1: the last) and
    every slice that starts within it: a row per (thread, depth), and one for the device."""
    steps = q.sql("SELECT ts, dur FROM slice WHERE name = 'decode' ORDER BY ts").rows
    start, dur = (int(v) for v in steps[step])
    rows = q.sql(
        "SELECT s.name, s.ts, s.dur, s.depth, t.name, tt.utid FROM slice s "
        "JOIN track t ON s.track_id = t.id LEFT JOIN thread_track tt ON tt.id = s.track_id "
        f"WHERE s.ts >= {start} AND s.ts < {start + dur} ORDER BY s.ts").rows
    utids = sorted({int(r[5]) for r in rows if r[5] is not None})
    bars = []
    for name, ts, length, depth, track, utid in rows:
        if utid is not None:
            bars.append(Bar((utids.index(utid), int(depth)), str(name), int(ts), int(length)))
        elif track == "Vulkan0":
            bars.append(Bar((DEVICE, 0), str(name), int(ts), int(length)))
    return start, dur, bars


def panel(bars: list[Bar], step: int, window: tuple[int, int], top: int,
          title: str) -> tuple[list[str], int]:
    """One timeline of `window` (its offset from the step's start `step` and its span, in ns)
    at height `top`: a row per (thread, depth), the device last, a bar per slice (one that falls
    on the pixels of the one before in its row is left out), labelled where its name fits."""
    offset, span = window
    start = step + offset
    order = sorted({b.row for b in bars})
    scale = (WIDTH - LEFT - RIGHT) / span
    out = [f'<text x="4" y="{top + 12}" font-weight="bold">{escape(title)}</text>']
    last: dict[tuple[int, int], int] = {}
    for i, row in enumerate(order):
        y = top + 20 + i * ROW
        out.append(f'<text x="4" y="{y + 12}">{_row_label(row)}</text>')
        for bar in (b for b in bars if b.row == row and b.ts < start + span):
            x = LEFT + (max(bar.ts, start) - start) * scale
            w = (min(bar.ts + bar.dur, start + span) - max(bar.ts, start)) * scale
            if w < 0 or int(x + w) <= last.get(row, -1):
                continue
            last[row] = int(x + w)
            text = f"{escape(bar.name)} {_ms(bar.dur)}"
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.4, 0.6):.1f}" '
                       f'height="{ROW - 3}" fill="{_colour(bar)}"><title>{text}</title></rect>')
            label = next((t for t in (text, escape(bar.name)) if w > CHAR * len(t) + 4), "")
            if label:
                out.append(f'<text x="{x + 2:.1f}" y="{y + 12}" fill="white">{label}</text>')
    bottom = top + 20 + len(order) * ROW
    for tick in range(5):
        x = LEFT + tick * (WIDTH - LEFT - RIGHT) / 4
        out.append(f'<text x="{x:.0f}" y="{bottom + 12}" fill="#555">'
                   f'+{_ms(offset + span * tick / 4)}</text>')
    return out, bottom + 24


def legend(top: int) -> tuple[list[str], int]:
    """A square of each colour with what it means, in lines from height `top`."""
    keys = {**COLOURS, "step": STEP_COLOUR, "op (host: recording it)": OP_COLOUR,
            **{f"device: {op or 'other ops'}": c for op, c in DEVICE_COLOURS.items()}}
    out, x = [], 4.0
    for name, colour in keys.items():
        if x + CHAR * len(name) > WIDTH - 20:
            x, top = 4.0, top + 16
        out.append(f'<rect x="{x:.0f}" y="{top}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14:.0f}" y="{top + 9}">{escape(name)}</text>')
        x += 14 + CHAR * len(name) + 12
    return out, top + 20


def timeline(q: TraceQuery, step: int, zoom_ns: int, device_ns: int) -> str:
    """The step whole, its first `zoom_ns` (the host records the ops), and the device's first
    `device_ns` of work (its first device slice on)."""
    start, dur, bars = step_bars(q, step)
    first = min((b.ts for b in bars if b.row[0] == DEVICE), default=start) - start
    panels = [((0, dur), f"one decode step, {_ms(dur)}"),
              ((0, zoom_ns), f"its first {_ms(zoom_ns)}: the host records the split's ops"),
              ((first, device_ns), f"the device's first {_ms(device_ns)} of work")]
    parts, y = legend(4)
    for window, title in panels:
        drawn, y = panel(bars, start, window, y, title)
        parts += drawn
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" '
            'font-family="sans-serif" font-size="11">'
            f'<rect width="{WIDTH}" height="{y}" fill="white"/>' + "".join(parts) + "</svg>\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--step", type=int, default=-1, help="which decode step (default last)")
    parser.add_argument("--zoom-ms", type=float, default=4.0, help="the host's panel")
    parser.add_argument("--device-ms", type=float, default=30.0, help="the device's panel")
    args = parser.parse_args()
    with TraceQuery(args.trace) as q:
        args.out.write_text(timeline(q, args.step, int(args.zoom_ms * 1e6),
                                     int(args.device_ms * 1e6)))


if __name__ == "__main__":
    main()
