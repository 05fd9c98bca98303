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
TrackEvent defaults (the thread's track and its counter tracks). Events follow, rendered with
numpy and written in deflated chunks (`compressed_packets`, which trace_processor and
ui.perfetto.dev expand on load); within a chunk each sequence's packets come together, in time
order. A run written in parts (a streamed capture) goes on with the same sequences from part to
part: a part's first packet on a sequence carries only the names interned since, and its clock
counts on (new sequences when the layout's tables start over).

What keeps a trace small (about 9.5 B per recorded event on medium-llama, one per op and
thread): a node's description is written once per file and named by number after (DESC_ARG),
counter samples only where a value changes, DAG flow ids from a small cycle that starts over at
each graph (layout.flow_ids: an edge's id the same in every token step) written as varints (the
deprecated `flow_ids_old` fields, which trace_processor reads where an event has no fixed64
ones: 1 byte an id, not 8; 15.7 B per event before), the interned names deflated, each
sequence's packets side by side for deflate, and the fields that differ from event to event
after those that do not: an event packet's timestamp last, and an op's name after its args
(deflate then finds the fields a sequence's packets share in longer runs: on one medium-llama
recording 14.3 B per event with the timestamp first and the name before the args, 13.2 B with
the timestamp last, 12.7 B with both); deflate is libdeflate's (encode/deflate.py).

What keeps it fast (docs/benchmarks.md, "encoding"): no Python object per event, nor a Python
call per node description; where the install built render.c (encode/native.py), a chunk's
packets written by it in one pass over the rows from the layout's columns, and which counter
samples to write and each row's flow ids found by it in one pass each. Else numpy renders the
same bytes: an event's fields other than its counters and flows (type, track, name, args,
description) once per distinct set of them (`_bodies`: an op's on every token step), copied
from there, and a field that few rows have costs only on those rows (`Pieces`).
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import IO

import numpy as np

from profinfer_perfetto.encode import native
from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.encode.deflate import compress
from profinfer_perfetto.encode.sched import sched_packets
from profinfer_perfetto.encode.wire import Pieces, field, tag, varint, varint_sizes, varints
from profinfer_perfetto.model.layout import ArgValue, EventType, Layout, Track, TrackKind
from profinfer_perfetto.model.names import DESC_ARG, counter_arg
from profinfer_perfetto.model.records import dense_unique, first_rows

DESCRIPTOR_SEQUENCE = 1
GLOBAL_SEQUENCE = 2
INCREMENTAL_CLOCK = 64
"""The first sequence-scoped clock id."""
CHUNK_ROWS = 32768
"""Events per compressed packet at most (about 0.5 to 1 MiB before compression)."""

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


class _Interned:
    """What the event sequences of a trace written in parts intern: the layout's strings (event
    name iid = index + 1) and, in order of first use, annotation names and string values, so the
    entries a sequence has not seen yet are a tail of each; and each arg set serialized once."""

    def __init__(self, generation: int = 0) -> None:
        self.generation = generation
        """Of the layout tables the iids are for."""
        self.event_names: list[str] = []
        self.names: dict[str, int] = {}
        self.values: dict[str, int] = {}
        self.value_list: list[str] = []
        """`values` in iid order (a sequence's unseen ones are a slice of it)."""
        self.annotations: dict[tuple[str, type, ArgValue], bytes] = {}
        self.table: _Bytes = _table([])
        """Each arg set of the layout tables, serialized, back to back."""
        self._filled = ((0, 0, 0), (0, 0, 0)), pb.InternedData()
        """The entries added after a sequence saw some (`fill`), by the counts seen then and
        now: one message for the sequences of a chunk that saw the same."""

    def name(self, key: str) -> int:
        return self.names.setdefault(key, len(self.names) + 1)

    def add(self, layout: Layout) -> None:
        """What the layout adds to its tables."""
        self.event_names = layout.strings
        known = self.annotations
        blobs = [b"".join([known.get((k, type(v), v)) or self.annotation(k, v) for k, v in args])
                 for args in layout.arg_sets[len(self.table[1]):]]  # a loop per arg, kept lean
        self.table = _appended(self.table, _table(blobs))

    def annotation(self, key: str, value: ArgValue) -> bytes:
        """A debug annotation field; one `key: value` pair is serialized once."""
        known = self.annotations.get((key, type(value), value))
        if known is None:
            known = self.annotations[key, type(value), value] = self._serialize(key, value)
        return known

    def _serialize(self, key: str, value: ArgValue) -> bytes:
        if isinstance(value, bool):
            body = _BOOL_VALUE + varint(value)
        elif isinstance(value, int):
            body = _INT_VALUE + varint(value)
        elif isinstance(value, float):
            body = _DOUBLE_VALUE + struct.pack("<d", value)
        else:
            iid = self.values.get(value)
            if iid is None:
                iid = self.values[value] = len(self.value_list) + 1
                self.value_list.append(value)
            body = _STRING_VALUE_IID + varint(iid)
        return field(_ANNOTATION, _ANNOTATION_NAME + varint(self.name(key)) + body)

    def seen(self) -> tuple[int, int, int]:
        return len(self.event_names), len(self.names), len(self.values)

    def fill(self, data: pb.InternedData, since: tuple[int, int, int]) -> None:
        """The entries added after a sequence saw `since` (counts of each kind)."""
        key = since, self.seen()
        if self._filled[0] != key:
            self._filled = key, self._since(since)
        if since != key[1]:
            data.CopyFrom(self._filled[1])

    def _since(self, since: tuple[int, int, int]) -> pb.InternedData:
        data = pb.InternedData()
        for iid, name in enumerate(self.event_names[since[0]:], start=since[0] + 1):
            data.event_names.add(iid=iid, name=name)
        for key, iid in self.names.items():
            if iid > since[1]:
                data.debug_annotation_names.add(iid=iid, name=key)
        for iid, value in enumerate(self.value_list[since[2]:], start=since[2] + 1):
            data.debug_annotation_string_values.add(iid=iid, str=value.encode())
        return data


@dataclass
class _Sequence:
    """A packet sequence of a trace written in parts: the tracks its events default to, the
    interned entries it has seen and its incremental clock's last value."""

    id: int
    defaults: tuple[int, ...]
    """The uuid of its events' track (0: none), then its counter tracks' uuids."""
    seen: tuple[int, int, int] = (0, 0, 0)
    last_ts: int = 0
    fresh: bool = True
    """Nothing is written on it yet."""


@dataclass
class Written:
    """What a trace written in parts (`write_perfetto` called per chunk of a run) already holds:
    the tracks it described, its packet sequences and what they interned, so that a chunk writes
    only what is new: each event sequence (the non-thread tracks', each thread's) goes on from
    chunk to chunk, its clock counting on and its interned entries growing."""

    described: set[int] = dataclasses.field(default_factory=set)
    next_sequence: int = GLOBAL_SEQUENCE
    sched_sequence: int = 0
    """The sequence of the scheduling data (0: none written yet)."""
    interned: _Interned = dataclasses.field(default_factory=_Interned)
    sequences: dict[int, _Sequence] = dataclasses.field(default_factory=dict)
    """By the uuid of the track the sequence is for (0: the non-thread tracks)."""
    descs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    """The number (DESC_ARG) of each node description written, by its arg set (of the
    tables' current generation; 0: none yet): 1, 2, ... in the order the file first has
    them."""
    numbered: int = 0
    """Descriptions numbered in the file (of every generation)."""

    def sequence(self, track_uuid: int, defaults: tuple[int, ...]) -> _Sequence:
        """The sequence of a track's events; a new one where its defaults changed."""
        seq = self.sequences.get(track_uuid)
        if seq is None or seq.defaults != defaults:
            seq = self.sequences[track_uuid] = _Sequence(self.next_sequence, defaults)
            self.next_sequence += 1
        return seq

    def start_over(self, generation: int) -> None:
        """Forget what was interned: events go on new sequences (trace_processor v58.2 counts
        a second snapshot of a sequence's clock as an invalid clock snapshot, even where the
        sequence cleared its state before it), and which descriptions were numbered (their
        numbers are not used again)."""
        self.interned = _Interned(generation)
        self.sequences.clear()
        self.descs = np.zeros(0, np.int64)


class _Sequences:
    """Which sequence each track's events go to, and each sequence's default tracks: the
    non-thread tracks' sequence, then one per thread."""

    def __init__(self, layout: Layout, written: Written) -> None:
        uuids = [t.uuid for t in layout.tracks]
        n = len(layout.tracks)
        shared = written.sequence(0, (0,))
        self.of_track = np.full(n, shared.id, np.int64)
        self.used: list[tuple[_Sequence, int]] = [(shared, -1)]
        """Each sequence with its default track's index (-1: none)."""
        for track, t in enumerate(layout.tracks):
            if t.kind != TrackKind.THREAD:
                continue
            counters = [uuids[i] for i, c in enumerate(layout.tracks)
                        if c.kind == TrackKind.COUNTER and c.tid == t.tid]
            seq = written.sequence(t.uuid, (t.uuid, *counters))
            self.of_track[track] = seq.id
            self.used.append((seq, track))


def _head(seq: _Sequence, interned: _Interned, t0: int) -> pb.TracePacket | None:
    """A chunk's first packet on a sequence: on a new sequence, one that clears its state and
    sets what its events leave out (the incremental clock, from t0; the default tracks; every
    interned entry); else the entries interned since it last had some, if any."""
    seen = interned.seen()
    if not seq.fresh and seen == seq.seen:
        return None
    packet = pb.TracePacket(trusted_packet_sequence_id=seq.id, timestamp=t0,
                            timestamp_clock_id=_BOOTTIME, sequence_flags=_NEEDS)
    if seq.fresh:
        packet.first_packet_on_sequence = True
        packet.previous_packet_dropped = 1
        packet.sequence_flags = _CLEARED | _NEEDS
        packet.clock_snapshot.clocks.add(clock_id=_BOOTTIME, timestamp=t0)
        packet.clock_snapshot.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=t0,
                                         is_incremental=True)
        defaults = packet.trace_packet_defaults
        defaults.timestamp_clock_id = INCREMENTAL_CLOCK
        if seq.defaults[0]:
            defaults.track_event_defaults.track_uuid = seq.defaults[0]
            defaults.track_event_defaults.extra_counter_track_uuids.extend(seq.defaults[1:])
        seq.fresh, seq.last_ts = False, t0
    interned.fill(packet.interned_data, seq.seen)
    seq.seen = seen
    return packet


def write_perfetto(layout: Layout, out: IO[bytes], written: Written | None = None) -> int:
    """Write the trace of a layout; returns the number of packets (compressed ones counted
    each). With `written`, the layout continues a trace written before (a chunk of a streamed
    run): tracks described before are not described again, and its events go on the sequences
    of the chunks before, with only what they have not interned yet."""
    written = written or Written()
    if written.interned.generation != layout.generation:  # the layout's tables started over
        written.start_over(layout.generation)
    interned = written.interned
    interned.add(layout)
    counter_iids = [interned.name(counter_arg(c)) for c in layout.counter_names]
    descs = _row_annotations(layout, written)
    sequences = _Sequences(layout, written)
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
    heads = [head for seq, _ in sequences.used if (head := _head(seq, interned, t0)) is not None]
    if heads:  # each sequence's interned names, much alike: deflated together
        data = b"".join(field(_PACKET, head.SerializeToString()) for head in heads)
        out.write(field(_PACKET, field(_COMPRESSED, compress(data))))

    uuids = np.array([t.uuid for t in layout.tracks], np.int64)
    events = _Events(layout, sequences, uuids, interned.table, counter_iids, descs)
    for start in range(0, len(layout), CHUNK_ROWS):
        rendered = events.rendered(start, min(start + CHUNK_ROWS, len(layout)))
        out.write(field(_PACKET, field(_COMPRESSED, compress(rendered))))
    events.done()
    count = len(new) + len(heads) + len(layout)
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


_Bytes = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Byte strings in one source buffer: each one's (by row, or by key) start in it and its size
(0: none)."""


def _table(blobs: list[bytes]) -> _Bytes:
    """Byte strings back to back: the source, each one's start in it and its size."""
    size = np.array([len(b) for b in blobs], np.int64)
    return np.frombuffer(b"".join(blobs), np.uint8), np.cumsum(size) - size, size


def _appended(table: _Bytes, more: _Bytes) -> _Bytes:
    """`more` after `table`'s strings (each chunk's new arg sets after the ones before)."""
    source, start, size = table
    return (np.concatenate([source, more[0]]), np.concatenate([start, more[1] + len(source)]),
            np.concatenate([size, more[2]]))


def _descriptions(layout: Layout, written: Written) -> _Bytes:
    """The rows' node description references: DESC_ARG with the description's number, and the
    description's args with it on the first row of the file that refers to it."""
    rows = np.flatnonzero(layout.desc >= 0)
    start, length = np.zeros(len(layout), np.int64), np.zeros(len(layout), np.int64)
    if not len(rows):
        return np.zeros(0, np.uint8), start, length
    used, which = dense_unique(layout.desc[rows], len(layout.arg_sets))
    first = first_rows(which, len(used))
    number = written.descs = np.append(
        written.descs, np.zeros(len(layout.arg_sets) - len(written.descs), np.int64))
    is_new = number[used] == 0
    new = used[is_new]
    number[new] = written.numbered + 1 + np.arange(len(new))
    written.numbered += len(new)
    # Each used description's reference, then each new one's with its args.
    numbers = number[np.concatenate([used, new])]
    p = Pieces(len(numbers))
    _int_annotation(p, _int_prefix(written.interned.name(DESC_ARG)), numbers)
    full = len(used) + np.arange(len(new))
    source, blob_start, blob_size = written.interned.table
    p.add(source, blob_start[new], blob_size[new], full)
    data, end = p.render()
    size = np.diff(end, prepend=0)
    start[rows], length[rows] = (end - size)[which], size[which]
    full_rows = rows[first[is_new]]
    start[full_rows], length[full_rows] = (end - size)[full], size[full]
    return data, start, length


def _row_annotations(layout: Layout, written: Written) -> _Bytes:
    """By row, the debug annotations it carries beside its arg set: its node description's
    (_descriptions), then its row args' (Layout.row_args), in their order. The row args are
    rendered one entry each, a row's together, so a row's bytes are a run of entries."""
    data, start, length = _descriptions(layout, written)
    args = layout.row_args
    count = [len(a.rows) for a in args]
    if not sum(count):
        return data, start, length
    row = np.concatenate([a.rows for a in args])
    order = np.argsort(row, kind="stable")
    row = row[order]
    iid = np.repeat([written.interned.name(a.key) for a in args], count)[order]
    values = np.concatenate([a.values for a in args])[order]
    heads = np.flatnonzero(np.diff(row, prepend=-1))
    p = Pieces(len(row))
    p.add(data, start[row[heads]], length[row[heads]], heads)
    p.varint(_ANNOTATION, len(_ANNOTATION_NAME) + varint_sizes(iid) + len(_INT_VALUE)
             + varint_sizes(values))
    p.varint(_ANNOTATION_NAME, iid)
    p.constant(_INT_VALUE)
    p.varint(b"", values)
    more, end = p.render()
    first = np.append(0, end[:-1])[heads]
    start[row[heads]] = len(data) + first
    length[row[heads]] = np.append(first[1:], end[-1]) - first
    return np.concatenate([data, more]), start, length


def _int_prefix(name_iid: int) -> bytes:
    """An int debug annotation's bytes before its value: its interned name, the value's tag."""
    return _ANNOTATION_NAME + varint(name_iid) + _INT_VALUE


def _int_annotation(p: Pieces, prefix: bytes, values: np.ndarray,
                    at: np.ndarray | None = None) -> None:
    """An int debug annotation on each row (or on the rows `at`), one value each."""
    p.varint(_ANNOTATION, len(prefix) + varint_sizes(values), at)
    p.constant(prefix, at)
    p.varint(b"", values, at)


class _Events:
    """The event packets of a layout, rendered a range of rows at a time: by render.c where this
    install built it (encode/native.py), else by numpy (`_Numpy`: the same bytes)."""

    def __init__(self, layout: Layout, sequences: _Sequences, uuids: np.ndarray, args: _Bytes,
                 counter_iids: list[int], descs: _Bytes) -> None:
        self.layout = layout
        self.used = sequences.used
        # The sequences used, in the order of their ids (a slot each): sequence ids may be
        # far apart (encode/units.py gives each unit a range of its own).
        self.ids = np.unique([seq.id for seq, _ in sequences.used])
        self.slot_of_track = np.searchsorted(self.ids, sequences.of_track)
        self.seq = self.slot_of_track[layout.track]
        """By row: its sequence's slot."""
        default = np.full(len(self.ids), -1, np.int64)
        self.last = np.zeros(len(self.ids), np.int64)
        """Each sequence's last packet time (as the packets rendered so far leave it)."""
        for seq, track in sequences.used:
            slot = self._slot(seq)
            default[slot], self.last[slot] = track, seq.last_ts
        self.uuid_of = uuids
        self.own = np.arange(len(uuids)) != default[self.slot_of_track]
        """By track: not its sequence's default track (its events name it)."""
        # What a packet on a sequence starts with: the sequence id, flags.
        self.seq_head = _table([_SEQUENCE_ID + varint(i) + _FLAGS for i in self.ids.tolist()])
        self.counter_prefix = [_int_prefix(iid) for iid in counter_iids]
        renderer = native.RENDERER
        self.sampled = (_changes(layout.counter_track, layout.counter_value) if renderer is None
                        else renderer.changes(layout.counter_track, layout.counter_value,
                                              len(uuids)))
        self.args, self.descs = args, descs
        """The serialized arg sets, by arg set; the node description references, by row."""
        self._render = (_Numpy(self).render if renderer is None
                        else self._compiled(renderer).render)

    def _compiled(self, renderer: native.Renderer) -> native.Events:
        lay = self.layout
        compiled = renderer.events(native.Tables(
            _TAGS, self.counter_prefix, EventType.COUNTER, lay.ts, lay.track, lay.name, lay.args,
            lay.type, lay.value, self.descs, lay.flows,
            np.where(lay.counter_delta >= 0, lay.counter_delta, -1), lay.counter_track,
            lay.counter_value, self.sampled, self.slot_of_track, self.uuid_of, self.own,
            self.seq_head, self.last, self.args))
        self.last = compiled.last
        return compiled

    def rendered(self, a: int, b: int) -> bytes:
        """The packets of rows a to b, in writing order: each sequence's packets together, in
        time order (as Perfetto's tracing service writes a sequence's packets in chunks): a
        sequence's packets are much alike, so deflate finds more in a row of them than among
        the threads' packets in time order."""
        return self._render(a + _stable_order(self.seq[a:b]))

    def done(self) -> None:
        """Each sequence's last packet time, for the packets of a next part."""
        for seq, _ in self.used:
            seq.last_ts = int(self.last[self._slot(seq)])

    def _slot(self, seq: _Sequence) -> int:
        return int(np.searchsorted(self.ids, seq.id))


class _Numpy:
    """The event packets of a layout rendered with numpy."""

    def __init__(self, events: _Events) -> None:
        self.events = e = events
        layout = e.layout
        # Each event's timestamp as the delta from the previous one on its sequence (from the
        # sequence's last one for the first).
        order = _stable_order(e.seq)
        ts = layout.ts[order].astype(np.int64)
        seq = e.seq[order]
        first = np.flatnonzero(np.diff(seq, prepend=-1))
        previous = np.concatenate([[0], ts[:-1]])
        previous[first] = e.last[seq[first]]
        self.delta = np.empty_like(ts)
        self.delta[order] = ts - previous
        ends = np.append(first[1:], len(seq))[:len(first)] - 1  # each sequence's last
        e.last[seq[ends]] = ts[ends]
        self.flows = [_flow_table(layout.flows[:, 0], layout.flows[:, k], flow_tag, len(layout))
                      for k, flow_tag in ((1, _FLOW_ID), (2, _TERMINATING_FLOW_ID))]
        own_track = np.where(e.own[layout.track], layout.track, -1)
        self.body = _bodies(layout, own_track, e.uuid_of, e.args, e.descs)

    def render(self, rows: np.ndarray) -> bytes:
        """The packets of `rows`, in their order."""
        return self.pieces(rows).render()[0].tobytes()

    def fields(self, rows: np.ndarray) -> _Fields:
        """What the packets of `rows` hold beside the tables' bytes."""
        e = self.events
        lay = e.layout
        has_args = (lay.args[rows] >= 0)[:, None]
        delta = lay.counter_delta[rows]
        # trace_processor reads an event's extra counter values up to the first 0, so a 0 is
        # not written; nor is a value its track already holds. An event that leaves out one of
        # its default tracks' values names the tracks of the others.
        track = lay.counter_track[rows]
        sampled = e.sampled[rows]
        named = ((track >= 0) & ~sampled).any(1)[:, None] & sampled
        return _Fields(rows, np.where(has_args & (delta >= 0), delta, -1),
                       lay.type[rows] == EventType.COUNTER,
                       np.where(named, e.uuid_of[np.maximum(track, 0)], -1), sampled,
                       lay.counter_value[rows])

    def pieces(self, rows: np.ndarray) -> Pieces:
        """The packets of `rows`, in their order."""
        e = self.events
        f = self.fields(rows)
        p = Pieces(len(rows))
        _add(p, self.body, rows)
        for c, prefix in enumerate(e.counter_prefix):
            at = np.flatnonzero(f.count[:, c] >= 0)
            _int_annotation(p, prefix, f.count[at, c], at)
        at = np.flatnonzero(f.is_counter)
        p.fixed64(_DOUBLE_COUNTER, e.layout.value[rows[at]], at)
        for flows in self.flows:
            _add(p, flows, rows)
        for c in range(f.track.shape[1]):
            at = np.flatnonzero(f.track[:, c] >= 0)
            p.varint(_EXTRA_TRACK, f.track[at, c], at)
        for c in range(f.track.shape[1]):
            at = np.flatnonzero(f.sampled[:, c])
            p.varint(_EXTRA_VALUE, f.sample[at, c], at)
        # The packet around the event, each piece put in front of the last: it reads Trace.packet
        # tag and packet size, sequence id and flags, TrackEvent tag and size, the event, and
        # the timestamp after it (the module's docstring says why).
        p.varint(_TRACK_EVENT, p.sizes(), front=True)
        _add(p, e.seq_head, e.seq[rows], front=True)
        p.varint(_TIMESTAMP, self.delta[rows])
        p.varint(_PACKET, p.sizes(), front=True)
        return p


@dataclass
class _Fields:
    """What a range of rows' packets hold beside the tables' bytes, a row each."""

    rows: np.ndarray
    """The rows, in writing order."""
    count: np.ndarray
    """(rows, counters): each counter's count arg, -1 for none."""
    is_counter: np.ndarray
    """A counter event (with a double value)."""
    track: np.ndarray
    """(rows, counters): the uuid of each extra counter track named, -1 for none."""
    sampled: np.ndarray
    """(rows, counters): which extra counter values are written."""
    sample: np.ndarray
    """(rows, counters): the values."""


def _add(p: Pieces, table: _Bytes, keys: np.ndarray, front: bool = False) -> None:
    """Entry `keys[i]` of a table of byte strings (each entry's start in the source and size)
    on row i of the pieces, where it is not empty (a key of -1: none)."""
    source, start, size = table
    if not len(size):
        return
    at = np.flatnonzero((keys >= 0) & (size[keys] > 0))
    p.add(source, start[keys[at]], size[keys[at]], None if len(at) == len(keys) else at, front)


def _bodies(layout: Layout, own_track: np.ndarray, uuids: np.ndarray, args: _Bytes,
            descs: _Bytes) -> _Bytes:
    """Each row's event fields that are not counters or flows (type, the uuid of its track where
    not its sequence's default one (`own_track`, else -1), args, node description, name), by
    row: a trace has few distinct ones (an op's on every token step), each rendered once. The
    name after the args: the args' tags then follow the fields every event has, for deflate."""
    desc_source, desc_start, desc_size = descs
    code = _combined((np.where(desc_size > 0, desc_start, -1), layout.args, layout.name,
                      own_track, layout.type))
    order = _stable_order(code)
    code = code[order]
    new = np.ones(len(order), bool)
    new[1:] = code[1:] != code[:-1]
    first = order[new]
    which = np.empty(len(order), np.int64)
    which[order] = np.cumsum(new) - 1
    p = Pieces(len(first))
    p.varint(_TYPE, layout.type[first])
    at = np.flatnonzero(own_track[first] >= 0)
    p.varint(_TRACK_UUID, uuids[own_track[first[at]]], at)
    _add(p, args, layout.args[first])
    p.add(desc_source, desc_start[first], desc_size[first])
    at = np.flatnonzero(layout.name[first] >= 0)
    p.varint(_NAME_IID, layout.name[first[at]] + 1, at)
    data, end = p.render()
    size = np.diff(end, prepend=0)
    return data, (end - size)[which], size[which]


def _combined(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """One non-negative int64 per row, equal where the rows' keys (ints of -1 or more) are."""
    code = np.zeros(len(keys[0]), np.int64)
    for key in keys:
        span = int(key.max()) + 2 if len(key) else 1
        if len(code) and int(code.max()) >= (1 << 62) // span:  # would not fit: renumber
            code = np.unique(code, return_inverse=True)[1].reshape(-1)
        code = code * span + key + 1
    return code


def _stable_order(key: np.ndarray) -> np.ndarray:
    """Row numbers sorted by a non-negative int key, each key's rows in row order: numpy's
    radix sort where the keys fit in 16 bits (a sequence, a track), else one sort of key and
    row number packed into an int64 where they fit (a few times faster than a stable argsort
    of int64 keys)."""
    if len(key) and int(key.max()) < 1 << 16:
        order: np.ndarray = np.argsort(key.astype(np.uint16), kind="stable")
        return order
    bits = max(len(key) - 1, 1).bit_length()
    if len(key) and int(key.max()).bit_length() + bits > 62:
        return np.argsort(key, kind="stable")
    return np.sort((key.astype(np.int64) << bits) | np.arange(len(key))) & ((1 << bits) - 1)


def _changes(track: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Which counter samples to write: those that are not 0 and differ from the sample before
    on their track (a counter track holds its value until its next sample; each track's first
    sample in the layout is written)."""
    out = np.zeros(track.shape, bool)
    for c in range(track.shape[1]):
        order = _stable_order(track[:, c] + 1)
        t, v = track[order, c], value[order, c]
        differs = np.ones(len(order), bool)
        differs[1:] = (t[1:] != t[:-1]) | (v[1:] != v[:-1])
        out[order, c] = differs
    out &= (track >= 0) & (value != 0)
    return out


def _flow_table(flow_ids: np.ndarray, at: np.ndarray, flow_tag: bytes,
                rows: int) -> _Bytes:
    """The flow id fields of every row (each flow at row `at`), back to back in row order, by
    id within a row; each row's start and size."""
    order = np.lexsort((flow_ids, at))
    matrix, length = varints(flow_ids[order], flow_tag)
    size = np.bincount(at[order], weights=length, minlength=rows).astype(np.int64)
    source = matrix[np.arange(matrix.shape[1]) < length[:, None]]  # each id's bytes, in order
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
_BOOL_VALUE = tag(pb.DebugAnnotation, "bool_value")
_DOUBLE_VALUE = tag(pb.DebugAnnotation, "double_value")
_STRING_VALUE_IID = tag(pb.DebugAnnotation, "string_value_iid")
_DOUBLE_COUNTER = tag(pb.TrackEvent, "double_counter_value")
_FLOW_ID = tag(pb.TrackEvent, "flow_ids_old")
_TERMINATING_FLOW_ID = tag(pb.TrackEvent, "terminating_flow_ids_old")
_EXTRA_TRACK = tag(pb.TrackEvent, "extra_counter_track_uuids")
_EXTRA_VALUE = tag(pb.TrackEvent, "extra_counter_values")
_TAGS = [_PACKET, _TIMESTAMP, _TRACK_EVENT, _TYPE, _TRACK_UUID, _NAME_IID, _ANNOTATION,
         _DOUBLE_COUNTER, _FLOW_ID, _TERMINATING_FLOW_ID, _EXTRA_TRACK, _EXTRA_VALUE]
"""The tags the compiled renderer writes, in render.c's order."""
