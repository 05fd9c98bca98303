"""Reads a trace's packets in order into the import's state (query/import_state.py): events
of the bulk path column by column, any other packet with protobuf, compressed chunks expanded
on a pool a few ahead."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.import_scan import MAX_NESTING, Budget, Scanned, expand, scan_data
from profinfer_perfetto.query.import_state import (
    BEGIN,
    CLEARED,
    COUNTER,
    END,
    INSTANT,
    MAX_EXTRA_COUNTERS,
    NEEDS,
    UNKNOWN,
    ArgSets,
    Descriptor,
    Events,
    NamedBy,
    SequenceState,
    Strings,
    Threads,
    distinct,
)
from profinfer_perfetto.query.sched_import import SchedEvents
from profinfer_perfetto.query.wirescan import text

_UNITS = {pb.CounterDescriptor.UNIT_TIME_NS: "ns", pb.CounterDescriptor.UNIT_COUNT: "count",
          pb.CounterDescriptor.UNIT_SIZE_BYTES: "bytes"}
_PREFETCH = 4
"""Compressed chunks expanded ahead of the one being read (zlib runs without the GIL)."""


def not_a_trace(path: Path) -> ProfinferError:
    return ProfinferError(f"{path} is not a Perfetto trace (it does not parse as one)")


def _corrupt(path: Path) -> ProfinferError:
    return ProfinferError(f"{path} is corrupt (a compressed chunk does not decompress)")


def _rows_of(table: dict[str, np.ndarray], first: int, last: int) -> dict[str, np.ndarray]:
    """The entries of a long table (sorted by event row) for event rows first..last-1."""
    a, b = np.searchsorted(table["event"], [first, last])
    return {k: v[a:b] for k, v in table.items()}


class Reader:
    """Reads a trace's packets in order into descriptors, threads and event columns."""

    def __init__(self, path: Path, pool: ThreadPoolExecutor, budget: Budget) -> None:
        self.path = path
        self.pool = pool
        self.budget = budget
        self.strings = Strings()
        self.arg_sets = ArgSets()
        self.threads = Threads()
        self.descriptors: dict[int, Descriptor] = {}
        self.sequences: dict[int, SequenceState] = {}
        self.events = Events()
        self.sched = SchedEvents()
        self.thread_keys: dict[tuple[int, int], int] = {}
        """(pid, tid) of a sequence's described thread -> its index (an event's `thread`)."""
        self.track_codes: dict[int, int] = {}
        """Track uuid -> its code (an event's `track`)."""

    def sequence(self, seq_id: int) -> SequenceState:
        seq = self.sequences.get(seq_id)
        if seq is None:
            seq = self.sequences[seq_id] = SequenceState(self.strings)
        return seq

    def read(self, data: bytes) -> None:
        """Read the packets serialized in `data`, a compressed chunk's in its place."""
        self._read(data, scan_data(data))

    def _read(self, data: bytes, scanned: Scanned | None, depth: int = 0) -> None:
        if scanned is None:
            raise not_a_trace(self.path)
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
                  ) -> Iterator[tuple[bytes, Scanned | None]]:
        """The compressed chunks at `spans`, expanded and scanned in order on the pool, a few
        ahead of the one being read."""
        todo = iter(spans[spans[:, 0] >= 0].tolist())
        pending = [self.pool.submit(expand, data[a:b], self.budget)
                   for a, b in islice(todo, _PREFETCH)]
        while pending:
            future = pending.pop(0)
            pending += [self.pool.submit(expand, data[a:b], self.budget)
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
        if packet.sequence_flags & CLEARED:
            seq = self.sequences[seq_id] = SequenceState(self.strings, seq.thread, valid=True)
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

    def _descriptor(self, d: Any, seq: SequenceState) -> None:
        if d.HasField("thread"):
            t = d.thread
            utid = self.threads.thread(t.tid, t.pid, text(t.thread_name))
            self.descriptors[d.uuid] = Descriptor(d.uuid, d.parent_uuid, "thread", None, None,
                                                   utid)
            if seq.valid:  # trace_processor reads it as the sequence's thread then only
                seq.thread = (t.pid, t.tid)
        elif d.HasField("process"):
            self.threads.process(d.process.pid, text(d.process.process_name))
            self.descriptors[d.uuid] = Descriptor(d.uuid, d.parent_uuid, "process", None)
        elif d.HasField("counter"):
            unit = text(d.counter.unit_name) or _UNITS.get(d.counter.unit)
            self.descriptors[d.uuid] = Descriptor(d.uuid, d.parent_uuid, "counter",
                                                   text(d.name) or None, unit)
        else:
            self.descriptors[d.uuid] = Descriptor(d.uuid, d.parent_uuid, "track",
                                                   text(d.name) or None)

    def code(self, uuid: int) -> int:
        """A track uuid's code: events keep 32-bit codes, not 64-bit uuids."""
        return self.track_codes.setdefault(uuid, len(self.track_codes))

    def codes(self, uuids: np.ndarray) -> np.ndarray:
        distinct, which = np.unique(uuids, return_inverse=True)
        codes = np.array([self.code(u) for u in distinct.tolist()], np.int32)
        found: np.ndarray = codes[which.reshape(-1)]
        return found

    def _thread_key(self, seq: SequenceState) -> int:
        if seq.thread is None:
            return -1
        return self.thread_keys.setdefault(seq.thread, len(self.thread_keys))

    def _event(self, packet: Any, seq: SequenceState, ts: int) -> None:
        """A track event read with protobuf; dropped where trace_processor drops it."""
        e = packet.track_event
        value = math.nan
        if e.HasField("counter_value"):
            value = float(e.counter_value)
        elif e.HasField("double_counter_value"):
            value = e.double_counter_value
        values = list(e.extra_counter_values)
        if (not packet.HasField("trusted_packet_sequence_id")
                or (packet.sequence_flags & NEEDS and not seq.valid)
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
        # trace_processor reads the varint flow ids (deprecated) where there are no fixed64 ones
        out = e.flow_ids or e.flow_ids_old
        into = e.terminating_flow_ids or e.terminating_flow_ids_old
        self.events.add_one(
            {"ts": ts, "kind": e.type, "name": name, "value": value,
             "track": self.code(e.track_uuid if e.HasField("track_uuid") else seq.track_uuid),
             "args": self.arg_sets.of_annotations(blob, seq) if blob else -1,
             "thread": self._thread_key(seq)},
            [(f, False) for f in out] + [(f, True) for f in into],
            list(zip(map(self.code, uuids), map(float, values), strict=False)))

    def _bulk(self, data: bytes, s: Scanned, a: int, b: int) -> None:
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

    def _with_state(self, data: bytes, s: Scanned, a: int, b: int
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
                keep[at[s.flags[a:b][at] & NEEDS != 0]] = False
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
                   seq: SequenceState) -> np.ndarray:
        """Each event's arg set (-1 for none), from its run of annotations: runs with a hash
        looked up by it in numpy, a run first seen (or too long to hash) by its bytes."""
        args = np.full(len(run), -1, np.int32)
        has = run[:, 0] >= 0
        hashed = np.flatnonzero(has & (run_hash != 0).any(1))
        keys, first, inverse = distinct(run_hash[hashed])
        if keys is None:  # two runs that share one hash and not the other: by bytes then
            hashed = np.empty(0, np.int64)
        else:
            found = seq.hashed.find(keys)
            for i in np.flatnonzero(found == UNKNOWN).tolist():
                x, y = run[hashed[first[i]]].tolist()
                found[i] = self.arg_sets.of_annotations(data[x:y], seq)
            seq.hashed.add(keys, found)
            args[hashed] = found[inverse]
        rest = np.flatnonzero(has)
        rest = rest[~np.isin(rest, hashed)]
        for i, (x, y) in zip(rest.tolist(), run[rest].tolist(), strict=True):
            args[i] = self.arg_sets.of_annotations(data[x:y], seq)
        return args
