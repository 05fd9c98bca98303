"""What the built-in engine's import keeps while it reads a trace (query/importer.py): each
sequence's interned state and clocks, arg sets, processes and threads, track descriptors, and
the track events as columns."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

import numpy as np

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.model.names import arg_key
from profinfer_perfetto.query.wirescan import text

BEGIN, END, INSTANT, COUNTER = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                                pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER)
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BOOTTIME = pb.ClockSnapshot.Clock.BOOTTIME
MAX_EXTRA_COUNTERS = 8
"""trace_processor drops an event with more extra counter values than this."""
PASSTHROUGH_KEY = "legacy_event.passthrough_utid"

ArgRow = tuple[str, int | None, str | None, float | None, str, str | None]
"""key, int_value, string_value, real_value, value_type, display_value."""


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


class SequenceState:
    """The incremental state of one trusted packet sequence: interned strings, packet defaults
    and sequence-scoped clocks; `valid` once its state has been cleared (trace_processor skips
    the events that need it before)."""

    def __init__(self, strings: Strings, thread: tuple[int, int] | None = None,
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
        self.hashed = HashIndex()
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


UNKNOWN = -2


class HashIndex:
    """Arg sets by the hashes of their runs of annotations: sorted, for numpy lookups."""

    def __init__(self) -> None:
        self.keys = np.empty((0, 2), np.uint64)
        self.arg_sets = np.empty(0, np.int32)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The arg set of each (hash, hash) key, UNKNOWN for a new one."""
        at = np.minimum(np.searchsorted(self.keys[:, 0], keys[:, 0]), len(self.keys) - 1)
        if not len(self.keys):
            return np.full(len(keys), UNKNOWN, np.int32)
        hit = (self.keys[at] == keys).all(1)
        return np.where(hit, self.arg_sets[at], UNKNOWN).astype(np.int32)

    def add(self, keys: np.ndarray, arg_sets: np.ndarray) -> None:
        """Index new keys (those `find` does not know), kept sorted."""
        new = np.flatnonzero(self.find(keys) == UNKNOWN)
        new = new[np.argsort(keys[new, 0], kind="stable")]
        at = np.searchsorted(self.keys[:, 0], keys[new, 0])
        self.keys = np.insert(self.keys, at, keys[new], axis=0)
        self.arg_sets = np.insert(self.arg_sets, at, arg_sets[new])


def distinct(keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The distinct rows of (n, 2) hash keys (told apart by the first; None if two rows share
    it and not the second), where each is first, and each row's distinct one."""
    _, first, inverse = np.unique(keys[:, 0], return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if (keys[first][inverse] != keys).any():
        return None, first, inverse
    return keys[first], first, inverse


class Strings:
    """Event names, each stored once; an event refers to one by id."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        return self.ids.setdefault(text, len(self.ids))


class ArgSets:
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

    def of_annotations(self, blob: bytes, seq: SequenceState) -> int:
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
class Descriptor:
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


class Threads:
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


class Events:
    """Track events as read, in file order: columns, with their flows and extra counter values
    as long tables keyed by the event's position; tracks by their uuid's code (`Reader.code`)."""

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
