"""Protobuf wire format read in bulk with numpy: the fields of many messages at once, with no
Python object per message (the reading side of encode/wire.py), and the framing of a trace's
packets (the one reader of it: the importer's and trace_file.check_whole's).

A buffer is a uint8 array with at least `PAD` zero bytes after its data, so that a varint read
that runs past the data stays inside the array (and is then refused by a bounds check).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PAD = 16
WIRE_VARINT, WIRE_FIXED64, WIRE_BYTES, WIRE_FIXED32 = 0, 1, 2, 5
PACKET_TAG = 1 << 3 | WIRE_BYTES
"""`Trace.packet`: field 1, length-delimited."""
_WINDOW = 1 << 23
"""Bytes of packets framed at once: bounds the pointer-jumping tables (log2 of the packets in
a window of them)."""
_MALFORMED = np.int64(1) << 62
"""The length given to a varint longer than 10 bytes: past any buffer, so bounds checks fail."""


class Malformed(Exception):
    """Packets that parse but break the trace format's own rules (columns of different lengths,
    an index past its table): the importer names the file in one sentence."""


def text(value: str | bytes) -> str:
    """A protobuf string field as text: protobuf gives the bytes of one that is not UTF-8,
    which is read with U+FFFD for each bad byte."""
    return value if isinstance(value, str) else value.decode(errors="replace")


def padded(data: bytes) -> np.ndarray:
    return np.frombuffer(data + bytes(PAD), np.uint8)


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each position: its value (uint64, the low 64 bits as protobuf keeps them)
    and its length in bytes."""
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), np.int64)
    more = np.flatnonzero(byte >= 0x80)
    for shift in range(7, 70, 7):
        if not len(more):
            break
        byte = buf[pos[more] + length[more]]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        length[more] += 1
        more = more[byte >= 0x80]
    length[more] = _MALFORMED
    return value, length


def _fixed(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """The little-endian fixed64 (size 8) or fixed32 (size 4) at each position, as uint64."""
    raw = np.ascontiguousarray(buf[pos[:, None] + np.arange(size)])
    return raw.view(np.uint64 if size == 8 else np.uint32).ravel().astype(np.uint64)


@dataclass(frozen=True)
class Schema:
    """The fields to read from each message: field number -> wire type."""

    singular: dict[int, int]
    repeated: dict[int, int] = field(default_factory=dict)
    run: int = 0
    """A singular field's number (below 16, length-delimited) whose back-to-back occurrences
    are read as one, from its first tag to the end of the run: a run of debug annotations is
    one step, not one per annotation."""

    def slots(self) -> tuple[list[int], np.ndarray]:
        """The fields in order, and a table from number * 8 + wire to their slot (-1)."""
        fields = [*self.singular, *self.repeated]
        keys = [n * 8 + w for n, w in (*self.singular.items(), *self.repeated.items())]
        table = np.full(max(keys, default=0) + 1, -1, np.int64)
        table[keys] = np.arange(len(keys))
        return fields, table


@dataclass
class Messages:
    """What a scan read from each message."""

    known: np.ndarray
    """Only fields of the schema, a singular one at most once."""
    value: dict[int, np.ndarray]
    """A singular varint or fixed field's value (uint64), 0 where absent (or
    length-delimited)."""
    present: dict[int, np.ndarray]
    start: dict[int, np.ndarray]
    """Where a singular length-delimited field's payload starts (the run's first tag for the
    run field), -1 where absent."""
    end: dict[int, np.ndarray]
    repeated: dict[int, tuple[np.ndarray, np.ndarray]]
    """Owner and value of each occurrence of a repeated field, message by message, in order."""


def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
         schema: Schema) -> Messages | None:
    """Read the messages at buf[starts[i]:ends[i]], field by field for all of them at once;
    None when one is not a well-formed message (a field that runs past its end, a group or a
    reserved wire type)."""
    n = len(starts)
    fields, slot_of = schema.slots()
    spans = [f for f, w in schema.singular.items() if w == WIRE_BYTES]
    out = Messages(np.ones(n, bool), {f: np.zeros(n, np.uint64) for f in schema.singular},
                   {f: np.zeros(n, bool) for f in schema.singular},
                   {f: np.full(n, -1, np.int64) for f in spans},
                   {f: np.full(n, -1, np.int64) for f in spans}, {})
    repeated: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {f: [] for f in schema.repeated}
    live = np.flatnonzero(starts < ends)
    pos, end = starts[live], ends[live]
    while len(live):
        key, tag_size = _keys(buf, pos)
        wire = (key & 7).astype(np.int8)
        value, start, after = _values(buf, wire, pos + tag_size, end)
        if schema.run:
            run = np.flatnonzero(key == schema.run * 8 + WIRE_BYTES)
            start[run] = pos[run]
            after[run] = _run_end(buf, after[run], end[run], schema.run << 3 | WIRE_BYTES)
        if (after > end).any():
            return None
        slot = slot_of[np.minimum(key, len(slot_of) - 1)]
        slot[key >= len(slot_of)] = -1
        out.known[live[slot < 0]] = False
        _take(out, repeated, schema, fields, slot, live, (value, start, after))
        going = after < end
        live, pos, end = live[going], after[going], end[going]
    for number, parts in repeated.items():
        owner = np.concatenate([o for o, _ in parts]) if parts else np.empty(0, np.int64)
        value = np.concatenate([v for _, v in parts]) if parts else np.empty(0, np.uint64)
        order = np.argsort(owner, kind="stable")  # steps in order: each message's in order
        out.repeated[number] = owner[order], value[order]
    return out


def _take(out: Messages, repeated: dict[int, list[tuple[np.ndarray, np.ndarray]]],
          schema: Schema, fields: list[int], slot: np.ndarray, live: np.ndarray,
          read: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """Keep one step's fields (the `slot` of each field of messages `live`) where the schema
    wants them; a singular field met twice makes its message unknown."""
    value, start, after = read
    counts = np.bincount(slot + 1, minlength=len(fields) + 1)
    for s in np.flatnonzero(counts[1:]).tolist():
        sel = slice(None) if counts[s + 1] == len(live) else np.flatnonzero(slot == s)
        owner, number = live[sel], fields[s]
        if number in repeated:
            repeated[number].append((owner, value[sel]))
            continue
        out.known[owner[out.present[number][owner]]] = False
        out.present[number][owner] = True
        if schema.singular[number] == WIRE_BYTES:
            out.start[number][owner], out.end[number][owner] = start[sel], after[sel]
        else:
            out.value[number][owner] = value[sel]


def _keys(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tag (field number * 8 + wire type) at each position, and its size; with a shortcut
    for the common step where every message has the same one-byte tag next."""
    first = buf[pos]
    if len(pos) and first[0] < 0x80 and (first == first[0]).all():
        return np.full(len(pos), int(first[0]), np.int64), np.ones(len(pos), np.int64)
    tag, size = _varints(buf, pos)
    return tag.astype(np.int64), size


def _values(buf: np.ndarray, wire: np.ndarray, at: np.ndarray,
            end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each field's value, payload start and end, given its wire type and where its value is."""
    value = np.zeros(len(at), np.uint64)
    start = at.copy()
    after = np.full(len(at), _MALFORMED, np.int64)
    counts = np.bincount(wire.view(np.uint8), minlength=8)
    for kind in np.flatnonzero(counts).tolist():
        sel = slice(None) if counts[kind] == len(at) else np.flatnonzero(wire == kind)
        if kind == WIRE_VARINT:
            value[sel], size = _varints(buf, at[sel])
            after[sel] = at[sel] + size
        elif kind == WIRE_BYTES:
            size_value, size = _varints(buf, at[sel])
            start[sel] = at[sel] + size
            after[sel] = start[sel] + _clipped(size_value)
        elif kind in (WIRE_FIXED64, WIRE_FIXED32):
            width = 8 if kind == WIRE_FIXED64 else 4
            where = np.arange(len(at))[sel]
            inside = where[at[where] + width <= end[where]]
            value[inside] = _fixed(buf, at[inside], width)
            after[sel] = at[sel] + width
    return value, start, after


def _run_end(buf: np.ndarray, after: np.ndarray, end: np.ndarray, tag: int) -> np.ndarray:
    """Where each run of back-to-back length-delimited fields with this one-byte tag ends."""
    after = after.copy()
    going = np.flatnonzero((after < end) & (buf[np.minimum(after, len(buf) - 1)] == tag))
    while len(going):
        size, size_len = _varints(buf, after[going] + 1)
        after[going] += 1 + size_len + _clipped(size)
        going = going[(after[going] < end[going]) &
                      (buf[np.minimum(after[going], len(buf) - 1)] == tag)]
    return after


def _clipped(size: np.ndarray) -> np.ndarray:
    """Lengths as int64, a huge (corrupt) one clipped so that it fails bounds checks."""
    clipped: np.ndarray = np.minimum(size, np.uint64(_MALFORMED)).astype(np.int64)
    return clipped


def packet_spans(buf: np.ndarray, begin: int, end: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Where the payload of each `Trace.packet` in buf[begin:end] starts and ends; None unless
    those bytes are exactly a sequence of packets."""
    starts, ends, stop = packet_chain(buf, begin, end)
    return (starts, ends) if stop == end else None


def packet_chain(buf: np.ndarray, begin: int, end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The whole `Trace.packet`s that follow one another from `begin` on: where each one's
    payload starts and ends, and where the chain stops (`end` where buf[begin:end] is exactly a
    sequence of packets; else the start of the first packet that runs past `end`, or the first
    byte that starts no packet)."""
    starts: list[np.ndarray] = [np.empty(0, np.int64)]
    ends: list[np.ndarray] = [np.empty(0, np.int64)]
    whole = True
    while begin < end and whole:
        window = min(end, begin + _WINDOW)
        payload_starts, payload_ends, whole = _frame(buf, begin, window, end)
        starts.append(payload_starts)
        ends.append(payload_ends)
        if len(payload_ends):
            begin = int(payload_ends[-1])
    return np.concatenate(starts), np.concatenate(ends), begin


def varint(buf: np.ndarray, pos: int) -> tuple[int, int]:
    """The varint at `pos`: its value and where it ends (past any buffer for one longer than 10
    bytes)."""
    value, length = _varints(buf, np.array([pos], np.int64))
    return int(value[0]), pos + int(length[0])


def _frame(buf: np.ndarray, begin: int, window: int,
           end: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The chain of packets that starts at `begin`, up to the first one that ends at or past
    `window` (or at `end`): the payloads of its whole packets, and whether it got there (else it
    stops at a packet that runs past `end`, or one followed by no packet).

    Every byte equal to the packet tag is a candidate packet start; each candidate's successor is
    the candidate where its packet would end. The packets are the candidates reached from
    `begin`, found by pointer jumping: log2(candidates) rounds of numpy gathers instead of a
    Python step per packet.
    """
    cand = begin + np.flatnonzero(buf[begin:window] == PACKET_TAG)
    if not len(cand) or cand[0] != begin:
        return np.empty(0, np.int64), np.empty(0, np.int64), False
    size, size_len = _varints(buf, cand + 1)
    payload = cand + 1 + size_len
    after = payload + _clipped(size)
    n = len(cand)
    exit_, dead = n, n + 1
    found = np.minimum(np.searchsorted(cand, after), n - 1)
    succ = np.where(cand[found] == after, found, dead)
    succ[(after >= window) & (after <= end)] = exit_
    # jumps[k][i]: the candidate 2**k packets after candidate i (exit and dead lead to themselves)
    jumps = [np.append(succ, [exit_, dead])]
    while 1 << len(jumps) <= n:
        jumps.append(jumps[-1][jumps[-1]])
    path = np.zeros(1, np.int64)
    for jump in reversed(jumps):
        path = np.stack([path, jump[path]], 1).ravel()
    on_path = path[path < n]
    if len(on_path) < len(path) and path[len(on_path)] == exit_:
        return payload[on_path], after[on_path], True
    ends = after[on_path]
    whole = on_path[(ends > cand[on_path]) & (ends <= end)]  # a corrupt length wraps past 2**63
    return payload[whole], after[whole], False
