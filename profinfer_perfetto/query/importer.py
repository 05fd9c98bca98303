"""The built-in engine's import: a TrackEvent trace into SQLite tables shaped like
trace_processor's, with trace_processor's rules.

Only what trace_processor exposes for the TrackEvent data we write is built, with its table and
column names (a subset of its columns, see SCHEMA): `process`, `thread`, `track`,
`thread_track`, `counter_track`, `slice`, `counter`, `flow`, `args`. The rules are
trace_processor's (v58), checked against it by tests/unit/test_engines_agree.py:
- events are taken in timestamp order, ties in file order (its sorter);
- a track exists once an event uses it (an event's extra counter tracks before its own), its
  parent tracks first, and ids count in that order (so a counter track that never gets a value
  is not there); a descriptor's process and thread exist from the descriptor on, a process
  with its main thread, after the swapper rows (upid 0, utid 0); no cmdline;
- track types and names: `thread_execution` and `process_track_event` tracks have no name,
  counters are `<scope>_counter_track_event`, other tracks `<scope>_merged_track_event`;
- a slice's depth and parent come from the nesting on its track; an end with no open slice
  is dropped, a slice never ended has dur -1, an instant 0; flow ids chain slices;
- a debug annotation NAME is the arg `debug.NAME` with `.`, `[` and `]` made `_`; equal sets of
  args are one arg set; a real's display_value is SQLite's text for it;
- an event's extra counter values count up to its first 0, the values after it read as 0
  (the sorter keeps only that many), and an event with more than 8 of them is dropped;
- on a sequence that described a thread (single-sequence traces), an event on a track that is
  not that of a thread gets the arg `legacy_event.passthrough_utid`.

The trace is read in bulk (query/wirescan.py): each `compressed_packets` chunk is expanded,
framed and its packets' fields scanned with numpy on a thread pool, and the track events we
write (timestamp, sequence, flags and one TrackEvent of known fields) are decoded column by
column with the interning, defaults and incremental clock of their sequence; a run of debug
annotations is looked up by its hash, parsed once per distinct run. Any other packet
(descriptors, interned data, clock snapshots, or an event with fields the bulk path does not
know) goes through protobuf one at a time, in order, so every valid trace imports. The tables
with a row per event are written as an SQLite database image (query/sqlite_image.py).

A hostile file is one sentence, not a traceback nor all the memory: the chunks of a trace
expand from one budget (4 GiB, at most 64 times the file: a decompression bomb ends there),
nest at most MAX_NESTING deep, and protobuf's strings that are not UTF-8 read with U+FFFD.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import IntEnum
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from google.protobuf.message import DecodeError

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.model.names import arg_key
from profinfer_perfetto.query import sched_import, sqlite_image, wirescan
from profinfer_perfetto.query.sched_import import SchedEvents
from profinfer_perfetto.query.sqlite_image import Column
from profinfer_perfetto.query.wirescan import WIRE_BYTES, WIRE_FIXED64, WIRE_VARINT, text

SCHEMA = {
    "process": ("upid INTEGER PRIMARY KEY", "pid INTEGER", "name TEXT", "cmdline TEXT"),
    "thread": ("utid INTEGER PRIMARY KEY", "tid INTEGER", "name TEXT", "upid INTEGER"),
    "track": ("id INTEGER PRIMARY KEY", "name TEXT", "type TEXT"),
    "thread_track": ("id INTEGER PRIMARY KEY", "name TEXT", "utid INTEGER"),
    "counter_track": ("id INTEGER PRIMARY KEY", "name TEXT", "unit TEXT"),
    "slice": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "track_id INTEGER",
              "category TEXT", "name TEXT", "depth INTEGER", "parent_id INTEGER",
              "arg_set_id INTEGER"),
    "counter": ("id INTEGER PRIMARY KEY", "ts INTEGER", "track_id INTEGER", "value REAL",
                "arg_set_id INTEGER"),
    "flow": ("id INTEGER PRIMARY KEY", "slice_out INTEGER", "slice_in INTEGER"),
    "sched": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "cpu INTEGER",
              "utid INTEGER", "end_state TEXT", "priority INTEGER"),
    "thread_state": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "cpu INTEGER",
                     "utid INTEGER", "state TEXT", "waker_utid INTEGER"),
    "args": ("id INTEGER PRIMARY KEY", "arg_set_id INTEGER", "flat_key TEXT", "key TEXT",
             "int_value INTEGER", "string_value TEXT", "real_value REAL", "value_type TEXT",
             "display_value TEXT"),
}
"""Each table's columns: trace_processor's names (a subset of its columns), the rowid first."""


def _create(table: str) -> str:
    return f"CREATE TABLE {table} ({', '.join(SCHEMA[table])})"



BEGIN, END, INSTANT, COUNTER = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                                pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER)
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BOOTTIME = pb.ClockSnapshot.Clock.BOOTTIME
MAX_EXTRA_COUNTERS = 8
"""trace_processor drops an event with more extra counter values than this."""
PASSTHROUGH_KEY = "legacy_event.passthrough_utid"
_UNITS = {pb.CounterDescriptor.UNIT_TIME_NS: "ns", pb.CounterDescriptor.UNIT_COUNT: "count",
          pb.CounterDescriptor.UNIT_SIZE_BYTES: "bytes"}
_PREFETCH = 4
"""Compressed chunks expanded ahead of the one being read (zlib runs without the GIL)."""


def _field(message: Any, name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)


_P_TIMESTAMP = _field(pb.TracePacket, "timestamp")
_P_SEQUENCE = _field(pb.TracePacket, "trusted_packet_sequence_id")
_P_FLAGS = _field(pb.TracePacket, "sequence_flags")
_P_EVENT = _field(pb.TracePacket, "track_event")
_P_COMPRESSED = _field(pb.TracePacket, "compressed_packets")
_E_TYPE = _field(pb.TrackEvent, "type")
_E_TRACK = _field(pb.TrackEvent, "track_uuid")
_E_NAME = _field(pb.TrackEvent, "name_iid")
_E_ANNOTATION = _field(pb.TrackEvent, "debug_annotations")
_E_FLOW = _field(pb.TrackEvent, "flow_ids")
_E_TERMINATING = _field(pb.TrackEvent, "terminating_flow_ids")
_E_COUNTER = _field(pb.TrackEvent, "counter_value")
_E_DOUBLE = _field(pb.TrackEvent, "double_counter_value")
_E_EXTRA_TRACK = _field(pb.TrackEvent, "extra_counter_track_uuids")
_E_EXTRA_VALUE = _field(pb.TrackEvent, "extra_counter_values")

_PACKET = wirescan.Schema({_P_TIMESTAMP: WIRE_VARINT, _P_SEQUENCE: WIRE_VARINT,
                           _P_FLAGS: WIRE_VARINT, _P_EVENT: WIRE_BYTES,
                           _P_COMPRESSED: WIRE_BYTES})
"""A packet of a timestamp, a sequence, flags and a TrackEvent only is an event for the bulk
path; compressed chunks are found by their field."""
_EVENT = wirescan.Schema(
    {_E_TYPE: WIRE_VARINT, _E_TRACK: WIRE_VARINT, _E_NAME: WIRE_VARINT,
     _E_ANNOTATION: WIRE_BYTES, _E_COUNTER: WIRE_VARINT, _E_DOUBLE: WIRE_FIXED64},
    {_E_FLOW: WIRE_FIXED64, _E_TERMINATING: WIRE_FIXED64, _E_EXTRA_TRACK: WIRE_VARINT,
     _E_EXTRA_VALUE: WIRE_VARINT}, run=_E_ANNOTATION)
"""The TrackEvent fields the bulk path reads (the annotations as one run of them)."""

ArgRow = tuple[str, int | None, str | None, float | None, str, str | None]
"""key, int_value, string_value, real_value, value_type, display_value."""


def _not_a_trace(path: Path) -> ProfinferError:
    return ProfinferError(f"{path} is not a Perfetto trace (it does not parse as one)")


def _corrupt(path: Path) -> ProfinferError:
    return ProfinferError(f"{path} is corrupt (a compressed chunk does not decompress)")


def _real_text(value: float) -> str | None:
    """A real's display_value: SQLite's text for it (printf "%!.15g"), as trace_processor
    shows it."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0.0"
    mantissa, e, exponent = f"{value:.15g}".partition("e")
    return (mantissa if "." in mantissa else mantissa + ".0") + e + exponent


def _arg_row(a: Any, names: dict[int, str], values: dict[int, str]) -> ArgRow | None:
    """One debug annotation as an args row; None for one without a value."""
    key = arg_key(names.get(a.name_iid, "") if a.HasField("name_iid") else text(a.name))
    kind = a.WhichOneof("value")
    if kind == "bool_value":
        return key, int(a.bool_value), None, None, "bool", "true" if a.bool_value else "false"
    if kind == "uint_value":
        value = a.uint_value
        return key, value - (1 << 64) if value >> 63 else value, None, None, "uint", str(value)
    if kind == "int_value":
        return key, a.int_value, None, None, "int", str(a.int_value)
    if kind == "double_value":
        real = a.double_value
        return key, None, None, None if math.isnan(real) else real, "real", _real_text(real)
    if kind in ("string_value", "string_value_iid"):
        value = (text(a.string_value) if kind == "string_value"
                 else values.get(a.string_value_iid, ""))
        return key, None, value, None, "string", value
    return None


class _Sequence:
    """The incremental state of one trusted packet sequence: interned strings, packet defaults
    and sequence-scoped clocks; `valid` once its state has been cleared (trace_processor skips
    the events that need it before)."""

    def __init__(self, strings: _Strings, thread: tuple[int, int] | None = None,
                 valid: bool = False) -> None:
        self.strings = strings
        self.valid = valid
        self.thread = thread
        """(pid, tid) of the thread a descriptor on this sequence described."""
        self.names: dict[int, int] = {}
        """Event name iid -> string id."""
        self.arg_names: dict[int, str] = {}
        self.arg_values: dict[int, str] = {}
        self.arg_sets: dict[bytes, int] = {}
        """A run of serialized annotations -> its arg set (they mean what this state says)."""
        self.hashed = _HashIndex()
        """The same, by the run's hashes."""
        self.clock_id = _BOOTTIME
        self.track_uuid = 0
        self.counter_uuids: list[int] = []
        self.clocks: dict[int, list[int]] = {}
        """Incremental clock id -> [its last value, BOOTTIME minus its value]."""
        self._name_table: _IidLookup | None = None

    def defaults(self, d: Any) -> None:
        self.clock_id = d.timestamp_clock_id or _BOOTTIME
        self.track_uuid = d.track_event_defaults.track_uuid
        self.counter_uuids = list(d.track_event_defaults.extra_counter_track_uuids)

    def snapshot(self, snapshot: Any) -> None:
        boot = next((c.timestamp for c in snapshot.clocks if c.clock_id == _BOOTTIME), None)
        for c in snapshot.clocks:
            if c.is_incremental and boot is not None:
                self.clocks[c.clock_id] = [_int64(c.timestamp), _int64(boot - c.timestamp)]

    def intern(self, data: Any) -> None:
        self.names.update((n.iid, self.strings.id(text(n.name))) for n in data.event_names)
        self.arg_names.update((n.iid, text(n.name)) for n in data.debug_annotation_names)
        self.arg_values.update(
            (n.iid, n.str.decode(errors="replace")) for n in data.debug_annotation_string_values
        )
        self._name_table = None

    def clock(self, clock_id: int) -> list[int] | None:
        """The incremental clock with that id; None for BOOTTIME (timestamps as they are)."""
        clock = self.clocks.get(clock_id)
        if clock is None and clock_id != _BOOTTIME:
            raise ProfinferError(f"a packet uses clock {clock_id}, which the trace never "
                                 "relates to CLOCK_BOOTTIME")
        return clock

    def time(self, packet: Any) -> int:
        """A packet's timestamp in BOOTTIME ns."""
        clock = self.clock(packet.timestamp_clock_id or self.clock_id)
        if clock is None:
            return _int64(packet.timestamp)
        clock[0] = _int64(clock[0] + packet.timestamp)
        return _int64(clock[0] + clock[1])

    def times(self, deltas: np.ndarray) -> np.ndarray:
        """The BOOTTIME ns of this sequence's next packets, with the default clock."""
        clock = self.clock(self.clock_id)
        if clock is None:
            return deltas.view(np.int64)
        values = clock[0] + np.cumsum(deltas.view(np.int64))
        clock[0] = int(values[-1])
        return values + clock[1]

    def name_ids(self, iids: np.ndarray) -> np.ndarray:
        """String ids of event name iids (-1 for none or unknown)."""
        if self._name_table is None:
            self._name_table = _IidLookup(self.names)
        return self._name_table.find(iids)


_DENSE_IIDS = 1 << 20
"""Interned iids below this are looked up in a table indexed by iid (ours count from 1); a
trace with a larger one (not ours) by binary search: no table as long as its largest iid."""


class _IidLookup:
    """Values by interned iid, for numpy lookups."""

    def __init__(self, values: dict[int, int]) -> None:
        self.iids = np.array(sorted(values), np.uint64)
        self.values = np.array([values[i] for i in self.iids.tolist()], np.int32)
        self.table: np.ndarray | None = None
        if not len(self.iids) or self.iids[-1] < _DENSE_IIDS:
            self.table = np.full(int(self.iids[-1]) + 1 if len(self.iids) else 1, -1, np.int32)
            self.table[self.iids.astype(np.int64)] = self.values

    def find(self, iids: np.ndarray) -> np.ndarray:
        """The value of each iid (int64, as the uint64 read), -1 for one not interned."""
        if self.table is not None:
            known = (iids >= 0) & (iids < len(self.table))
            return np.where(known, self.table[np.where(known, iids, 0)], -1)
        keys = iids.astype(np.uint64)
        at = np.minimum(np.searchsorted(self.iids, keys), len(self.iids) - 1)
        return np.where(self.iids[at] == keys, self.values[at], -1)


def _int64(value: int) -> int:
    """A time as int64: sums of uint64 times wrap, as the bulk path's numpy ones do."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


_UNKNOWN = -2


class _HashIndex:
    """Arg sets by the hashes of their runs of annotations: sorted, for numpy lookups."""

    def __init__(self) -> None:
        self.keys = np.empty((0, 2), np.uint64)
        self.arg_sets = np.empty(0, np.int32)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The arg set of each (hash, hash) key, _UNKNOWN for a new one."""
        at = np.minimum(np.searchsorted(self.keys[:, 0], keys[:, 0]), len(self.keys) - 1)
        if not len(self.keys):
            return np.full(len(keys), _UNKNOWN, np.int32)
        hit = (self.keys[at] == keys).all(1)
        return np.where(hit, self.arg_sets[at], _UNKNOWN).astype(np.int32)

    def add(self, keys: np.ndarray, arg_sets: np.ndarray) -> None:
        """Index new keys (those `find` does not know), kept sorted."""
        new = np.flatnonzero(self.find(keys) == _UNKNOWN)
        new = new[np.argsort(keys[new, 0], kind="stable")]
        at = np.searchsorted(self.keys[:, 0], keys[new, 0])
        self.keys = np.insert(self.keys, at, keys[new], axis=0)
        self.arg_sets = np.insert(self.arg_sets, at, arg_sets[new])


def _distinct(keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The distinct rows of (n, 2) hash keys (told apart by the first; None if two rows share
    it and not the second), where each is first, and each row's distinct one."""
    _, first, inverse = np.unique(keys[:, 0], return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if (keys[first][inverse] != keys).any():
        return None, first, inverse
    return keys[first], first, inverse


class _Strings:
    """Event names, each stored once; an event refers to one by id."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        return self.ids.setdefault(text, len(self.ids))


class _ArgSets:
    """Arg sets by content: equal sets of args are one set (ids from 1), as in
    trace_processor."""

    def __init__(self) -> None:
        self.ids: dict[tuple[ArgRow, ...], int] = {}
        self.contents: list[tuple[ArgRow, ...]] = []

    def id(self, rows: tuple[ArgRow, ...]) -> int:
        """The arg set with these args (-1 for none)."""
        if not rows:
            return -1
        found = self.ids.get(rows)
        if found is None:
            self.contents.append(rows)
            found = self.ids[rows] = len(self.contents)
        return found

    def of_annotations(self, blob: bytes, seq: _Sequence) -> int:
        """The arg set (-1: none) of a run of serialized debug annotations (TrackEvent field
        4s), which mean what the sequence's interning says."""
        known = seq.arg_sets.get(blob)
        if known is None:
            annotations = pb.TrackEvent.FromString(blob).debug_annotations
            rows = (_arg_row(a, seq.arg_names, seq.arg_values) for a in annotations)
            known = seq.arg_sets[blob] = self.id(tuple(r for r in rows if r is not None))
        return known

    def with_passthrough(self, arg_set: int, utid: int) -> int:
        """An arg set (-1: none) with `legacy_event.passthrough_utid` added."""
        rows = self.contents[arg_set - 1] if arg_set > 0 else ()
        return self.id((*rows, (PASSTHROUGH_KEY, utid, None, None, "uint", str(utid))))


@dataclass
class _Descriptor:
    uuid: int
    parent: int
    kind: str
    """"process", "thread", "counter" or "track"."""
    name: str | None
    unit: str | None = None
    utid: int | None = None


class NamedBy(IntEnum):
    """Who named a thread: a name from a higher source is not replaced by a lower one's."""

    SCHEDULER = 1
    PROCESS_TREE = 2
    DESCRIPTOR = 3


class _Threads:
    """Processes and threads as trace_processor numbers them: the swapper rows first, a
    process with its main thread."""

    def __init__(self) -> None:
        self.processes: list[list[Any]] = [[0, 0, None, None]]
        self.threads: list[list[Any]] = [[0, 0, "swapper", 0]]
        self.upid: dict[int, int] = {0: 0}
        self.utid: dict[int, int] = {0: 0}
        self.named_by: dict[int, NamedBy] = {0: NamedBy.DESCRIPTOR}

    def process(self, pid: int, name: str | None = None, cmdline: str | None = None) -> int:
        upid = self.upid.get(pid)
        if upid is None:
            upid = self.upid[pid] = len(self.processes)
            self.processes.append([upid, pid, None, None])
            if pid not in self.utid:
                self.utid[pid] = len(self.threads)
                self.threads.append([len(self.threads), pid, None, upid])
            elif self.threads[self.utid[pid]][3] is None:  # the scheduler saw it first
                self.threads[self.utid[pid]][3] = upid
        if name:
            self.processes[upid][2] = name
        if cmdline:
            self.processes[upid][3] = cmdline
        return upid

    def thread(self, tid: int, pid: int | None, name: str | None = None,
               named_by: NamedBy = NamedBy.DESCRIPTOR) -> int:
        """A thread (of process `pid`, where known), named `name` unless a higher source named
        it."""
        upid = None if pid is None else self.process(pid)
        utid = self.utid.get(tid)
        if utid is None:
            utid = self.utid[tid] = len(self.threads)
            self.threads.append([utid, tid, None, upid])
        elif upid is not None:
            self.threads[utid][3] = upid
        if name and named_by >= self.named_by.get(utid, named_by):
            self.threads[utid][2] = name
            self.named_by[utid] = named_by
        return utid

    def scheduled(self, tid: int, comm: str) -> int:
        """A task the scheduler switched to or woke, named by it."""
        return self.thread(tid, None, comm, NamedBy.SCHEDULER)


class _Events:
    """Track events as read, in file order: columns, with their flows and extra counter values
    as long tables keyed by the event's position; tracks by their uuid's code (`_Reader.code`)."""

    _COLUMNS: ClassVar[dict[str, Any]] = {
        "ts": np.int64, "kind": np.int8, "track": np.int32, "name": np.int32, "args": np.int32,
        "value": np.float64, "thread": np.int32}
    _FLOWS: ClassVar[dict[str, Any]] = {"event": np.int32, "flow": np.uint64,
                                        "terminating": np.bool_}
    _EXTRAS: ClassVar[dict[str, Any]] = {"event": np.int32, "track": np.int32,
                                         "value": np.float64}

    def __init__(self) -> None:
        self.count = 0
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in self._COLUMNS}
        self._flows: dict[str, list[np.ndarray]] = {k: [] for k in self._FLOWS}
        self._extras: dict[str, list[np.ndarray]] = {k: [] for k in self._EXTRAS}

    def add(self, columns: dict[str, np.ndarray], flows: dict[str, np.ndarray],
            extras: dict[str, np.ndarray]) -> None:
        """Append events; `event` in flows and extras counts from the first of them."""
        for k, dtype in self._COLUMNS.items():
            self._parts[k].append(np.asarray(columns[k], dtype))
        for table, parts, dtypes in ((flows, self._flows, self._FLOWS),
                                     (extras, self._extras, self._EXTRAS)):
            for k, dtype in dtypes.items():
                column = np.asarray(table[k], dtype)
                parts[k].append(column + self.count if k == "event" else column)
        self.count += len(columns["ts"])

    def add_one(self, event: dict[str, Any], flows: list[tuple[int, bool]],
                extras: list[tuple[int, float]]) -> None:
        """Append one event (its columns' values), with its flows and extra counter values."""
        def table(rows: list[tuple[Any, Any]], keys: tuple[str, str],
                  dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
            # each column its own type: numpy reads [0, 2**64 - 1] as floats
            columns = {k: np.array([r[i] for r in rows], dtypes[k]) for i, k in enumerate(keys)}
            return {"event": np.zeros(len(rows), np.int64), **columns}

        self.add({k: np.array([v], self._COLUMNS[k]) for k, v in event.items()},
                 table(flows, ("flow", "terminating"), self._FLOWS),
                 table(extras, ("track", "value"), self._EXTRAS))

    def columns(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                               dict[str, np.ndarray]]:
        def joined(parts: dict[str, list[np.ndarray]], dtypes: dict[str, Any]
                   ) -> dict[str, np.ndarray]:
            return {k: np.concatenate(parts[k]) if parts[k] else np.empty(0, dtypes[k])
                    for k in dtypes}

        return (joined(self._parts, self._COLUMNS), joined(self._flows, self._FLOWS),
                joined(self._extras, self._EXTRAS))


@dataclass
class _Scanned:
    """A buffer's packets, scanned: which are bulk-path events, with their packet fields and
    their TrackEvent's fields, and where each compressed chunk is."""

    starts: np.ndarray
    ends: np.ndarray
    bulk: np.ndarray
    """Per packet: an event the bulk path reads."""
    compressed: np.ndarray
    """Per packet: the [start, end) of its compressed_packets, or (-1, -1)."""
    seq: np.ndarray
    flags: np.ndarray
    ts: np.ndarray
    event: _EventFields | None
    event_of: np.ndarray
    """Per packet: its row in `event`, -1 for none."""


@dataclass
class _EventFields:
    """The fields of TrackEvents read in bulk, one row per event, and long tables (sorted by
    event row) for the repeated ones."""

    ok: np.ndarray
    """The bulk path reads it (only fields it knows, singular ones once)."""
    kind: np.ndarray
    track: np.ndarray
    has_track: np.ndarray
    name: np.ndarray
    run: np.ndarray
    """(events, 2): where its run of debug annotations starts and ends, -1 for none."""
    run_hash: np.ndarray
    """(events, 2): the run's hashes (0 for none, or a run too long to hash)."""
    value: np.ndarray
    """The counter value (NaN for none)."""
    too_many: np.ndarray
    """More extra counter values than trace_processor takes."""
    own_extras: np.ndarray
    """It names its extra counter tracks (else the sequence's defaults do)."""
    flows: dict[str, np.ndarray]
    """event (row), flow, terminating."""
    extras: dict[str, np.ndarray]
    """event (row), index, uuid (its own, 0 for none), value."""


def _index_in_group(owner: np.ndarray) -> np.ndarray:
    """Each entry's position among its owner's (entries grouped by owner, in order)."""
    if not len(owner):
        return np.empty(0, np.int64)
    first = np.flatnonzero(np.diff(owner, prepend=owner[0] - 1))
    return np.arange(len(owner)) - np.repeat(first, np.diff(np.append(first, len(owner))))


_HASHED_RUN = 1024
"""Runs of annotations up to this long are keyed by a hash; a longer one by its bytes."""
_BASES = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], np.uint64)
_POWERS = np.cumprod(np.vstack([np.ones(2, np.uint64)] + [_BASES] * (_HASHED_RUN // 8 - 1)),
                     0, dtype=np.uint64).T.copy()
"""Powers of two odd 64-bit bases (mod 2**64), one per 8-byte word of a run."""


def _run_hashes(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(n, 2): two 64-bit hashes (of the bytes, and the length) of each byte string
    buf[start:end] up to _HASHED_RUN long; 0 for none or longer ones.

    The 128 bits tell the runs of annotations apart, so that the arg set of a run is looked up
    once per distinct run, in numpy, not once per event in Python. Each is a polynomial in
    the run's 8-byte words, each word scrambled first (xorshift, odd multiply: one to one)."""
    out = np.zeros((len(start), 2), np.uint64)
    hashed = np.flatnonzero((start >= 0) & (end - start <= _HASHED_RUN))
    if not len(hashed):
        return out
    length = end[hashed] - start[hashed]
    words = (length + 7) // 8
    offset = np.cumsum(words) - words
    within = np.arange(int(words.sum())) - np.repeat(offset, words)
    left = np.repeat(length, words) - 8 * within  # bytes of the run from this word on
    every_offset = np.ndarray((len(buf) - 7,), "<u8", buf, 0, (1,))  # unaligned 8-byte loads
    word = every_offset[np.repeat(start[hashed], words) + 8 * within]
    short = left < 8
    word[short] &= (np.uint64(1) << (left[short] * 8).astype(np.uint64)) - np.uint64(1)
    word ^= word >> np.uint64(31)
    word *= np.uint64(0xBF58476D1CE4E5B9)
    for k in range(2):
        out[hashed, k] = np.add.reduceat(word * _POWERS[k][within], offset)
    out[hashed, 0] ^= length.astype(np.uint64)
    return out


def _scan_events(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> _EventFields | None:
    """Read the TrackEvents at buf[starts[i]:ends[i]] in bulk; None if one is malformed."""
    m = wirescan.scan(buf, starts, ends, _EVENT)
    if m is None:
        return None
    kind = m.value[_E_TYPE].astype(np.int64)
    has_counter, has_double = m.present[_E_COUNTER], m.present[_E_DOUBLE]
    value = np.where(has_double, m.value[_E_DOUBLE].view(np.float64),
                     np.where(has_counter, m.value[_E_COUNTER].view(np.int64).astype(np.float64),
                              np.nan))
    out, into = m.repeated[_E_FLOW], m.repeated[_E_TERMINATING]
    flow_owner = np.concatenate([out[0], into[0]])
    by_event = np.argsort(flow_owner, kind="stable")
    tracks, values = m.repeated[_E_EXTRA_TRACK], m.repeated[_E_EXTRA_VALUE]
    own_count = np.bincount(tracks[0], minlength=len(starts))
    index = _index_in_group(values[0])
    named = index < own_count[values[0]]
    uuid = np.zeros(len(index), np.uint64)
    uuid[named] = tracks[1][((np.cumsum(own_count) - own_count)[values[0]] + index)[named]]
    return _EventFields(
        ok=m.known & np.isin(kind, (BEGIN, END, INSTANT, COUNTER)) & ~(has_counter & has_double),
        kind=kind.astype(np.int8), track=m.value[_E_TRACK], has_track=m.present[_E_TRACK],
        name=m.value[_E_NAME].astype(np.int64),
        run=np.stack([m.start[_E_ANNOTATION], m.end[_E_ANNOTATION]], 1),
        run_hash=_run_hashes(buf, m.start[_E_ANNOTATION], m.end[_E_ANNOTATION]), value=value,
        too_many=np.bincount(values[0], minlength=len(starts)) > MAX_EXTRA_COUNTERS,
        own_extras=own_count > 0,
        flows={"event": flow_owner[by_event],
               "flow": np.concatenate([out[1], into[1]])[by_event],
               "terminating": np.repeat([False, True], [len(out[0]), len(into[0])])[by_event]},
        extras={"event": values[0], "index": index, "uuid": uuid,
                "value": values[1].view(np.int64).astype(np.float64)})


def _scan(buf: np.ndarray, begin: int, end: int) -> _Scanned | None:
    """Frame and scan the packets in buf[begin:end]; None unless they are well formed."""
    spans = wirescan.packet_spans(buf, begin, end)
    if spans is None:
        return None
    starts, ends = spans
    m = wirescan.scan(buf, starts, ends, _PACKET)
    if m is None:
        return None
    flags = m.value[_P_FLAGS].astype(np.int64)
    compressed = np.stack([m.start[_P_COMPRESSED], m.end[_P_COMPRESSED]], 1)
    candidate = (m.known & m.present[_P_TIMESTAMP] & m.present[_P_SEQUENCE]
                 & m.present[_P_EVENT] & ~m.present[_P_COMPRESSED] & (flags & _CLEARED == 0))
    at = np.flatnonzero(candidate)
    event_of = np.full(len(starts), -1, np.int64)
    event_of[at] = np.arange(len(at))
    events = _scan_events(buf, m.start[_P_EVENT][at], m.end[_P_EVENT][at]) if len(at) else None
    if events is None:
        candidate[:] = False
    else:
        candidate[at] = events.ok
    return _Scanned(starts, ends, candidate, compressed, m.value[_P_SEQUENCE].astype(np.int64),
                    flags, m.value[_P_TIMESTAMP], events, event_of)


def _scanned(data: bytes) -> _Scanned | None:
    return _scan(wirescan.padded(data), 0, len(data))


MAX_PACKET_BYTES = 4 << 30
"""What a trace's compressed chunks may expand to at most, all together: 4 GiB, and no more
than EXPANSION times the file (deflate can expand a file a thousandfold: a bomb)."""
EXPANSION = 64
MAX_NESTING = 4
"""Compressed chunks inside compressed chunks, levels deep at most (we write none)."""
_STEP = 1 << 24
"""Bytes inflated at a time, each step taken from the budget."""


class _Budget:
    """The bytes a trace's compressed chunks may still expand to, shared by the pool's
    threads: one sentence once they are spent."""

    def __init__(self, path: Path, file_size: int) -> None:
        self.path = path
        self.total = self.left = min(MAX_PACKET_BYTES, EXPANSION * file_size)
        self._lock = threading.Lock()

    def take(self, size: int) -> None:
        with self._lock:
            self.left -= size
            if self.left < 0:
                raise ProfinferError(
                    f"{self.path} expands past {self.total >> 20} MiB of packets ({EXPANSION} "
                    f"times its size, {MAX_PACKET_BYTES >> 30} GiB at most, are read): it is no "
                    "trace we wrote (a decompression bomb?)")


def _inflate(chunk: bytes, budget: _Budget, keep: bool = True) -> bytes:
    """A zlib stream's data (kept, or only counted), inflated a step at a time from the budget
    (zlib.error where it is not a whole stream)."""
    inflater = zlib.decompressobj()
    parts = []
    rest = chunk
    while not inflater.eof:
        part = inflater.decompress(rest, _STEP)
        if not part and not rest:
            raise zlib.error("incomplete or truncated stream")
        budget.take(len(part))
        if keep:
            parts.append(part)
        rest = inflater.unconsumed_tail
    return b"".join(parts)


def check_expansion(path: Path, data: bytes) -> None:
    """One sentence where the compressed chunks of a trace (`data`, the bytes of `path`)
    expand past the budget the import has: checked before trace_processor, which has none,
    loads it. A chunk that does not inflate is left to trace_processor to report."""
    scanned = _scanned(data)
    if scanned is None:
        return
    budget = _Budget(path, len(data))
    for a, b in scanned.compressed[scanned.compressed[:, 0] >= 0].tolist():
        try:
            _inflate(data[a:b], budget, keep=False)
        except zlib.error:
            return


def _expand(chunk: bytes, budget: _Budget) -> tuple[bytes, _Scanned | None]:
    """A compressed chunk's packets, and their scan (None: they do not parse)."""
    data = _inflate(chunk, budget)
    return data, _scanned(data)


def _rows_of(table: dict[str, np.ndarray], first: int, last: int) -> dict[str, np.ndarray]:
    """The entries of a long table (sorted by event row) for event rows first..last-1."""
    a, b = np.searchsorted(table["event"], [first, last])
    return {k: v[a:b] for k, v in table.items()}


class _Reader:
    """Reads a trace's packets in order into descriptors, threads and event columns."""

    def __init__(self, path: Path, pool: ThreadPoolExecutor, budget: _Budget) -> None:
        self.path = path
        self.pool = pool
        self.budget = budget
        self.strings = _Strings()
        self.arg_sets = _ArgSets()
        self.threads = _Threads()
        self.descriptors: dict[int, _Descriptor] = {}
        self.sequences: dict[int, _Sequence] = {}
        self.events = _Events()
        self.sched = SchedEvents()
        self.thread_keys: dict[tuple[int, int], int] = {}
        """(pid, tid) of a sequence's described thread -> its index (an event's `thread`)."""
        self.track_codes: dict[int, int] = {}
        """Track uuid -> its code (an event's `track`)."""

    def sequence(self, seq_id: int) -> _Sequence:
        seq = self.sequences.get(seq_id)
        if seq is None:
            seq = self.sequences[seq_id] = _Sequence(self.strings)
        return seq

    def read(self, data: bytes) -> None:
        """Read the packets serialized in `data`, a compressed chunk's in its place."""
        self._read(data, _scanned(data))

    def _read(self, data: bytes, scanned: _Scanned | None, depth: int = 0) -> None:
        if scanned is None:
            raise _not_a_trace(self.path)
        if depth > MAX_NESTING:
            raise ProfinferError(f"{self.path} nests compressed chunks more than {MAX_NESTING} "
                                 "levels deep: it is no trace we wrote")
        chunks = self._expanded(data, scanned.compressed)
        done = 0
        for i in [*np.flatnonzero(~scanned.bulk).tolist(), len(scanned.starts)]:
            if i > done:
                self._bulk(data, scanned, done, i)
            if i < len(scanned.starts):
                if scanned.compressed[i, 0] >= 0:
                    self._read(*next(chunks), depth + 1)
                else:
                    self._packet(data[scanned.starts[i]:scanned.ends[i]])
            done = i + 1

    def _expanded(self, data: bytes, spans: np.ndarray
                  ) -> Iterator[tuple[bytes, _Scanned | None]]:
        """The compressed chunks at `spans`, expanded and scanned in order on the pool, a few
        ahead of the one being read."""
        todo = iter(spans[spans[:, 0] >= 0].tolist())
        pending = [self.pool.submit(_expand, data[a:b], self.budget)
                   for a, b in islice(todo, _PREFETCH)]
        while pending:
            future = pending.pop(0)
            pending += [self.pool.submit(_expand, data[a:b], self.budget)
                        for a, b in islice(todo, 1)]
            try:
                yield future.result()
            except zlib.error:
                raise _corrupt(self.path) from None

    def _packet(self, raw: bytes) -> None:
        """One packet the bulk path does not read (nor a compressed chunk), with protobuf."""
        packet = pb.TracePacket.FromString(raw)
        seq_id = packet.trusted_packet_sequence_id
        seq = self.sequence(seq_id)
        if packet.sequence_flags & _CLEARED:
            seq = self.sequences[seq_id] = _Sequence(self.strings, seq.thread, valid=True)
        if packet.HasField("interned_data"):
            seq.intern(packet.interned_data)
        if packet.HasField("trace_packet_defaults"):
            seq.defaults(packet.trace_packet_defaults)
        ts = seq.time(packet) if packet.HasField("timestamp") else None
        kind = packet.WhichOneof("data")
        if kind == "track_event" and ts is not None:
            self._event(packet, seq, ts)
        elif kind == "track_descriptor":
            self._descriptor(packet.track_descriptor, seq)
        elif kind == "clock_snapshot":
            seq.snapshot(packet.clock_snapshot)
        elif kind == "ftrace_events":
            self.sched.add(packet.ftrace_events)
        elif kind == "process_tree":
            self._process_tree(packet.process_tree)

    def _process_tree(self, tree: Any) -> None:
        for p in tree.processes:
            cmdline = [text(c) for c in p.cmdline]
            self.threads.process(p.pid, cmdline[0] if cmdline else None,
                                 " ".join(cmdline) or None)
        for t in tree.threads:
            self.threads.thread(t.tid, t.tgid, text(t.name), NamedBy.PROCESS_TREE)

    def _descriptor(self, d: Any, seq: _Sequence) -> None:
        if d.HasField("thread"):
            t = d.thread
            utid = self.threads.thread(t.tid, t.pid, text(t.thread_name))
            self.descriptors[d.uuid] = _Descriptor(d.uuid, d.parent_uuid, "thread", None, None,
                                                   utid)
            if seq.valid:  # trace_processor reads it as the sequence's thread then only
                seq.thread = (t.pid, t.tid)
        elif d.HasField("process"):
            self.threads.process(d.process.pid, text(d.process.process_name))
            self.descriptors[d.uuid] = _Descriptor(d.uuid, d.parent_uuid, "process", None)
        elif d.HasField("counter"):
            unit = text(d.counter.unit_name) or _UNITS.get(d.counter.unit)
            self.descriptors[d.uuid] = _Descriptor(d.uuid, d.parent_uuid, "counter",
                                                   text(d.name) or None, unit)
        else:
            self.descriptors[d.uuid] = _Descriptor(d.uuid, d.parent_uuid, "track",
                                                   text(d.name) or None)

    def code(self, uuid: int) -> int:
        """A track uuid's code: events keep 32-bit codes, not 64-bit uuids."""
        return self.track_codes.setdefault(uuid, len(self.track_codes))

    def codes(self, uuids: np.ndarray) -> np.ndarray:
        distinct, which = np.unique(uuids, return_inverse=True)
        codes = np.array([self.code(u) for u in distinct.tolist()], np.int32)
        found: np.ndarray = codes[which.reshape(-1)]
        return found

    def _thread_key(self, seq: _Sequence) -> int:
        if seq.thread is None:
            return -1
        return self.thread_keys.setdefault(seq.thread, len(self.thread_keys))

    def _event(self, packet: Any, seq: _Sequence, ts: int) -> None:
        """A track event read with protobuf; dropped where trace_processor drops it."""
        e = packet.track_event
        value = math.nan
        if e.HasField("counter_value"):
            value = float(e.counter_value)
        elif e.HasField("double_counter_value"):
            value = e.double_counter_value
        values = list(e.extra_counter_values)
        if (not packet.HasField("trusted_packet_sequence_id")
                or (packet.sequence_flags & _NEEDS and not seq.valid)
                or e.type not in (BEGIN, END, INSTANT, COUNTER)
                or (e.type == COUNTER and math.isnan(value))
                or len(values) > MAX_EXTRA_COUNTERS):
            return
        name = (self.strings.id(text(e.name)) if e.HasField("name")
                else seq.names.get(e.name_iid, -1))
        blob = b"".join(pb.TrackEvent(debug_annotations=[a]).SerializeToString()
                        for a in e.debug_annotations)
        uuids = list(e.extra_counter_track_uuids or seq.counter_uuids)
        uuids += [0] * (len(values) - len(uuids))  # a value with no track: the event is dropped
        self.events.add_one(
            {"ts": ts, "kind": e.type, "name": name, "value": value,
             "track": self.code(e.track_uuid if e.HasField("track_uuid") else seq.track_uuid),
             "args": self.arg_sets.of_annotations(blob, seq) if blob else -1,
             "thread": self._thread_key(seq)},
            [(f, False) for f in e.flow_ids] + [(f, True) for f in e.terminating_flow_ids],
            list(zip(map(self.code, uuids), map(float, values), strict=False)))

    def _bulk(self, data: bytes, s: _Scanned, a: int, b: int) -> None:
        """Packets a..b-1, bulk-path events all: decoded column by column, with the state of
        their sequences."""
        ev = s.event
        assert ev is not None
        first = int(s.event_of[a])
        rows = slice(first, first + b - a)  # bulk events are consecutive event rows
        columns, keep, extra_tracks = self._with_state(data, s, a, b)
        kind, value = ev.kind[rows], ev.value[rows]
        keep &= ~ev.too_many[rows] & ((kind != COUNTER) | ~np.isnan(value))
        columns.update(kind=kind, value=value)
        extras = _rows_of(ev.extras, first, first + b - a)
        flows = _rows_of(ev.flows, first, first + b - a)
        extras["event"] = extras["event"] - first  # not in place: a view of the scan
        flows["event"] = flows["event"] - first
        named = ev.own_extras[extras["event"] + first]
        default = extra_tracks[extras["event"], np.minimum(extras["index"],
                                                           MAX_EXTRA_COUNTERS - 1)]
        extras["track"] = self.codes(np.where(named, extras["uuid"], default))
        if not keep.all():
            renumbered = np.cumsum(keep) - 1
            columns = {k: v[keep] for k, v in columns.items()}
            extras = {k: v[keep[extras["event"]]] for k, v in extras.items()}
            flows = {k: v[keep[flows["event"]]] for k, v in flows.items()}
            extras["event"], flows["event"] = (renumbered[extras["event"]],
                                               renumbered[flows["event"]])
        self.events.add(columns, flows, extras)

    def _with_state(self, data: bytes, s: _Scanned, a: int, b: int
                    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """What packets a..b-1 mean in the state of their sequences: their timestamps, tracks,
        names, arg sets and sequence threads; which are kept (trace_processor skips one that
        needs a state its sequence never had); each one's default extra counter tracks."""
        ev = s.event
        assert ev is not None
        rows = slice(int(s.event_of[a]), int(s.event_of[a]) + b - a)
        seq_ids = s.seq[a:b]
        keep = np.ones(b - a, bool)
        columns = {"ts": np.empty(b - a, np.int64), "track": ev.track[rows].copy(),
                   "name": np.empty(b - a, np.int32), "args": np.empty(b - a, np.int32),
                   "thread": np.empty(b - a, np.int32)}
        extra_tracks = np.zeros((b - a, MAX_EXTRA_COUNTERS), np.uint64)
        distinct = np.unique(seq_ids).tolist()
        for seq_id in distinct:
            at = np.flatnonzero(seq_ids == seq_id) if len(distinct) > 1 else np.arange(b - a)
            seq = self.sequence(seq_id)
            if not seq.valid:
                keep[at[s.flags[a:b][at] & _NEEDS != 0]] = False
            columns["ts"][at] = seq.times(s.ts[a:b][at])
            columns["track"][at[~ev.has_track[rows][at]]] = seq.track_uuid
            columns["name"][at] = seq.name_ids(ev.name[rows][at])
            columns["args"][at] = self._bulk_args(data, ev.run[rows][at],
                                                  ev.run_hash[rows][at], seq)
            columns["thread"][at] = self._thread_key(seq)
            defaults = seq.counter_uuids[:MAX_EXTRA_COUNTERS]
            extra_tracks[at, :len(defaults)] = defaults
        columns["track"] = self.codes(columns["track"])
        return columns, keep, extra_tracks

    def _bulk_args(self, data: bytes, run: np.ndarray, run_hash: np.ndarray,
                   seq: _Sequence) -> np.ndarray:
        """Each event's arg set (-1 for none), from its run of annotations: runs with a hash
        looked up by it in numpy, a run first seen (or too long to hash) by its bytes."""
        args = np.full(len(run), -1, np.int32)
        has = run[:, 0] >= 0
        hashed = np.flatnonzero(has & (run_hash != 0).any(1))
        keys, first, inverse = _distinct(run_hash[hashed])
        if keys is None:  # two runs that share one hash and not the other: by bytes then
            hashed = np.empty(0, np.int64)
        else:
            found = seq.hashed.find(keys)
            for i in np.flatnonzero(found == _UNKNOWN).tolist():
                x, y = run[hashed[first[i]]].tolist()
                found[i] = self.arg_sets.of_annotations(data[x:y], seq)
            seq.hashed.add(keys, found)
            args[hashed] = found[inverse]
        rest = np.flatnonzero(has)
        rest = rest[~np.isin(rest, hashed)]
        for i, (x, y) in zip(rest.tolist(), run[rest].tolist(), strict=True):
            args[i] = self.arg_sets.of_annotations(data[x:y], seq)
        return args


@dataclass
class _Track:
    id: int
    descriptor: _Descriptor
    scope: str
    """"thread", "process" or "global": the nearest thread or process track above it."""
    utid: int | None


class _Tracks:
    """Tracks as trace_processor makes them: when first used, parents first."""

    def __init__(self, descriptors: dict[int, _Descriptor]) -> None:
        self.descriptors = descriptors
        self.made: dict[int, _Track] = {}

    def use(self, uuid: int) -> None:
        """Make a described track, its parents first (a chain of parents that loops back is
        followed up to where it loops)."""
        chain: dict[int, None] = {}
        while uuid not in self.made and uuid in self.descriptors and uuid not in chain:
            chain[uuid] = None
            uuid = self.descriptors[uuid].parent
        for made in reversed(chain):
            self._make(self.descriptors[made])

    def _make(self, d: _Descriptor) -> None:
        parent = self.made.get(d.parent)
        if d.kind in ("thread", "process"):
            scope, utid = d.kind, d.utid
        elif parent is not None:
            scope, utid = parent.scope, parent.utid
        else:
            scope, utid = "global", None
        self.made[d.uuid] = _Track(len(self.made), d, scope, utid)

    def rows(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """track, thread_track and counter_track rows."""
        tracks: list[tuple[Any, ...]] = []
        thread_tracks: list[tuple[Any, ...]] = []
        counter_tracks: list[tuple[Any, ...]] = []
        for t in self.made.values():
            d = t.descriptor
            if d.kind == "thread":
                tracks.append((t.id, None, "thread_execution"))
                thread_tracks.append((t.id, None, t.utid))
            elif d.kind == "process":
                tracks.append((t.id, None, "process_track_event"))
            elif d.kind == "counter":
                tracks.append((t.id, d.name, f"{t.scope}_counter_track_event"))
                counter_tracks.append((t.id, d.name, d.unit))
            else:
                tracks.append((t.id, d.name, f"{t.scope}_merged_track_event"))
                if t.scope == "thread":
                    thread_tracks.append((t.id, d.name, t.utid))
        return tracks, thread_tracks, counter_tracks


@dataclass
class _Nesting:
    """Slices from begin, end and instant events on tracks (in parse order)."""

    slice_of: np.ndarray
    """Per event: the slice it begins or ends (-1: an end with no open slice)."""
    depth: np.ndarray
    parent: np.ndarray
    """Per slice."""
    end_of: np.ndarray
    """Per slice: the event that ends it, -1 for none."""
    begins: np.ndarray
    """Per slice: its begin or instant event."""


def _nest(track: np.ndarray, kind: np.ndarray) -> _Nesting:
    """Depth and parent of each slice from the nesting on its track, as trace_processor's
    slice stacks give them, without a Python step per event.

    On a track (its events in parse order), an event's depth is the running count of begins
    minus ends; the slice an end closes, or the parent of a slice, is the latest begin one
    level up, found for all events of a level by one running maximum. (32-bit columns: half
    the memory to touch.)
    """
    n = len(track)
    by_track = np.argsort(track.astype(np.uint16) if track.max(initial=0) < 1 << 16 else track,
                          kind="stable").astype(np.int32)  # a radix sort for 16-bit keys
    group, k = track[by_track], kind[by_track]
    step = (k == BEGIN).astype(np.int8) - (k == END)
    start = _group_starts(group)
    depth = _grouped_cumsum(step, start)
    if depth.min(initial=0) < 0:
        step[_unmatched_ends(depth, step, start)] = 0
        depth = _grouped_cumsum(step, start)
    before = depth - step
    level = before - (step == -1)
    at = np.arange(n, dtype=np.int32)
    open_at = np.full(n, -1, np.int32)
    """Per event (by track): for an end, the begin it closes; for a slice, its parent's."""
    for lvl in range(int(level.max(initial=-1)) + 1):
        latest = np.maximum.accumulate(np.where((step == 1) & (level == lvl), at, -1))
        asks = np.flatnonzero(((step == -1) & (level == lvl)) | ((k != END) & (level == lvl + 1)))
        found = latest[asks]
        open_at[asks] = np.where(found >= start[asks], found, -1)
    opens = kind != END
    slice_of = np.cumsum(opens, dtype=np.int32) - 1
    slice_of[~opens] = -1
    sorted_slice = slice_of[by_track]
    closing = np.flatnonzero(step == -1)
    closed = sorted_slice[open_at[closing]]
    slice_of[by_track[closing]] = closed
    end_of = np.full(int(opens.sum()), -1, np.int32)
    end_of[closed] = by_track[closing]
    slices = np.flatnonzero(k != END)
    parent = np.where(before[slices] > 0, sorted_slice[open_at[slices]], -1)
    depth_of = np.empty(len(end_of), np.int32)
    depth_of[sorted_slice[slices]] = before[slices]
    parent_of = np.empty(len(end_of), np.int32)
    parent_of[sorted_slice[slices]] = parent
    return _Nesting(slice_of, depth_of, parent_of, end_of, np.flatnonzero(opens))


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Per entry (groups contiguous): where its group starts."""
    new = np.flatnonzero(np.diff(group, prepend=group[:1] - 1)).astype(np.int32)
    return np.repeat(new, np.diff(np.append(new, len(group))))


def _grouped_cumsum(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Running sums of `values` restarting at each group's start."""
    total = np.cumsum(values, dtype=np.int32)
    sums: np.ndarray = total - (total[start] - values[start])
    return sums


def _unmatched_ends(depth: np.ndarray, step: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Ends (by position) that find no open slice on their track: trace_processor drops them.

    With those dropped, the depth is the running sum less its running minimum where that is
    below 0 (within the group: each group's minima are offset below all earlier groups')."""
    offset = np.cumsum(start == np.arange(len(start))) * (2 * len(step) + 2)
    floored = depth - np.minimum(np.minimum.accumulate(depth - offset) + offset, 0)
    floored_before = np.concatenate([[0], floored[:-1]])
    floored_before[start == np.arange(len(start))] = 0
    return np.flatnonzero((step == -1) & (floored_before == 0))


@dataclass
class _Tables:
    """The rows of each table."""

    tracks: list[tuple[Any, ...]]
    thread_tracks: list[tuple[Any, ...]]
    counter_tracks: list[tuple[Any, ...]]
    slices: dict[str, np.ndarray]
    counters: dict[str, np.ndarray]
    flows: tuple[np.ndarray, np.ndarray]
    args: list[tuple[Any, ...]]


class _Described:
    """The described tracks, by uuid: which an event's uuid names, and what kind it is."""

    def __init__(self, descriptors: dict[int, _Descriptor]) -> None:
        self.uuids = np.array(sorted(descriptors), np.uint64)
        self.is_counter = np.array([descriptors[u].kind == "counter"
                                    for u in self.uuids.tolist()] + [False])
        self.none = len(self.uuids)

    def of(self, uuids: np.ndarray) -> np.ndarray:
        """Each uuid's index among the described ones; `none` for one never described."""
        if not self.none:
            return np.full(len(uuids), self.none, np.int32)
        at = np.minimum(np.searchsorted(self.uuids, uuids), self.none - 1).astype(np.int32)
        at[self.uuids[at] != uuids] = self.none
        return at


def _parse_order(ts: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kept events in trace_processor's parse order (by timestamp, ties in file order),
    and each event's place in it (-1: not kept). Our traces are in that order already."""
    order = np.arange(len(keep), dtype=np.int32)
    if not keep.all():
        order = order[keep]
    kept_ts = ts if len(order) == len(ts) else ts[order]
    if (kept_ts[1:] < kept_ts[:-1]).any():
        order = order[np.argsort(kept_ts, kind="stable")]
    rank = np.full(len(keep), -1, np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return order, rank


def _made_tracks(reader: _Reader, described: _Described, own: np.ndarray, extra_rank: np.ndarray,
                 extra: np.ndarray) -> _Tracks:
    """The tracks in the order trace_processor makes them: as events use them, in parse order,
    an event's extra counter tracks before its own (`own`: each event's, in parse order)."""
    index = _index_in_group(extra_rank)
    use = np.concatenate([extra_rank.astype(np.int64) * 16 + index,
                          np.arange(len(own), dtype=np.int64) * 16 + 15])
    never = np.iinfo(np.int64).max
    first_use = np.full(described.none + 1, never)
    np.minimum.at(first_use, np.concatenate([extra, own]), use)
    tracks = _Tracks(reader.descriptors)
    used = np.argsort(first_use)[: np.count_nonzero(first_use < never)]
    for d in used.tolist():
        tracks.use(int(described.uuids[d]))
    return tracks


def _slices(ev: dict[str, np.ndarray], order: np.ndarray, track: np.ndarray,
            args: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The slice rows (in parse order of their begin), and each event's slice (-1: none)."""
    events = order[ev["kind"][order] != COUNTER]
    nest = _nest(track[events], ev["kind"][events])
    begun = events[nest.begins]
    ended = np.where(nest.end_of >= 0, events[np.maximum(nest.end_of, 0)], -1)
    dur = np.where(ended >= 0, ev["ts"][ended] - ev["ts"][begun], -1)
    slices = {"ts": ev["ts"][begun], "dur": np.where(ev["kind"][begun] == INSTANT, 0, dur),
              "track": track[begun], "name": ev["name"][begun], "depth": nest.depth,
              "parent": nest.parent, "args": args[begun]}
    slice_of = np.full(len(track), -1, np.int32)
    slice_of[events] = nest.slice_of
    return slices, slice_of


def _build(reader: _Reader, pool: ThreadPoolExecutor) -> _Tables:
    """trace_processor's tables from the events read (the slices computed on the pool, beside
    the counters)."""
    ev, flows, extras = reader.events.columns()
    described = _Described(reader.descriptors)
    of_code = described.of(np.array(list(reader.track_codes), np.uint64))
    own, extra = of_code[ev["track"]], of_code[extras["track"]]
    # An event on a track never described, or a counter value on a track that is no counter
    # (or the reverse), is dropped; so is one naming an extra counter track that is no counter.
    keep = (own < described.none) & ((ev["kind"] == COUNTER) == described.is_counter[own])
    keep[extras["event"][~described.is_counter[extra]]] = False
    order, rank = _parse_order(ev["ts"], keep)
    kept = keep[extras["event"]]
    if not kept.all():
        extras, extra = {k: v[kept] for k, v in extras.items()}, extra[kept]
    extras["value"] = _zeroed_after_first_zero(extras["event"], extras["value"])
    tracks = _made_tracks(reader, described, own[order], rank[extras["event"]], extra)
    made = [tracks.made.get(u) for u in described.uuids.tolist()] + [None]
    track_id = np.array([-1 if t is None else t.id for t in made], np.int32)
    thread_scoped = np.array([t is not None and t.scope == "thread" for t in made])
    utids = [reader.threads.utid[tid] for _, tid in reader.thread_keys]
    args = _passthrough(reader, ev["args"], ev["thread"], thread_scoped[own], utids)
    sliced = pool.submit(_slices, ev, order, track_id[own], args)
    counters = _counters(ev, extras, order, rank, track_id[own], track_id[extra], args)
    slices, slice_of = sliced.result()
    return _Tables(*tracks.rows(), slices, counters, _flows(flows, rank, slice_of),
                   _arg_rows(reader.arg_sets, slices, counters))


def _zeroed_after_first_zero(event: np.ndarray, value: np.ndarray) -> np.ndarray:
    """An event's extra counter values from its first 0 on read as 0: trace_processor's sorter
    keeps an event's values up to the first 0."""
    zero = (value == 0).astype(np.int8)
    return np.where(_grouped_cumsum(zero, _group_starts(event)) > 0, 0.0, value)


def _passthrough(reader: _Reader, args: np.ndarray, thread: np.ndarray, thread_scoped: np.ndarray,
                 utids: list[int]) -> np.ndarray:
    """Arg sets with `legacy_event.passthrough_utid` added where trace_processor adds it: an
    event on a sequence that described a thread, on a track that is not a thread's."""
    marked = np.flatnonzero((thread >= 0) & ~thread_scoped)
    if not len(marked):
        return args
    pairs, which = np.unique(np.stack([args[marked], thread[marked]], 1), axis=0,
                             return_inverse=True)
    new = [reader.arg_sets.with_passthrough(a, utids[t]) for a, t in pairs.tolist()]
    args = args.copy()
    args[marked] = np.array(new, np.int32)[which.reshape(-1)]
    return args


def _counters(ev: dict[str, np.ndarray], extras: dict[str, np.ndarray], order: np.ndarray,
              rank: np.ndarray, own_track: np.ndarray, extra_track: np.ndarray,
              args: np.ndarray) -> dict[str, np.ndarray]:
    """Counter rows in parse order: an event's extra counter values, then its own value."""
    own = order[ev["kind"][order] == COUNTER]
    key = np.concatenate([rank[extras["event"]] * 16 + _index_in_group(extras["event"]),
                          rank[own] * 16 + 15])
    by_key = np.argsort(key, kind="stable")
    event = np.concatenate([extras["event"], own])[by_key]
    return {"ts": ev["ts"][event],
            "track": np.concatenate([extra_track, own_track[own]])[by_key],
            "value": np.concatenate([extras["value"], ev["value"][own]])[by_key],
            "args": np.concatenate([np.full(len(extras["event"]), -1), args[own]])[by_key]}


def _flows(flows: dict[str, np.ndarray], rank: np.ndarray,
           slice_of_event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flow arrows as trace_processor's flow tracker draws them: a flow id on a slice starts a
    flow there, or continues it from its last slice; a terminating one ends it there."""
    slice_of = slice_of_event[flows["event"]]
    on = np.flatnonzero((slice_of >= 0) & (rank[flows["event"]] >= 0))
    # parse order: by event, an event's flow ids before its terminating ones
    on = on[np.lexsort((flows["terminating"][on], rank[flows["event"][on]]))]
    by_id = on[np.argsort(flows["flow"][on], kind="stable")]
    same = flows["flow"][by_id][1:] == flows["flow"][by_id][:-1]
    continues = same & ~flows["terminating"][by_id][:-1]
    source, target = by_id[:-1][continues], by_id[1:][continues]
    made = np.argsort(_position(on, target), kind="stable")
    return slice_of[source][made], slice_of[target][made]


def _position(order: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Where each of `items` is in `order` (a permutation of a superset of them)."""
    where = np.empty(int(order.max(initial=-1)) + 1, np.int64)
    where[order] = np.arange(len(order))
    found: np.ndarray = where[items]
    return found


def _arg_rows(arg_sets: _ArgSets, slices: dict[str, np.ndarray],
              counters: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """The args of the arg sets that slices and counters use."""
    used = np.union1d(slices["args"], counters["args"])
    return [(arg_set, key, key, i, s, r, kind, display)
            for arg_set in used[used > 0].tolist()
            for key, i, s, r, kind, display in arg_sets.contents[arg_set - 1]]


def _ints(values: np.ndarray) -> Column:
    """An integer column, negative values (none) as NULL."""
    return Column("int", values, values < 0)


def _big_tables(reader: _Reader, t: _Tables) -> dict[str, list[Column]]:
    """The columns (after `id`) of the tables with a row per event."""
    s, c = t.slices, t.counters
    names = [n.encode() for n in reader.strings.ids] or [b""]  # a null name points at one
    no_category = Column("int", np.zeros(len(s["ts"]), np.int64), np.ones(len(s["ts"]), bool))
    return {
        "slice": [Column("int", s["ts"]), Column("int", s["dur"]), Column("int", s["track"]),
                  no_category,
                  Column("text", np.maximum(s["name"], 0), s["name"] < 0, names),
                  Column("int", s["depth"]), _ints(s["parent"]), _ints(s["args"])],
        "counter": [Column("int", c["ts"]), Column("int", c["track"]),
                    Column("real", c["value"]), _ints(c["args"])],
        "flow": [Column("int", t.flows[0]), Column("int", t.flows[1])],
    }


def _python_rows(columns: list[Column]) -> Iterator[tuple[Any, ...]]:
    """Rows (id first) of columns, for SQL inserts."""
    values: list[list[Any]] = []
    for c in columns:
        if c.kind == "text":
            assert c.strings is not None
            texts = np.array([s.decode() for s in c.strings], object)
            column = texts[c.values] if len(texts) else np.empty(len(c.values), object)
        else:
            column = c.values.astype(object)
        if c.null is not None:
            column[c.null] = None
        values.append(list(column))
    return zip(range(len(values[0]) if values else 0), *values, strict=True)


def _store(reader: _Reader, t: _Tables, pool: ThreadPoolExecutor) -> sqlite3.Connection:
    """A new in-memory database with the tables: those with a row per event written as a
    database image where SQLite can load one (sqlite3 `deserialize`), the rest with SQL."""
    db = sqlite3.connect(":memory:")
    big = _big_tables(reader, t)
    if hasattr(db, "deserialize"):
        data, left = sqlite_image.image([sqlite_image.Table(name, _create(name), big.get(name))
                                         for name in SCHEMA], pool)
        db.deserialize(data.data)
    else:
        db.executescript(";".join(map(_create, SCHEMA)))
        left = list(big)
    sched, thread_state = sched_import.tables(reader.sched, reader.threads.scheduled)
    rows: dict[str, Iterable[Sequence[Any]]] = {
        "sched": ((i, *row) for i, row in enumerate(sched)),
        "thread_state": ((i, *row) for i, row in enumerate(thread_state)),
        "process": reader.threads.processes, "thread": reader.threads.threads,
        "track": t.tracks, "thread_track": t.thread_tracks,
        "counter_track": t.counter_tracks, "args": ((i, *row) for i, row in enumerate(t.args)),
        **{name: _python_rows(big[name]) for name in left}}
    for name, table_rows in rows.items():
        marks = ", ".join("?" * len(SCHEMA[name]))
        db.executemany(f"INSERT INTO {name} VALUES ({marks})", table_rows)
    db.commit()
    return db


def load(path: Path, data: bytes) -> sqlite3.Connection:
    """Import a Perfetto TrackEvent trace (`data`, the bytes of `path`) into a new in-memory
    SQLite database."""
    with ThreadPoolExecutor(2) as pool:
        reader = _Reader(path, pool, _Budget(path, len(data)))
        try:
            reader.read(data)
        except DecodeError:
            raise _not_a_trace(path) from None
        except wirescan.Malformed as exc:
            raise ProfinferError(f"{path} is not a well-formed trace: {exc}") from None
        if not reader.descriptors and not reader.events.count:
            raise ProfinferError(f"{path} holds no track events: is it a profinfer-perfetto "
                                 "trace?")
        return _store(reader, _build(reader, pool), pool)
