"""An independent reader of our Perfetto traces, on the official perfetto_trace_pb2 schema.

It decodes a trace the way trace_processor imports TrackEvent data and asserts the rules
Perfetto relies on: track descriptors before first use, valid interning (no iid 0, every iid
defined in the sequence's incremental state), strictly nested slices per track, flows that
start before they end. What it returns is plain data for the tests to check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

TE = official.TrackEvent


@dataclass
class Slice:
    track: int
    name: str
    ts: int
    end: int = -1
    depth: int = 0
    parent: Slice | None = None
    args: dict[str, Any] = field(default_factory=dict)
    flows_out: list[int] = field(default_factory=list)
    flows_in: list[int] = field(default_factory=list)


@dataclass
class Trace:
    packets: int
    tracks: dict[int, official.TrackDescriptor]
    slices: list[Slice]
    counters: dict[int, list[tuple[int, float]]]
    instants: list[Slice]
    flows: list[tuple[Slice, Slice]]

    def track_name(self, uuid: int) -> str:
        t = self.tracks[uuid]
        return t.thread.thread_name if t.HasField("thread") else t.name

    def thread_slices(self, tid: int) -> list[Slice]:
        return [s for s in self.slices if self.tracks[s.track].thread.tid == tid]

    def tids(self) -> list[int]:
        return sorted(t.thread.tid for t in self.tracks.values() if t.HasField("thread"))


def read(path: Path) -> Trace:
    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    tracks: dict[int, official.TrackDescriptor] = {}
    names: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    arg_values: dict[int, str] = {}
    open_slices: dict[int, list[Slice]] = {}
    slices: list[Slice] = []
    instants: list[Slice] = []
    counters: dict[int, list[tuple[int, float]]] = {}
    flow_start: dict[int, Slice] = {}
    flows: list[tuple[Slice, Slice]] = []
    sequence: int | None = None
    last_ts = 0
    for i, p in enumerate(trace.packet):
        if sequence is None:
            assert p.first_packet_on_sequence and p.previous_packet_dropped
            assert p.sequence_flags & official.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            sequence = p.trusted_packet_sequence_id
            assert sequence != 0
        assert p.trusted_packet_sequence_id == sequence, f"packet {i} on another sequence"
        assert p.sequence_flags & official.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        for n in p.interned_data.event_names:
            assert n.iid != 0
            names[n.iid] = n.name
        for n in p.interned_data.debug_annotation_names:
            assert n.iid != 0
            arg_names[n.iid] = n.name
        for n in p.interned_data.debug_annotation_string_values:
            assert n.iid != 0
            arg_values[n.iid] = n.str.decode()
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in tracks, f"track {d.uuid} described twice"
            assert not d.parent_uuid or d.parent_uuid in tracks, "parent described after child"
            tracks[d.uuid] = d
            continue
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        assert e.track_uuid in tracks, f"packet {i}: track {e.track_uuid} used before described"
        assert p.timestamp >= last_ts, f"packet {i}: time goes back"
        last_ts = p.timestamp
        stack = open_slices.setdefault(e.track_uuid, [])
        if e.type in (TE.TYPE_SLICE_BEGIN, TE.TYPE_INSTANT):
            assert e.name_iid in names, f"packet {i}: name iid {e.name_iid} not interned"
            s = Slice(e.track_uuid, names[e.name_iid], p.timestamp, depth=len(stack),
                      parent=stack[-1] if stack else None)
            for a in e.debug_annotations:
                assert a.name_iid in arg_names
                s.args[arg_names[a.name_iid]] = _value(a, arg_values)
            for f in e.flow_ids:
                assert f not in flow_start, f"flow {f} starts twice (flows cannot fork)"
                flow_start[f] = s
                s.flows_out.append(f)
            for f in e.terminating_flow_ids:
                flows.append((flow_start.pop(f), s))
                s.flows_in.append(f)
            if e.type == TE.TYPE_INSTANT:
                s.end = s.ts
                instants.append(s)
            else:
                stack.append(s)
                slices.append(s)
        elif e.type == TE.TYPE_SLICE_END:
            assert stack, f"packet {i}: slice end without a begin"
            stack.pop().end = p.timestamp
        elif e.type == TE.TYPE_COUNTER:
            counters.setdefault(e.track_uuid, []).append((p.timestamp, e.double_counter_value))
        for uuid, value in zip(e.extra_counter_track_uuids, e.extra_counter_values, strict=True):
            assert tracks[uuid].HasField("counter")
            counters.setdefault(uuid, []).append((p.timestamp, value))
    assert all(not s for s in open_slices.values()), "slices left open"
    assert not flow_start, f"flows never terminated: {sorted(flow_start)}"
    return Trace(len(trace.packet), tracks, slices, counters, instants, flows)


def _value(a: official.DebugAnnotation, strings: dict[int, str]) -> Any:
    kind = a.WhichOneof("value")
    if kind == "string_value_iid":
        assert a.string_value_iid in strings
        return strings[a.string_value_iid]
    return getattr(a, str(kind))
