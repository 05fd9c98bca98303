"""Render a layout as Chrome trace JSON (the `traceEvents` format), streamed event by event.

For tools that read only JSON. Slices become B/E pairs on their thread, DAG edges s/f flow
events, counters C events; tracks that are no thread (the recording) get pseudo-thread 0.
Timestamps are microseconds with nanosecond decimals.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import chain
from typing import Any, TextIO

from profinfer_perfetto.model.layout import EventType, Layout, TrackKind
from profinfer_perfetto.model.names import counter_arg

_PHASE = {EventType.SLICE_BEGIN: "B", EventType.SLICE_END: "E", EventType.INSTANT: "i"}
Event = dict[str, Any]
"""One trace event, as JSON."""


def write_chrome_json(layout: Layout, out: TextIO) -> int:
    """Write the whole trace; returns the number of trace events."""
    out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
    count = 0
    for event in chain(_metadata(layout), _timeline(layout)):
        out.write((",\n" if count else "") + json.dumps(event, separators=(",", ":")))
        count += 1
    out.write("\n]}\n")
    return count


def _metadata(layout: Layout) -> Iterator[Event]:
    """The process's name and each thread's (and pseudo-thread 0's: the recording's)."""
    pid = layout.pid
    yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": layout.process_name}}
    for track in layout.tracks:
        if track.kind in (TrackKind.THREAD, TrackKind.GLOBAL):
            tid = track.tid if track.kind == TrackKind.THREAD else 0
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": track.name}}


def _flow_ids(layout: Layout) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Layout row -> the flows that leave it, and those that arrive at it. A flow id per flow:
    trace_processor's JSON import keeps an ended flow's id (the layout's ids come back once
    their flow ended)."""
    flows_out: dict[int, list[int]] = {}
    flows_in: dict[int, list[int]] = {}
    for flow, (_, out_row, in_row) in enumerate(layout.flows.tolist(), start=1):
        flows_out.setdefault(out_row, []).append(flow)
        flows_in.setdefault(in_row, []).append(flow)
    return flows_out, flows_in


def _timeline(layout: Layout) -> Iterator[Event]:
    """The layout's rows in order: each slice edge or instant with its flows and counters, each
    counter value."""
    pid, tracks = layout.pid, layout.tracks
    tid_of = [t.tid if t.kind in (TrackKind.THREAD, TrackKind.COUNTER) else 0 for t in tracks]
    flows_out, flows_in = _flow_ids(layout)
    row_args = _row_args(layout)
    rows = zip(layout.ts.tolist(), layout.type.tolist(), layout.track.tolist(),
               layout.name.tolist(), layout.args.tolist(), layout.desc.tolist(),
               layout.value.tolist(), layout.counter_track.tolist(),
               layout.counter_value.tolist(), layout.counter_delta.tolist(), strict=True)
    for row, (ts, typ, track, name, args, desc, value, counter_tracks, counter_values,
              deltas) in enumerate(rows):
        us = ts / 1000
        tid = tid_of[track]
        if typ == EventType.COUNTER:
            yield {"ph": "C", "name": tracks[track].name, "pid": pid, "ts": us,
                   "args": {"value": value}}
            continue
        event = _slice_event(layout, EventType(typ), tid, us, name, args, desc, deltas)
        if row in row_args:
            event["args"] = event.get("args", {}) | row_args[row]
        yield event
        for flow in flows_out.get(row, ()):
            yield {"ph": "s", "id": flow, "name": "dag", "cat": "dag", "pid": pid, "tid": tid,
                   "ts": us}
        for flow in flows_in.get(row, ()):
            yield {"ph": "f", "bp": "e", "id": flow, "name": "dag", "cat": "dag", "pid": pid,
                   "tid": tid, "ts": us}
        for counter_track, v in zip(counter_tracks, counter_values, strict=True):
            if counter_track >= 0:
                yield {"ph": "C", "name": tracks[counter_track].name, "pid": pid, "ts": us,
                       "args": {"value": v}}


def _row_args(layout: Layout) -> dict[int, dict[str, int]]:
    """Layout row -> its row args (Layout.row_args)."""
    found: dict[int, dict[str, int]] = {}
    for arg in layout.row_args:
        for row, value in zip(arg.rows.tolist(), arg.values.tolist(), strict=True):
            found.setdefault(row, {})[arg.key] = value
    return found


def _slice_event(layout: Layout, typ: EventType, tid: int, us: float, name: int, args: int,
                 desc: int, deltas: list[int]) -> Event:
    """A slice's begin or end, or an instant."""
    event: Event = {"ph": _PHASE[typ], "pid": layout.pid, "tid": tid, "ts": us}
    if name >= 0:
        event["name"] = layout.strings[name]
    if args >= 0:
        # Each event with its node's whole description: JSON has no references.
        event["args"] = dict(layout.arg_sets[args]) | dict(layout.arg_sets[desc] if desc >= 0
                                                          else ())
        for counter, delta in zip(layout.counter_names, deltas, strict=True):
            if delta >= 0:
                event["args"][counter_arg(counter)] = delta
    if typ == EventType.INSTANT:
        event["s"] = "t"
    return event
