"""An independent reader of our Perfetto traces, on the official perfetto_trace_pb2 schema.

It decodes a trace the way trace_processor imports TrackEvent data: compressed_packets
expanded in place; one incremental state per trusted packet sequence (interned data, packet
defaults, sequence-scoped clocks), reset by SEQ_INCREMENTAL_STATE_CLEARED; timestamps
turned into CLOCK_BOOTTIME through the sequence's ClockSnapshot, incremental clocks adding
each packet's delta to the last. On the way it asserts the rules Perfetto relies on: track
descriptors before first use, valid interning (no iid 0, every iid defined in the sequence's
incremental state), strictly nested slices per track, time never going back on a track,
flows that start before they end. An op slice that names its node's description by number
gets the description's args from the slice that carries them (the first with that number), as
a user finds them. What it returns is plain data for the tests to check.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.model.names import COUNTER_ARG_PREFIX, CPU_ARG, DESC_ARG

TE = official.TrackEvent
BOOTTIME = 6
CLEARED = official.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = official.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


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
        name: str = t.thread.thread_name if t.HasField("thread") else t.name
        return name

    def thread_slices(self, tid: int) -> list[Slice]:
        return [s for s in self.slices if self.tracks[s.track].thread.tid == tid]

    def tids(self) -> list[int]:
        return sorted(t.thread.tid for t in self.tracks.values() if t.HasField("thread"))


@dataclass
class _Clock:
    """A sequence-scoped clock, tied to BOOTTIME by the last ClockSnapshot that had it."""

    at: int  # its reading in that snapshot, ns
    boottime: int  # BOOTTIME in that snapshot
    unit: int
    incremental: bool
    last: int  # its latest reading, ns: what an incremental timestamp is a delta from

    def boot(self, ts: int) -> int:
        if self.incremental and ts >= 1 << 63:  # a negative delta, as trace_processor adds it
            ts -= 1 << 64
        ns = ts * self.unit + (self.last if self.incremental else 0)
        # An incremental clock may go back before its snapshot (a streamed run's `record` slice
        # begins before the chunk that first wrote its sequence); trace_processor converts
        # it all the same.
        assert self.incremental or ns >= self.at, "timestamp before its clock's snapshot"
        self.last = ns
        return self.boottime + ns - self.at


@dataclass
class _Sequence:
    """One trusted packet sequence's incremental state, dropped when a packet clears it."""

    names: dict[int, str] = field(default_factory=dict)
    arg_names: dict[int, str] = field(default_factory=dict)
    arg_values: dict[int, str] = field(default_factory=dict)
    defaults: official.TracePacketDefaults = field(default_factory=official.TracePacketDefaults)
    clocks: dict[int, _Clock] = field(default_factory=dict)

    def time(self, p: official.TracePacket) -> int:
        """The packet's timestamp in BOOTTIME ns."""
        clock = p.timestamp_clock_id or self.defaults.timestamp_clock_id
        if clock in (0, BOOTTIME):
            return int(p.timestamp)
        assert clock in self.clocks, f"clock {clock} has no snapshot on this sequence"
        return self.clocks[clock].boot(p.timestamp)


def read(path: Path) -> Trace:
    reader = _Reader()
    decoded = list(packets(path.read_bytes()))
    for i, p in enumerate(decoded):
        reader.packet(i, p)
    return reader.trace(len(decoded))


@dataclass
class _Reader:
    """The state of a trace read packet by packet."""

    sequences: dict[int, _Sequence] = field(default_factory=dict)
    tracks: dict[int, official.TrackDescriptor] = field(default_factory=dict)
    last_ts: dict[int, int] = field(default_factory=dict)
    open_slices: dict[int, list[Slice]] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)
    instants: list[Slice] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    flow_start: dict[int, Slice] = field(default_factory=dict)
    flows: list[tuple[Slice, Slice]] = field(default_factory=list)

    def trace(self, packets: int) -> Trace:
        assert all(not s for s in self.open_slices.values()), "slices left open"
        assert not self.flow_start, f"flows never terminated: {sorted(self.flow_start)}"
        # trace_processor sorts events by time; the slice table comes out in that order.
        self.slices.sort(key=lambda s: s.ts)
        self.instants.sort(key=lambda s: s.ts)
        _describe(self.slices)
        return Trace(packets, self.tracks, self.slices, self.counters, self.instants,
                     self.flows)

    def packet(self, i: int, p: official.TracePacket) -> None:
        seq = self.sequence(i, p)
        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            _snapshot(seq, p.clock_snapshot)
            return  # trace_processor reads no timestamp from a snapshot packet
        ts = seq.time(p) if p.HasField("timestamp") else None
        if kind == "track_descriptor":
            d = p.track_descriptor
            assert d.uuid not in self.tracks, f"track {d.uuid} described twice"
            assert not d.parent_uuid or d.parent_uuid in self.tracks, (
                "parent described after child")
            assert not d.counter.is_incremental, "incremental counters are not read here"
            self.tracks[d.uuid] = d
        elif kind == "track_event":
            assert p.sequence_flags & (CLEARED | NEEDS), (
                f"packet {i}: does not say it needs state")
            assert ts is not None, f"packet {i}: track event without a timestamp"
            self.track_event(i, p.track_event, seq, ts)

    def sequence(self, i: int, p: official.TracePacket) -> _Sequence:
        """The packet's sequence state, after the packet's own interned data and defaults."""
        sid = p.trusted_packet_sequence_id
        assert sid != 0, f"packet {i}: no sequence"
        cleared = bool(p.sequence_flags & CLEARED)
        if sid not in self.sequences:
            assert p.first_packet_on_sequence and p.previous_packet_dropped and cleared, (
                f"packet {i}: sequence {sid} does not start by clearing its state")
        else:
            assert not p.first_packet_on_sequence, f"packet {i}: sequence {sid} starts twice"
            assert cleared or not p.previous_packet_dropped, f"packet {i}: packets lost"
        if cleared:
            self.sequences[sid] = _Sequence()
        seq = self.sequences[sid]
        if p.HasField("trace_packet_defaults"):
            seq.defaults = p.trace_packet_defaults
        for n in p.interned_data.event_names:
            _intern(seq.names, n.iid, n.name)
        for n in p.interned_data.debug_annotation_names:
            _intern(seq.arg_names, n.iid, n.name)
        for n in p.interned_data.debug_annotation_string_values:
            _intern(seq.arg_values, n.iid, n.str.decode())
        return seq

    def advance(self, uuid: int, ts: int, i: int) -> None:
        assert uuid in self.tracks, f"packet {i}: track {uuid} used before described"
        assert ts >= self.last_ts.get(uuid, ts), f"packet {i}: time goes back on track {uuid}"
        self.last_ts[uuid] = ts

    def track_event(self, i: int, e: official.TrackEvent, seq: _Sequence, ts: int) -> None:
        defaults = seq.defaults.track_event_defaults
        uuid = e.track_uuid if e.HasField("track_uuid") else defaults.track_uuid
        self.advance(uuid, ts, i)
        stack = self.open_slices.setdefault(uuid, [])
        if e.type in (TE.TYPE_SLICE_BEGIN, TE.TYPE_INSTANT):
            self.begin(i, e, seq, Slice(uuid, "", ts, depth=len(stack),
                                        parent=stack[-1] if stack else None))
        else:
            assert not _flows(e) and not _ends(e), f"packet {i}: flow on no slice"
        if e.type == TE.TYPE_SLICE_END:
            assert stack, f"packet {i}: slice end without a begin"
            stack.pop().end = ts
        elif e.type == TE.TYPE_COUNTER:
            assert self.tracks[uuid].HasField("counter"), (
                f"packet {i}: {uuid} is no counter track")
            value = (e.double_counter_value if e.HasField("double_counter_value")
                     else e.counter_value)
            self.counters.setdefault(uuid, []).append((ts, value * _unit(self.tracks[uuid])))
        self.extra_counters(i, e, defaults, ts)

    def begin(self, i: int, e: official.TrackEvent, seq: _Sequence, s: Slice) -> None:
        """A slice (or instant) begins: its name, args and flows."""
        assert e.name_iid in seq.names, f"packet {i}: name iid {e.name_iid} not interned"
        s.name = seq.names[e.name_iid]
        for a in e.debug_annotations:
            assert a.name_iid in seq.arg_names
            s.args[seq.arg_names[a.name_iid]] = _value(a, seq.arg_values)
        for f in _flows(e):
            assert f not in self.flow_start, f"flow {f} starts twice (flows cannot fork)"
            self.flow_start[f] = s
            s.flows_out.append(f)
        for f in _ends(e):
            assert f in self.flow_start and self.flow_start[f].ts <= s.ts, (
                f"flow {f} ends before it starts")
            self.flows.append((self.flow_start.pop(f), s))
            s.flows_in.append(f)
        if e.type == TE.TYPE_INSTANT:
            s.end = s.ts
            self.instants.append(s)
        else:
            self.open_slices[s.track].append(s)
            self.slices.append(s)

    def extra_counters(self, i: int, e: official.TrackEvent,
                       defaults: official.TrackEventDefaults, ts: int) -> None:
        extra: list[tuple[Sequence[int], Sequence[float], Sequence[int]]] = [
            (e.extra_counter_track_uuids, e.extra_counter_values,
             defaults.extra_counter_track_uuids),
            (e.extra_double_counter_track_uuids, e.extra_double_counter_values,
             defaults.extra_double_counter_track_uuids)]
        # trace_processor drops an event with more than 8 extra counter values.
        assert sum(len(v) for _, v, _ in extra) <= 8, f"packet {i}: over 8 extra counters"
        for uuids, values, default_uuids in extra:
            uuids = uuids or (default_uuids if values else [])
            assert len(uuids) == len(values), f"packet {i}: {len(values)} values {len(uuids)} uuids"
            for u, v in zip(uuids, values, strict=True):
                self.advance(u, ts, i)
                assert self.tracks[u].HasField("counter"), f"packet {i}: {u} is no counter track"
                self.counters.setdefault(u, []).append((ts, v * _unit(self.tracks[u])))


def _describe(slices: list[Slice]) -> None:
    """Give each op slice that names its node's description by number the description's args,
    as a user finds them on the first slice with that number (the one that has them)."""
    known: dict[int, dict[str, Any]] = {}
    for s in slices:
        number = s.args.get(DESC_ARG)
        if number is None:
            continue
        if "op" in s.args:
            assert number not in known, f"description {number} written twice"
            known[number] = {k: v for k, v in s.args.items() if k not in _OWN
                             and not k.startswith(COUNTER_ARG_PREFIX)}
        else:
            assert number in known, f"description {number} used before it is written"
            s.args = known[number] | s.args


_OWN = ("node", DESC_ARG, CPU_ARG)
"""An op slice's args that are not its node's description."""


def packets(data: bytes) -> Iterator[official.TracePacket]:
    """The trace's packets in order, each compressed_packets bundle expanded in its place."""
    trace = official.Trace()
    trace.ParseFromString(data)
    for p in trace.packet:
        if p.WhichOneof("data") == "compressed_packets":
            assert len(p.ListFields()) == 1, "trace_processor reads nothing beside the bundle"
            yield from packets(zlib.decompress(p.compressed_packets))
        else:
            yield p


def _snapshot(seq: _Sequence, snapshot: official.ClockSnapshot) -> None:
    clocks = {c.clock_id: c for c in snapshot.clocks}
    assert len(clocks) == len(snapshot.clocks), "a clock twice in one snapshot"
    assert snapshot.primary_trace_clock in (0, BOOTTIME), "trace time is not BOOTTIME"
    assert BOOTTIME in clocks, "a snapshot without BOOTTIME"
    boottime = clocks.pop(BOOTTIME).timestamp
    for c in clocks.values():
        assert 64 <= c.clock_id < 128, f"clock {c.clock_id}: only sequence clocks are read"
        unit = c.unit_multiplier_ns or 1
        seq.clocks[c.clock_id] = _Clock(c.timestamp * unit, boottime, unit, c.is_incremental,
                                        c.timestamp * unit)


def _intern(table: dict[int, str], iid: int, value: str) -> None:
    assert iid != 0, "iid 0 is not a valid interning id"
    # trace_processor keeps the first definition of an iid within a generation.
    assert table.setdefault(iid, value) == value, f"iid {iid} redefined"


def _unit(track: official.TrackDescriptor) -> int:
    return track.counter.unit_multiplier or 1


def _value(a: official.DebugAnnotation, strings: dict[int, str]) -> Any:
    kind = a.WhichOneof("value")
    if kind == "string_value_iid":
        assert a.string_value_iid in strings
        return strings[a.string_value_iid]
    return getattr(a, str(kind))


def _flows(e: official.TrackEvent) -> list[int]:
    """The flow ids an event starts, as trace_processor reads them: the fixed64 field's, else
    the varint one's (deprecated, which we write: a small id in one byte)."""
    return list(e.flow_ids or e.flow_ids_old)


def _ends(e: official.TrackEvent) -> list[int]:
    """The flow ids an event terminates, read as _flows reads the ones it starts."""
    return list(e.terminating_flow_ids or e.terminating_flow_ids_old)
