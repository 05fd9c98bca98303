"""Protobuf wire format for many messages at once, with numpy: no Python object per message.

A message is a row of byte pieces (a field's tag and value, or a pre-serialized blob); each
piece has, per row, a start in a source buffer and a length (0 leaves it out). `Pieces.render`
concatenates every row's pieces in one gather.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

WIRE_VARINT, WIRE_FIXED64, WIRE_BYTES = 0, 1, 2


def varint(n: int) -> bytes:
    """One varint; negative numbers as their two's complement (10 bytes), as protobuf does."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag(message: Any, name: str) -> bytes:
    """The wire tag of a field of a generated message class."""
    f = message.DESCRIPTOR.fields_by_name[name]
    wire = {f.TYPE_DOUBLE: WIRE_FIXED64, f.TYPE_FIXED64: WIRE_FIXED64, f.TYPE_MESSAGE: WIRE_BYTES,
            f.TYPE_STRING: WIRE_BYTES, f.TYPE_BYTES: WIRE_BYTES}.get(f.type, WIRE_VARINT)
    return varint(f.number << 3 | wire)


def field(field_tag: bytes, body: bytes) -> bytes:
    """A length-delimited field."""
    return field_tag + varint(len(body)) + body


def varints(values: npt.ArrayLike, prefix: bytes = b"") -> tuple[np.ndarray, np.ndarray]:
    """Each value as a varint after `prefix` (a field's tag): a byte matrix, one row a value,
    left-aligned and as wide as the widest needs, and each row's length."""
    rest = np.asarray(values).astype(np.int64).view(np.uint64)
    top = int(rest.max()) if len(rest) else 0
    rest = rest.astype(np.uint32 if top < 1 << 32 else np.uint64)  # a copy, as narrow as can be
    width = max(1, -(-top.bit_length() // 7))
    head = len(prefix)
    out = np.empty((len(rest), head + width), np.uint8)
    out[:, :head] = np.frombuffer(prefix, np.uint8)
    length = np.full(len(rest), head + 1, np.int64)
    seven = rest.dtype.type(7)
    for i in range(head, head + width):
        low = rest.astype(np.uint8) & 0x7F
        rest >>= seven
        more = rest != 0
        out[:, i] = low | (more.view(np.uint8) << 7)
        length += more
    return out, length


def varint_sizes(values: npt.ArrayLike) -> np.ndarray:
    """How many bytes each value takes as a varint."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    size = np.ones(len(v), np.int64)
    for bits in range(7, 64, 7):
        size += v >= np.uint64(1 << bits)
    return size


class Pieces:
    """The byte pieces of `rows` messages, in field order."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, source: np.ndarray, start: npt.ArrayLike, length: npt.ArrayLike,
            front: bool = False) -> None:
        """Bytes `source[start:start + length]` on each row (length 0: none; a piece on no row
        is left out)."""
        piece = (source, np.broadcast_to(np.asarray(start, np.int64), self.rows),
                 np.broadcast_to(np.asarray(length, np.int64), self.rows))
        if not piece[2].any():
            return
        if front:
            self._pieces.insert(0, piece)
        else:
            self._pieces.append(piece)

    def constant(self, data: bytes, on: npt.ArrayLike = True, front: bool = False) -> None:
        self.add(np.frombuffer(data, np.uint8), 0, np.where(on, len(data), 0), front)

    def varint(self, field_tag: bytes, values: npt.ArrayLike, on: npt.ArrayLike = True,
               front: bool = False) -> None:
        """A varint field (no tag for b"")."""
        if not np.any(on):
            return
        matrix, length = varints(np.broadcast_to(np.asarray(values), self.rows), field_tag)
        width = matrix.shape[1]
        self.add(matrix.ravel(), np.arange(self.rows) * width, np.where(on, length, 0), front)

    def fixed64(self, field_tag: bytes, values: np.ndarray, on: npt.ArrayLike) -> None:
        """A fixed64 or double field; `values` are 8-byte numbers."""
        if not np.any(on):
            return
        raw = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<"))
        head = np.broadcast_to(np.frombuffer(field_tag, np.uint8), (self.rows, len(field_tag)))
        matrix = np.hstack([head, raw.view(np.uint8).reshape(-1, 8)])
        width = matrix.shape[1]
        self.add(matrix.ravel(), np.arange(self.rows) * width, np.where(on, width, 0))

    def sizes(self) -> np.ndarray:
        """Each row's length so far."""
        total = np.zeros(self.rows, np.int64)
        for _, _, length in self._pieces:
            total += length
        return total

    def render(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows' bytes back to back, and where each row ends."""
        bases = np.cumsum([0] + [len(p[0]) for p in self._pieces[:-1]])
        source = np.concatenate([p[0] for p in self._pieces])
        # Each row's pieces (start in `source`, length), row by row, then the pieces that are
        # there (length > 0) in that order: the segments of the output.
        start = np.empty((self.rows, len(self._pieces)), np.int32)
        length = np.empty((self.rows, len(self._pieces)), np.int32)
        for i, (p, base) in enumerate(zip(self._pieces, bases, strict=True)):
            np.add(p[1], base, out=start[:, i], casting="unsafe")
            length[:, i] = p[2]
        row_end = np.cumsum(length.sum(1, dtype=np.int64))
        on = length > 0
        seg_start, seg_length = start[on], length[on]
        # Each output byte's place in `source`: one past the byte before's, but where a
        # segment starts.
        step = np.ones(int(row_end[-1]) if self.rows else 0, np.int32)
        if len(step):
            seg_out = np.cumsum(seg_length, dtype=np.int32) - seg_length
            step[seg_out[1:]] = seg_start[1:] - (seg_start[:-1] + seg_length[:-1] - 1)
            step[0] = seg_start[0]
        return source[np.cumsum(step, dtype=np.int32)], row_end
