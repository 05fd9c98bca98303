"""Protobuf wire format for many messages at once, with numpy: no Python object per message.

A message is a row of byte pieces (a field's tag and value, or a pre-serialized blob); each
piece has, on the rows it is on (all, or a few), a start in a source buffer and a length.
`Pieces.render` writes the rows back to back, a piece at a time: the j-th byte of one piece on
every row where it has one in one numpy step, so the work goes with the bytes, and a piece on
few rows costs little.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from profinfer_perfetto.encode import native

WIRE_VARINT, WIRE_FIXED64, WIRE_BYTES = 0, 1, 2


_BYTE = [bytes([i]) for i in range(0x80)]
"""The varints of one byte."""


def varint(n: int) -> bytes:
    """One varint; negative numbers as their two's complement (10 bytes), as protobuf does."""
    if 0 <= n < 0x80:
        return _BYTE[n]
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


_FEW = 16
"""Rows few enough that a slice per row costs less than a numpy step per byte."""

_Piece = tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]
"""A source buffer; the rows the piece is on (None: all, in order); its start in the source
and its length on each of them."""


class Pieces:
    """The byte pieces of `rows` messages, in field order."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._pieces: list[_Piece] = []

    def add(self, source: np.ndarray, start: npt.ArrayLike, length: npt.ArrayLike,
            at: np.ndarray | None = None, front: bool = False) -> None:
        """Bytes `source[start:start + length]` on each row, or on the rows `at` (distinct
        row numbers; `start` and `length` one per row of it); a length of 0 leaves it out."""
        n = self.rows if at is None else len(at)
        length = np.broadcast_to(np.asarray(length, np.int64), n)
        if not length.any():
            return
        piece = (source, at, np.broadcast_to(np.asarray(start, np.int64), n), length)
        if front:
            self._pieces.insert(0, piece)
        else:
            self._pieces.append(piece)

    def constant(self, data: bytes, at: np.ndarray | None = None, front: bool = False) -> None:
        self.add(np.frombuffer(data, np.uint8), 0, len(data), at, front)

    def varint(self, field_tag: bytes, values: npt.ArrayLike, at: np.ndarray | None = None,
               front: bool = False) -> None:
        """A varint field (no tag for b""); `values` one per row, or per row of `at`."""
        n = self.rows if at is None else len(at)
        if not n:
            return
        matrix, length = varints(np.broadcast_to(np.asarray(values), n), field_tag)
        self.add(matrix.ravel(), np.arange(n) * matrix.shape[1], length, at, front)

    def fixed64(self, field_tag: bytes, values: np.ndarray, at: np.ndarray) -> None:
        """A fixed64 or double field on the rows `at`; `values` are 8-byte numbers, one each."""
        if not len(at):
            return
        raw = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<"))
        head = np.broadcast_to(np.frombuffer(field_tag, np.uint8), (len(at), len(field_tag)))
        matrix = np.hstack([head, raw.view(np.uint8).reshape(-1, 8)])
        width = matrix.shape[1]
        self.add(matrix.ravel(), np.arange(len(at)) * width, width, at)

    def sizes(self) -> np.ndarray:
        """Each row's length so far."""
        total = np.zeros(self.rows, np.int64)
        for _, at, _, length in self._pieces:
            if at is None:
                total += length
            else:
                total[at] += length
        return total

    def render(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows' bytes back to back, and where each row ends (with the compiled renderer
        where this install has one: the same bytes)."""
        size = self.sizes()
        row_end = np.cumsum(size)
        out = np.empty(int(row_end[-1]) if self.rows else 0, np.uint8)
        free = row_end - size  # where each row's next piece goes
        renderer = native.RENDERER
        for source, at, start, length in self._pieces:
            if renderer is not None:
                renderer.piece(out, free, source, at, start, length)
                continue
            if at is None:
                dest = free.copy()
                free += length
            else:
                dest = free[at]
                free[at] += length
            # Byte j of the piece on every row that has more than j bytes of it, j = 0, 1, ...
            # (each row's bytes `shift` apart in the source and the output); the last few rows'
            # rest (a long blob's tail) as slices.
            end, shift = dest + length, start - dest
            while len(dest) > _FEW:
                going = dest < end
                if not going.all():
                    dest, end, shift = dest[going], end[going], shift[going]
                out[dest] = source[dest + shift]
                dest += 1
            for d, e, k in zip(dest.tolist(), end.tolist(), shift.tolist(), strict=True):
                out[d:e] = source[d + k:e + k]
        return out, row_end
