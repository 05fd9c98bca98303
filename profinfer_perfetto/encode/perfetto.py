"""Render a layout as a Perfetto protobuf trace.

Sequences (each a trusted packet sequence with its own incremental state):
- 1 holds the track descriptors;
- 2 the events of tracks that are no thread (the recording, tokens/s, aggregate counters);
- 3, 4, ... one per thread: its slices, with its perf-counter tracks sampled as extra counter
  values;
- with --sched, one more for the scheduling's ftrace bundles (encode/sched.py).
Each event sequence starts with a packet that clears its state and sets what its events then
leave out: the interned names, a sequence-scoped incremental clock (a clock snapshot against
CLOCK_BOOTTIME, so each event's timestamp is the delta from the sequence's previous one) and
TrackEvent defaults (the thread's track and its counter tracks). Events follow in time order,
rendered with numpy and written in zlib chunks (`compressed_packets`), which trace_processor and
ui.perfetto.dev expand on load.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

import numpy as np

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.encode.sched import sched_packets
from profinfer_perfetto.encode.wire import Pieces, field, tag, varint, varint_sizes
from profinfer_perfetto.model.layout import ArgValue, EventType, Layout, Track, TrackKind
from profinfer_perfetto.model.names import counter_arg

DESCRIPTOR_SEQUENCE = 1
GLOBAL_SEQUENCE = 2
INCREMENTAL_CLOCK = 64
"""The first sequence-scoped clock id."""
CHUNK_ROWS = 32768
"""Events per compressed packet (about 0.5 to 1 MiB before compression)."""
COMPRESSION_LEVEL = 6

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BOOTTIME = pb.ClockSnapshot.Clock.BOOTTIME


def _descriptor(layout: Layout, track: Track) -> pb.TrackDescriptor:
    desc = pb.TrackDescriptor(uuid=track.uuid)
    if track.parent:
        desc.parent_uuid = track.parent
    if track.kind == TrackKind.PROCESS:
        desc.process.pid = layout.pid
        desc.process.process_name = layout.process_name
        desc.process.cmdline.extend(layout.cmdline)
    elif track.kind == TrackKind.THREAD:
        desc.thread.pid = layout.pid
        desc.thread.tid = track.tid
        desc.thread.thread_name = track.name
    else:
        desc.name = track.name
        if track.kind == TrackKind.COUNTER:
            desc.counter.unit_name = track.unit
    return desc


def _packet(out: IO[bytes], packet: pb.TracePacket) -> None:
    out.write(field(_PACKET, packet.SerializeToString()))


@dataclass
class _Interned:
    """Interned ids of annotation names and string values, in order of first use (an event
    name's iid is its index in the layout's strings + 1), and each annotation serialized once."""

    names: dict[str, int]
    values: dict[str, int]
    annotations: dict[tuple[str, type, ArgValue], bytes]

    def annotation(self, key: str, value: ArgValue) -> bytes:
        """A debug annotation field; one `key: value` pair is serialized once."""
        known = self.annotations.get((key, type(value), value))
        if known is None:
            known = self.annotations[key, type(value), value] = self._serialize(key, value)
        return known

    def _serialize(self, key: str, value: ArgValue) -> bytes:
        a = pb.DebugAnnotation(name_iid=self.names.setdefault(key, len(self.names) + 1))
        if isinstance(value, bool):
            a.bool_value = value
        elif isinstance(value, int):
            a.int_value = value
        elif isinstance(value, float):
            a.double_value = value
        else:
            a.string_value_iid = self.values.setdefault(value, len(self.values) + 1)
        return field(_ANNOTATION, a.SerializeToString())

    def fill(self, data: pb.InternedData, strings: list[str]) -> None:
        for i, s in enumerate(strings, start=1):
            data.event_names.add(iid=i, name=s)
        for key, iid in self.names.items():
            data.debug_annotation_names.add(iid=iid, name=key)
        for value, iid in self.values.items():
            data.debug_annotation_string_values.add(iid=iid, str=value.encode())


@dataclass
class Written:
    """What a trace written in parts (`write_perfetto` called per chunk of a run) already holds:
    the tracks it described and the packet sequences it used."""

    described: set[int] = dataclasses.field(default_factory=set)
    next_sequence: int = GLOBAL_SEQUENCE
    sched_sequence: int = 0
    """The sequence of the scheduling data (0: none written yet)."""


class _Sequences:
    """Which sequence each track's events go to, and each sequence's default tracks: the
    non-thread tracks' sequence is `first`, the threads' follow."""

    def __init__(self, layout: Layout, first: int) -> None:
        n = len(layout.tracks)
        self.of_track = np.full(n, first, np.int64)
        self.default_track: dict[int, int] = {first: -1}
        self.counter_tracks: dict[int, list[int]] = {first: []}
        threads = [i for i, t in enumerate(layout.tracks) if t.kind == TrackKind.THREAD]
        for seq, track in enumerate(threads, start=first + 1):
            self.of_track[track] = seq
            self.default_track[seq] = track
            tid = layout.tracks[track].tid
            self.counter_tracks[seq] = [i for i, t in enumerate(layout.tracks)
                                        if t.kind == TrackKind.COUNTER and t.tid == tid]


def write_perfetto(layout: Layout, out: IO[bytes], written: Written | None = None) -> int:
    """Write the trace of a layout; returns the number of packets (compressed ones counted
    each). With `written`, the layout continues a trace written before (a chunk of a streamed
    run): tracks described before are not described again, and its events go on sequences of
    their own."""
    written = written or Written()
    interned = _Interned({}, {}, {})
    arg_blobs = [b"".join(interned.annotation(k, v) for k, v in args) for args in layout.arg_sets]
    counter_iids = [interned.names.setdefault(counter_arg(c), len(interned.names) + 1)
                    for c in layout.counter_names]
    sequences = _Sequences(layout, written.next_sequence)
    written.next_sequence = max(sequences.default_track) + 1
    t0 = int(layout.ts[0]) if len(layout) else 0

    new = [t for t in layout.tracks if t.uuid not in written.described]
    for described in new:
        packet = pb.TracePacket(trusted_packet_sequence_id=DESCRIPTOR_SEQUENCE,
                                track_descriptor=_descriptor(layout, described))
        if not written.described:
            packet.first_packet_on_sequence = True
            packet.previous_packet_dropped = 1
            packet.sequence_flags = _CLEARED
        written.described.add(described.uuid)
        _packet(out, packet)
    uuids = np.array([t.uuid for t in layout.tracks], np.int64)
    for seq, track in sequences.default_track.items():
        first = pb.TracePacket(
            trusted_packet_sequence_id=seq, first_packet_on_sequence=True,
            previous_packet_dropped=1, sequence_flags=_CLEARED | _NEEDS,
            timestamp=t0, timestamp_clock_id=_BOOTTIME)
        first.clock_snapshot.clocks.add(clock_id=_BOOTTIME, timestamp=t0)
        first.clock_snapshot.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=t0,
                                        is_incremental=True)
        defaults = first.trace_packet_defaults
        defaults.timestamp_clock_id = INCREMENTAL_CLOCK
        if track >= 0:
            defaults.track_event_defaults.track_uuid = int(uuids[track])
            defaults.track_event_defaults.extra_counter_track_uuids.extend(
                int(uuids[c]) for c in sequences.counter_tracks[seq])
        interned.fill(first.interned_data, layout.strings)
        _packet(out, first)
    heads = len(new) + len(sequences.default_track)

    events = _Events(layout, sequences, uuids, arg_blobs, counter_iids, t0)
    if len(layout) <= CHUNK_ROWS:  # one packet (a streamed chunk, mostly): no pool to start
        if len(layout):
            data = zlib.compress(events.render(0, len(layout)), COMPRESSION_LEVEL)
            out.write(field(_PACKET, field(_COMPRESSED, data)))
    else:
        _compressed_in_turn(events, len(layout), out)
    count = heads + len(layout)
    if layout.sched is not None:
        opening = not written.sched_sequence
        if opening:
            written.sched_sequence = written.next_sequence
            written.next_sequence += 1
        for packet in sched_packets(layout.sched, layout.pid, t0, written.sched_sequence,
                                    opening):
            _packet(out, packet)
            count += 1
    return count


class _Events:
    """The event packets of a layout, rendered a range of rows at a time."""

    def __init__(self, layout: Layout, sequences: _Sequences, uuids: np.ndarray,
                 arg_blobs: list[bytes], counter_iids: list[int], t0: int) -> None:
        self.layout = layout
        self.seq = sequences.of_track[layout.track]
        default = np.full(max(sequences.default_track) + 1, -1, np.int64)
        default[list(sequences.default_track)] = list(sequences.default_track.values())
        self.own_track = layout.track != default[self.seq]
        self.uuid_of = uuids
        self.uuid = uuids[layout.track]
        # Each event's timestamp as the delta from the previous one on its sequence.
        order = np.argsort(self.seq, kind="stable")
        ts = layout.ts[order]
        previous = np.concatenate([[t0], ts[:-1]])
        previous[np.flatnonzero(np.diff(self.seq[order], prepend=-1))] = t0
        self.delta = np.empty_like(ts)
        self.delta[order] = ts - previous
        self.arg_source = np.frombuffer(b"".join(arg_blobs), np.uint8)
        self.arg_size = np.array([len(b) for b in arg_blobs], np.int64)
        self.arg_start = np.cumsum(self.arg_size) - self.arg_size
        self.counter_prefix = [_ANNOTATION_NAME + varint(iid) + _INT_VALUE for iid in counter_iids]
        self.flows = [_flow_table(layout.flows_out, _FLOW_ID, len(layout)),
                      _flow_table(layout.flows_in, _TERMINATING_FLOW_ID, len(layout))]

    def render(self, a: int, b: int) -> bytes:
        lay = self.layout
        n = b - a
        p = Pieces(n)
        typ = lay.type[a:b]
        p.varint(_TYPE, typ)
        p.varint(_TRACK_UUID, self.uuid[a:b], self.own_track[a:b])
        name = lay.name[a:b]
        p.varint(_NAME_IID, name + 1, name >= 0)
        args = lay.args[a:b]
        has_args = args >= 0
        if len(self.arg_source):
            p.add(self.arg_source, np.where(has_args, self.arg_start[args], 0),
                  np.where(has_args, self.arg_size[args], 0))
        for c, prefix in enumerate(self.counter_prefix):
            delta = lay.counter_delta[a:b, c]
            on = has_args & (delta >= 0)
            p.constant(_ANNOTATION, on)
            p.varint(b"", len(prefix) + varint_sizes(np.maximum(delta, 0)), on)
            p.constant(prefix, on)
            p.varint(b"", np.maximum(delta, 0), on)
        p.fixed64(_DOUBLE_COUNTER, lay.value[a:b], typ == EventType.COUNTER)
        for source, row_start, row_size in self.flows:
            if len(source):
                p.add(source, row_start[a:b], row_size[a:b])
        # trace_processor reads an event's extra counter values up to the first 0: an event
        # with a 0 names the tracks of its other values, and a 0 is not written.
        track = lay.counter_track[a:b]
        value = lay.counter_value[a:b]
        written = (track >= 0) & (value != 0)
        named = ((track >= 0) & (value == 0)).any(1)
        for c in range(track.shape[1]):
            p.varint(_EXTRA_TRACK, self.uuid_of[track[:, c]], named & written[:, c])
        for c in range(track.shape[1]):
            p.varint(_EXTRA_VALUE, value[:, c], written[:, c])
        event_size = p.sizes()
        # The packet around the event, each piece put in front of the last: it reads Trace.packet
        # tag, packet size, timestamp, sequence id, flags, TrackEvent tag and size, the event.
        p.varint(_TRACK_EVENT, event_size, front=True)
        p.constant(_FLAGS, front=True)
        p.varint(_SEQUENCE_ID, self.seq[a:b], front=True)
        p.varint(_TIMESTAMP, self.delta[a:b], front=True)
        p.varint(b"", p.sizes(), front=True)
        p.constant(_PACKET, front=True)
        data, _ = p.render()
        return data.tobytes()


def _compressed_in_turn(events: _Events, rows: int, out: IO[bytes]) -> None:
    """The event packets in compressed chunks, zlib working without the GIL beside the
    rendering of the next chunk."""
    pending: deque[Future[bytes]] = deque()
    with ThreadPoolExecutor(2) as pool:
        for start in range(0, rows, CHUNK_ROWS):
            chunk = events.render(start, min(start + CHUNK_ROWS, rows))
            pending.append(pool.submit(zlib.compress, chunk, COMPRESSION_LEVEL))
            while pending and (len(pending) > 2 or start + CHUNK_ROWS >= rows):
                out.write(field(_PACKET, field(_COMPRESSED, pending.popleft().result())))


def _flow_table(flows: dict[int, list[int]], flow_tag: bytes,
                rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flow id fields of every row, back to back in row order; each row's start and size."""
    ids = np.array([f for r in sorted(flows) for f in flows[r]], np.uint64)
    entry = len(flow_tag) + 8
    size = np.zeros(rows, np.int64)
    size[list(flows)] = [len(f) * entry for f in flows.values()]
    head = np.broadcast_to(np.frombuffer(flow_tag, np.uint8), (len(ids), len(flow_tag)))
    source = np.hstack([head, ids.astype("<u8").view(np.uint8).reshape(-1, 8)]).ravel()
    return source, np.cumsum(size) - size, size


_PACKET = tag(pb.Trace, "packet")
_COMPRESSED = tag(pb.TracePacket, "compressed_packets")
_TIMESTAMP = tag(pb.TracePacket, "timestamp")
_SEQUENCE_ID = tag(pb.TracePacket, "trusted_packet_sequence_id")
_FLAGS = tag(pb.TracePacket, "sequence_flags") + varint(_NEEDS)
_TRACK_EVENT = tag(pb.TracePacket, "track_event")
_TYPE = tag(pb.TrackEvent, "type")
_TRACK_UUID = tag(pb.TrackEvent, "track_uuid")
_NAME_IID = tag(pb.TrackEvent, "name_iid")
_ANNOTATION = tag(pb.TrackEvent, "debug_annotations")
_ANNOTATION_NAME = tag(pb.DebugAnnotation, "name_iid")
_INT_VALUE = tag(pb.DebugAnnotation, "int_value")
_DOUBLE_COUNTER = tag(pb.TrackEvent, "double_counter_value")
_FLOW_ID = tag(pb.TrackEvent, "flow_ids")
_TERMINATING_FLOW_ID = tag(pb.TrackEvent, "terminating_flow_ids")
_EXTRA_TRACK = tag(pb.TrackEvent, "extra_counter_track_uuids")
_EXTRA_VALUE = tag(pb.TrackEvent, "extra_counter_values")
