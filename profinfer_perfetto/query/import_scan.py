"""A buffer's packets framed and their fields scanned in bulk (query/wirescan.py) for the
built-in engine's import, and compressed chunks inflated from one budget: a decompression bomb
ends in one sentence."""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import wirescan
from profinfer_perfetto.query.import_state import (
    BEGIN,
    CLEARED,
    COUNTER,
    END,
    INSTANT,
    MAX_EXTRA_COUNTERS,
)
from profinfer_perfetto.query.wirescan import WIRE_BYTES, WIRE_FIXED64, WIRE_VARINT


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
_E_FLOW_OLD = _field(pb.TrackEvent, "flow_ids_old")
_E_TERMINATING_OLD = _field(pb.TrackEvent, "terminating_flow_ids_old")
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
    {_E_FLOW: WIRE_FIXED64, _E_TERMINATING: WIRE_FIXED64, _E_FLOW_OLD: WIRE_VARINT,
     _E_TERMINATING_OLD: WIRE_VARINT, _E_EXTRA_TRACK: WIRE_VARINT,
     _E_EXTRA_VALUE: WIRE_VARINT}, run=_E_ANNOTATION)
"""The TrackEvent fields the bulk path reads (the annotations as one run of them)."""


@dataclass
class Scanned:
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
    event: EventFields | None
    event_of: np.ndarray
    """Per packet: its row in `event`, -1 for none."""


@dataclass
class EventFields:
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


def index_in_group(owner: np.ndarray) -> np.ndarray:
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


def _flow_ids(ids: tuple[np.ndarray, np.ndarray], old: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
    """The flow ids of one direction (owner, id): an event's fixed64 ones, or where it has none
    its varint ones (the deprecated field), as trace_processor reads them."""
    kept = ~np.isin(old[0], ids[0])
    return (np.concatenate([ids[0], old[0][kept]]),
            np.concatenate([ids[1].astype(np.uint64), old[1][kept].astype(np.uint64)]))


def _scan_events(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> EventFields | None:
    """Read the TrackEvents at buf[starts[i]:ends[i]] in bulk; None if one is malformed."""
    m = wirescan.scan(buf, starts, ends, _EVENT)
    if m is None:
        return None
    kind = m.value[_E_TYPE].astype(np.int64)
    has_counter, has_double = m.present[_E_COUNTER], m.present[_E_DOUBLE]
    value = np.where(has_double, m.value[_E_DOUBLE].view(np.float64),
                     np.where(has_counter, m.value[_E_COUNTER].view(np.int64).astype(np.float64),
                              np.nan))
    out = _flow_ids(m.repeated[_E_FLOW], m.repeated[_E_FLOW_OLD])
    into = _flow_ids(m.repeated[_E_TERMINATING], m.repeated[_E_TERMINATING_OLD])
    flow_owner = np.concatenate([out[0], into[0]])
    by_event = np.argsort(flow_owner, kind="stable")
    tracks, values = m.repeated[_E_EXTRA_TRACK], m.repeated[_E_EXTRA_VALUE]
    own_count = np.bincount(tracks[0], minlength=len(starts))
    index = index_in_group(values[0])
    named = index < own_count[values[0]]
    uuid = np.zeros(len(index), np.uint64)
    uuid[named] = tracks[1][((np.cumsum(own_count) - own_count)[values[0]] + index)[named]]
    return EventFields(
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


def _scan(buf: np.ndarray, begin: int, end: int) -> Scanned | None:
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
                 & m.present[_P_EVENT] & ~m.present[_P_COMPRESSED] & (flags & CLEARED == 0))
    at = np.flatnonzero(candidate)
    event_of = np.full(len(starts), -1, np.int64)
    event_of[at] = np.arange(len(at))
    events = _scan_events(buf, m.start[_P_EVENT][at], m.end[_P_EVENT][at]) if len(at) else None
    if events is None:
        candidate[:] = False
    else:
        candidate[at] = events.ok
    return Scanned(starts, ends, candidate, compressed, m.value[_P_SEQUENCE].astype(np.int64),
                    flags, m.value[_P_TIMESTAMP], events, event_of)


def scan_data(data: bytes) -> Scanned | None:
    return _scan(wirescan.padded(data), 0, len(data))


MAX_PACKET_BYTES = 4 << 30
"""What a trace's compressed chunks may expand to at most, all together: 4 GiB, and no more
than EXPANSION times the file (deflate can expand a file a thousandfold: a bomb)."""
EXPANSION = 64
MAX_NESTING = 4
"""Compressed chunks inside compressed chunks, levels deep at most (we write none)."""
_STEP = 1 << 24
"""Bytes inflated at a time, each step taken from the budget."""


class Budget:
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


def _inflate(chunk: bytes, budget: Budget, keep: bool = True) -> bytes:
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
    scanned = scan_data(data)
    if scanned is None:
        return
    budget = Budget(path, len(data))
    for a, b in scanned.compressed[scanned.compressed[:, 0] >= 0].tolist():
        try:
            _inflate(data[a:b], budget, keep=False)
        except zlib.error:
            return


def expand(chunk: bytes, budget: Budget) -> tuple[bytes, Scanned | None]:
    """A compressed chunk's packets, and their scan (None: they do not parse)."""
    data = _inflate(chunk, budget)
    return data, scan_data(data)
