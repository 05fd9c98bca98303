"""The built-in engine's import: a TrackEvent trace into SQLite tables shaped like
trace_processor's.

Only what trace_processor exposes for the TrackEvent data we write is built, with its table
and column names: `process`, `thread`, `track`, `thread_track`, `counter_track`, `slice`,
`counter`, `flow`, `args`. Slices get depth and parent from the nesting on their track, as
trace_processor does; debug annotations become `args` rows keyed `debug.<name>`, one arg set
per distinct set of annotations.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError

SCHEMA = """
CREATE TABLE process (upid INTEGER PRIMARY KEY, pid INTEGER, name TEXT, cmdline TEXT);
CREATE TABLE thread (utid INTEGER PRIMARY KEY, tid INTEGER, name TEXT, upid INTEGER);
CREATE TABLE track (id INTEGER PRIMARY KEY, name TEXT, type TEXT);
CREATE TABLE thread_track (id INTEGER PRIMARY KEY, name TEXT, utid INTEGER);
CREATE TABLE counter_track (id INTEGER PRIMARY KEY, name TEXT, unit TEXT);
CREATE TABLE slice (id INTEGER PRIMARY KEY, ts INTEGER, dur INTEGER, track_id INTEGER,
                    category TEXT, name TEXT, depth INTEGER, parent_id INTEGER,
                    arg_set_id INTEGER);
CREATE TABLE counter (id INTEGER PRIMARY KEY, ts INTEGER, track_id INTEGER, value REAL);
CREATE TABLE flow (id INTEGER PRIMARY KEY, slice_out INTEGER, slice_in INTEGER);
CREATE TABLE args (id INTEGER PRIMARY KEY, arg_set_id INTEGER, flat_key TEXT, key TEXT,
                   int_value INTEGER, string_value TEXT, real_value REAL, value_type TEXT,
                   display_value TEXT);
"""

_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_BOOTTIME = pb.ClockSnapshot.Clock.BOOTTIME


class _Sequence:
    """The incremental state of one trusted packet sequence: interned strings, packet
    defaults and sequence-scoped clocks."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.arg_names: dict[int, str] = {}
        self.arg_values: dict[int, str] = {}
        self.clock_id = _BOOTTIME
        self.track_uuid = 0
        self.counter_uuids: list[int] = []
        self.clocks: dict[int, list[int]] = {}
        """Incremental clock id -> [its last value, BOOTTIME minus its value]."""

    def defaults(self, d: Any) -> None:
        self.clock_id = d.timestamp_clock_id or _BOOTTIME
        self.track_uuid = d.track_event_defaults.track_uuid
        self.counter_uuids = list(d.track_event_defaults.extra_counter_track_uuids)

    def snapshot(self, snapshot: Any) -> None:
        boot = next((c.timestamp for c in snapshot.clocks if c.clock_id == _BOOTTIME), None)
        for c in snapshot.clocks:
            if c.is_incremental and boot is not None:
                self.clocks[c.clock_id] = [c.timestamp, boot - c.timestamp]

    def time(self, packet: Any) -> int:
        """A packet's timestamp in BOOTTIME ns."""
        clock_id = packet.timestamp_clock_id or self.clock_id
        clock = self.clocks.get(clock_id)
        if clock is None:
            if clock_id != _BOOTTIME:
                raise ProfinferError(f"a packet uses clock {clock_id}, which the trace never "
                                     "relates to CLOCK_BOOTTIME")
            return int(packet.timestamp)
        clock[0] += packet.timestamp
        return clock[0] + clock[1]

    def intern(self, data: Any) -> None:
        self.names.update((n.iid, n.name) for n in data.event_names)
        self.arg_names.update((n.iid, n.name) for n in data.debug_annotation_names)
        self.arg_values.update(
            (n.iid, n.str.decode(errors="replace")) for n in data.debug_annotation_string_values
        )


class _Importer:
    def __init__(self) -> None:
        self.tracks: dict[int, int] = {}
        self.track_rows: list[tuple[int, str, str]] = []
        self.thread_tracks: list[tuple[int, str, int]] = []
        self.counter_tracks: list[tuple[int, str, str]] = []
        self.processes: dict[int, tuple[int, int, str, str]] = {}
        self.threads: dict[int, tuple[int, int, str, int]] = {}
        self.slices: list[list[Any]] = []
        self.counters: list[tuple[int, float, int]] = []
        self.flows: list[tuple[int, int]] = []
        self.flow_start: dict[int, int] = {}
        self.stacks: dict[int, list[int]] = {}
        self.arg_sets: dict[tuple[bytes, ...], int] = {}
        self.args: list[tuple[int, str, str, int | None, str | None, float | None, str, str]] = []

    def process(self, pid: int, name: str = "", cmdline: str = "") -> int:
        known = self.processes.get(pid)
        if known is None or (name and not known[2]):
            upid = known[0] if known else len(self.processes) + 1
            self.processes[pid] = (upid, pid, name, cmdline)
        return self.processes[pid][0]

    def descriptor(self, d: Any) -> None:
        track_id = len(self.track_rows)
        self.tracks[d.uuid] = track_id
        if d.HasField("thread"):
            upid = self.process(d.thread.pid)
            utid = len(self.threads) + 1
            self.threads[d.thread.tid] = (utid, d.thread.tid, d.thread.thread_name, upid)
            self.track_rows.append((track_id, d.thread.thread_name, "thread"))
            self.thread_tracks.append((track_id, d.thread.thread_name, utid))
        elif d.HasField("process"):
            self.process(d.process.pid, d.process.process_name, " ".join(d.process.cmdline))
            self.track_rows.append((track_id, d.process.process_name, "process"))
        elif d.HasField("counter"):
            self.track_rows.append((track_id, d.name, "counter"))
            self.counter_tracks.append((track_id, d.name, d.counter.unit_name))
        else:
            self.track_rows.append((track_id, d.name, "global"))

    def arg_set(self, annotations: Any, seq: _Sequence) -> int | None:
        if not annotations:
            return None
        key = tuple([a.SerializeToString() for a in annotations])
        found = self.arg_sets.get(key)
        if found is not None:
            return found
        arg_set_id = len(self.arg_sets) + 1
        self.arg_sets[key] = arg_set_id
        for a in annotations:
            k = "debug." + (seq.arg_names.get(a.name_iid, "") if a.name_iid else a.name)
            kind = a.WhichOneof("value")
            if kind in ("string_value_iid", "string_value"):
                text = seq.arg_values.get(a.string_value_iid, "") \
                    if kind == "string_value_iid" else a.string_value
                self.args.append((arg_set_id, k, k, None, text, None, "string", text))
            elif kind == "bool_value":
                self.args.append((arg_set_id, k, k, int(a.bool_value), None, None, "bool",
                                  "true" if a.bool_value else "false"))
            elif kind == "double_value":
                self.args.append((arg_set_id, k, k, None, None, a.double_value, "real",
                                  repr(a.double_value)))
            else:
                value = a.uint_value if kind == "uint_value" else a.int_value
                kind_name = "uint" if kind == "uint_value" else "int"
                self.args.append((arg_set_id, k, k, value, None, None, kind_name, str(value)))
        return arg_set_id

    def event(self, ts: int, e: Any, seq: _Sequence) -> None:
        track = self.tracks.get(e.track_uuid or seq.track_uuid)
        if track is None:
            return
        kind = e.type
        if kind == _END:
            open_slices = self.stacks.get(track)
            if open_slices:
                begun = self.slices[open_slices.pop()]
                begun[2] = ts - begun[1]
        elif kind in (_BEGIN, _INSTANT):
            stack = self.stacks.setdefault(track, [])
            slice_id = len(self.slices)
            name = seq.names.get(e.name_iid, "") if e.name_iid else e.name
            self.slices.append([slice_id, ts, 0 if kind == _INSTANT else -1, track, None, name,
                                len(stack), stack[-1] if stack else None,
                                self.arg_set(e.debug_annotations, seq)])
            if e.flow_ids:
                for flow in e.flow_ids:
                    self.flow_start[flow] = slice_id
            if e.terminating_flow_ids:
                for flow in e.terminating_flow_ids:
                    start = self.flow_start.pop(flow, None)
                    if start is not None:
                        self.flows.append((start, slice_id))
            if kind == _BEGIN:
                stack.append(slice_id)
        elif kind == _COUNTER:
            value = e.double_counter_value if e.HasField("double_counter_value") else \
                e.counter_value
            self.counters.append((ts, value, track))
        if e.extra_counter_values:
            for uuid, value in zip(e.extra_counter_track_uuids or seq.counter_uuids,
                                   e.extra_counter_values, strict=False):
                counter_track = self.tracks.get(uuid)
                if counter_track is not None:
                    self.counters.append((ts, float(value), counter_track))

    def store(self, db: sqlite3.Connection) -> None:
        db.executescript(SCHEMA)
        db.executemany("INSERT INTO process VALUES (?, ?, ?, ?)", self.processes.values())
        db.executemany("INSERT INTO thread VALUES (?, ?, ?, ?)", self.threads.values())
        db.executemany("INSERT INTO track VALUES (?, ?, ?)", self.track_rows)
        db.executemany("INSERT INTO thread_track VALUES (?, ?, ?)", self.thread_tracks)
        db.executemany("INSERT INTO counter_track VALUES (?, ?, ?)", self.counter_tracks)
        db.executemany("INSERT INTO slice VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", self.slices)
        db.executemany("INSERT INTO counter (ts, value, track_id) VALUES (?, ?, ?)",
                       self.counters)
        db.executemany("INSERT INTO flow (slice_out, slice_in) VALUES (?, ?)", self.flows)
        db.executemany(
            "INSERT INTO args (arg_set_id, flat_key, key, int_value, string_value, real_value, "
            "value_type, display_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self.args)
        db.commit()


def _packets(data: bytes, path: Path) -> Iterator[Any]:
    """The packets of a serialized trace, compressed ones expanded in place."""
    trace = pb.Trace()
    try:
        trace.ParseFromString(data)
    except DecodeError:
        raise ProfinferError(f"{path} is not a Perfetto trace (it does not parse as one)") from None
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            try:
                inner = zlib.decompress(packet.compressed_packets)
            except zlib.error:
                raise ProfinferError(f"{path} is corrupt (a compressed chunk does not "
                                     "decompress)") from None
            yield from _packets(inner, path)
        else:
            yield packet


def load(path: Path) -> sqlite3.Connection:
    """Import a Perfetto TrackEvent trace into a new in-memory SQLite database."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProfinferError(f"cannot read {path}: {exc.strerror}") from None
    importer = _Importer()
    sequences: dict[int, _Sequence] = {}
    events = 0
    event = importer.event
    seq = _Sequence()
    seq_id = None
    for packet in _packets(data, path):
        if packet.trusted_packet_sequence_id != seq_id or packet.sequence_flags & _CLEARED:
            seq_id = packet.trusted_packet_sequence_id
            if packet.sequence_flags & _CLEARED or seq_id not in sequences:
                sequences[seq_id] = _Sequence()
            seq = sequences[seq_id]
        if packet.HasField("interned_data"):
            seq.intern(packet.interned_data)
        if packet.HasField("trace_packet_defaults"):
            seq.defaults(packet.trace_packet_defaults)
        if packet.HasField("track_event"):
            events += 1
            event(seq.time(packet), packet.track_event, seq)
        elif packet.HasField("track_descriptor"):
            importer.descriptor(packet.track_descriptor)
        elif packet.HasField("clock_snapshot"):
            seq.snapshot(packet.clock_snapshot)
    if not importer.track_rows and not events:
        raise ProfinferError(f"{path} holds no track events: is it a profinfer-perfetto trace?")
    db = sqlite3.connect(":memory:")
    importer.store(db)
    return db
