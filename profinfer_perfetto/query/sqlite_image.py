"""An SQLite database file built with numpy, for `sqlite3.Connection.deserialize`: tables of
millions of rows without a Python step (or a bound parameter) per row.

It writes what the SQLite file format (https://www.sqlite.org/fileformat.html) needs for rowid
tables read and written afterwards like any other: the 100-byte header, the schema table on
page 1, and per table a b-tree of leaf pages (its rows, rowids 0, 1, 2, ...) under interior
pages. No freelist, no overflow pages: a table with a row too large for a quarter of a page is
left empty, for its rows to be inserted with SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

PAGE = 4096
_LEAF, _INTERIOR = 0x0D, 0x05
_HEADER = 100
"""Bytes of the database header, before page 1's b-tree header."""
_FANOUT = 250
"""Children of an interior page: 250 cells of at most 4 + 9 bytes and their 2-byte pointers
fill less than a page."""
_SQLITE_VERSION = 3040001
_BLOCK = 1 << 16
"""Rows laid out at once (bounds the padded matrices)."""


Field = tuple[np.ndarray, np.ndarray]
"""Bytes of one field of each row: an (n, width) matrix, left-aligned, and each one's length."""


@dataclass
class Column:
    """A column's values: int64 ("int"), float64 ("real", NaN stored as NULL) or, for
    "text", indexes into `strings` (UTF-8)."""

    kind: str
    values: np.ndarray
    null: np.ndarray | None = None
    """True where the value is NULL."""
    strings: list[bytes] | None = None


@dataclass
class Table:
    name: str
    sql: str
    """Its CREATE TABLE statement; the first column is `id INTEGER PRIMARY KEY` (the rowid)."""
    columns: list[Column] | None = None
    """The other columns, in order; None leaves the table empty."""


def _varints(values: np.ndarray) -> Field:
    """SQLite varints (big-endian groups of 7 bits, the high bit set on all but the last) of
    values in [0, 2**56), left-aligned."""
    if not len(values) or int(values.max()) < 0x80:  # the usual case: one byte each
        return values.astype(np.uint8)[:, None], np.ones(len(values), np.int64)
    v = values.astype(np.uint64)
    length = np.ones(len(v), np.int64)
    for bits in range(7, 56, 7):
        over = v >= np.uint64(1 << bits)
        if not over.any():
            break
        length += over
    width = int(length.max(initial=1))
    out = np.empty((len(v), width), np.uint8)
    for k in range(width):
        shift = np.maximum(length - 1 - k, 0).astype(np.uint64) * np.uint64(7)
        more = np.where(k < length - 1, 0x80, 0).astype(np.uint8)
        out[:, k] = ((v >> shift) & np.uint64(0x7F)).astype(np.uint8) | more
    return out, length


def _big_endian(values: np.ndarray) -> np.ndarray:
    """8-byte big-endian forms, one row each."""
    return np.ascontiguousarray(values).astype(values.dtype.newbyteorder(">")).view(
        np.uint8).reshape(-1, 8)


def _int_types(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each integer's serial type (8 and 9 for 0 and 1, else 1 to 6 by its width) and width
    in bytes."""
    magnitude = values ^ (values >> 63)  # a negative number's width is that of its complement
    serial = np.ones(len(values), np.int64)
    for bits in (7, 15, 23, 31, 47):
        serial += magnitude >= (1 << bits)
    width = np.array([0, 1, 2, 3, 4, 6, 8, 0, 0, 0])
    serial[(values == 0) | (values == 1)] = 8 + values[(values == 0) | (values == 1)]
    return serial, width[serial]


def _leading(values: np.ndarray, width: np.ndarray) -> Field:
    """The low `width` bytes of each 64-bit value, big-endian, left-aligned: the value shifted
    up by the bytes left out, then its bytes from the top."""
    shifted = values.view(np.uint64) << ((8 - width).astype(np.uint64) * np.uint64(8))
    return _big_endian(shifted), width


def _text_table(strings: list[bytes]) -> Field:
    """Distinct strings as a padded matrix, and their lengths."""
    lengths = np.array([len(s) for s in strings], np.int64)
    table = np.zeros((len(strings), int(lengths.max(initial=0))), np.uint8)
    for i, text in enumerate(strings):
        table[i, :len(text)] = np.frombuffer(text, np.uint8)
    return table, lengths


def _value(c: Column, a: int, b: int, text: Field | None) -> tuple[np.ndarray, Field]:
    """A column's serial type in rows a..b-1, and its values there as a field (`text`: the
    column's strings as a table)."""
    null = np.zeros(b - a, bool) if c.null is None else c.null[a:b]
    if c.kind == "int":
        values = c.values[a:b].astype(np.int64)
        serial, width = _int_types(values)
        field = _leading(values, width)
    elif c.kind == "real":
        null = null | np.isnan(c.values[a:b])
        serial = np.full(b - a, 7)
        field = _big_endian(c.values[a:b].astype(np.float64)), np.full(b - a, 8)
    else:
        assert text is not None
        table, lengths = text
        serial = 13 + 2 * lengths[c.values[a:b]]
        field = table[c.values[a:b]], lengths[c.values[a:b]]
    length = np.where(null, 0, field[1])
    # only as many bytes wide as the longest value: less to pad and pick from
    return np.where(null, 0, serial), (field[0][:, :int(length.max(initial=0))], length)


Block = tuple[np.ndarray, np.ndarray]
"""A block of rows' cells, back to back, and each cell's size."""


def _cells(columns: list[Column] | None, pool: Executor) -> Callable[[], list[Block]]:
    """Each row's leaf cell (payload size, rowid, record: a header of serial types, then the
    values; the `id` column is NULL there, the rowid is its value), to be had from the
    returned call, a block of rows at a time. The blocks are laid out on the pool: small
    temporaries, reused and cached, and work for every thread."""
    rows = len(columns[0].values) if columns else 0
    if not columns:
        return list
    texts = [_text_table(c.strings) if c.strings is not None else None for c in columns]
    blocks = [pool.submit(_block_cells, columns, texts, a, min(a + _BLOCK, rows))
              for a in range(0, rows, _BLOCK)]
    return lambda: [block.result() for block in blocks]


def _block_cells(columns: list[Column], texts: list[Field | None], a: int, b: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    serials, values = zip(*(_value(c, a, b, t) for c, t in zip(columns, texts, strict=True)),
                          strict=True)
    types = [_varints(s) for s in serials]
    header = _total([length for _, length in types]) + 2  # itself and the NULL id
    assert int(header.max(initial=0)) < 128  # so its own size takes one byte
    payload = header + _total([length for _, length in values])
    one = np.ones(b - a, np.int64)
    fields = [_varints(payload), _varints(np.arange(a, b)), (header[:, None], one),
              (np.zeros((b - a, 1), np.uint8), one), *types, *values]
    return _concatenated(fields), _total([length for _, length in fields])


def _total(lengths: list[np.ndarray]) -> np.ndarray:
    """Element-wise sum of arrays."""
    total = lengths[0].copy()
    for length in lengths[1:]:
        total += length
    return total


def _concatenated(fields: list[Field]) -> np.ndarray:
    """The fields of each row back to back, rows in order: the padded fields side by side,
    their valid bytes picked in row-major order."""
    padded = np.hstack([m.astype(np.uint8, copy=False) for m, _ in fields])
    valid = np.hstack([np.arange(m.shape[1]) < n[:, None] for m, n in fields])
    return padded[valid]


MAX_CELL = (PAGE - 8) // 4 - 2
"""The largest cell stored: at least two fit a page, far from needing overflow pages."""


def _paging(sizes: np.ndarray) -> np.ndarray:
    """The leaf page (0, 1, ...) of each cell, in rowid order.

    A page is filled up to `room` bytes of cells and pointers counted from its first cell, so
    the cell that crosses that line still fits.
    """
    if not len(sizes):
        return np.empty(0, np.int64)
    room = PAGE - 8 - (int(sizes.max()) + 2)
    crossed = (np.cumsum(sizes + 2) - 1) // room
    return np.cumsum(np.diff(crossed, prepend=crossed[0]) > 0)


def _leaves(out: np.ndarray, cells: np.ndarray, sizes: np.ndarray, page_of: np.ndarray
            ) -> list[int]:
    """Write the leaf pages (into `out`, PAGE bytes each), each page's cells at its end in
    order; return each page's largest rowid."""
    pages = len(out) // PAGE
    first = np.searchsorted(page_of, np.arange(pages))
    count = np.diff(np.append(first, len(sizes)))
    content = PAGE - np.bincount(page_of, sizes, minlength=pages).astype(np.int64)
    offset = np.cumsum(sizes) - sizes
    base = np.arange(pages) * PAGE
    out[base] = _LEAF
    out[base + 3], out[base + 4] = count >> 8, count & 0xFF
    out[base + 5], out[base + 6] = content >> 8, content & 0xFF
    if len(sizes):
        pointer = (content - offset[first])[page_of] + offset
        at = page_of * PAGE + 8 + 2 * (np.arange(len(sizes)) - first[page_of])
        out[at], out[at + 1] = pointer >> 8, pointer & 0xFF
    bounds = np.append(offset[first[count > 0]], len(cells)).tolist()
    page_ends = ((np.flatnonzero(count) + 1) * PAGE).tolist()
    target, source = out.data, cells.data  # memoryview slices: the cheapest copy per page
    for end, a, b in zip(page_ends, bounds[:-1], bounds[1:], strict=True):
        target[end - (b - a):end] = source[a:b]
    return (np.append(first[1:], len(sizes)) - 1).tolist()


def _interior_pages(children: int) -> int:
    """Interior pages above that many leaves."""
    total = 0
    while children > 1:
        children = -(-children // _FANOUT)
        total += children
    return total


def _varint(n: int) -> bytes:
    """One SQLite varint (n < 2**56)."""
    groups = [n & 0x7F]
    while n > 0x7F:
        n >>= 7
        groups.append(0x80 | n & 0x7F)
    return bytes(reversed(groups))


def _btree_page(kind: int, cells: list[bytes], right: int = 0, offset: int = 0) -> bytes:
    """One b-tree page (`offset`: where its header starts, 100 on page 1) with its cells at
    the end, in order."""
    header = 12 if kind == _INTERIOR else 8
    content = PAGE - sum(map(len, cells))
    pointers, at = bytearray(), content
    for cell in cells:
        pointers += at.to_bytes(2, "big")
        at += len(cell)
    head = bytes([kind, 0, 0]) + len(cells).to_bytes(2, "big") + content.to_bytes(2, "big") \
        + b"\0" + (right.to_bytes(4, "big") if kind == _INTERIOR else b"")
    used = offset + header + len(pointers)
    assert used <= content
    return bytes(offset) + head + pointers + bytes(content - used) + b"".join(cells)


def _interior(children: list[int], keys: list[int]) -> tuple[list[bytes], list[int]]:
    """A level of interior pages over `children` (each with its largest rowid): the pages,
    and each one's largest rowid. The children are shared out evenly (at most _FANOUT a page),
    so no page has a lone child: SQLite reads an interior page without a cell as corrupt."""
    pages, last = [], []
    count = -(-len(children) // _FANOUT)
    bounds = [len(children) * i // count for i in range(count + 1)]
    for a, b in pairwise(bounds):
        kids, top = children[a:b], keys[a:b]
        cells = [k.to_bytes(4, "big") + _varint(key) for k, key in zip(kids[:-1], top[:-1],
                                                                        strict=True)]
        pages.append(_btree_page(_INTERIOR, cells, right=kids[-1]))
        last.append(top[-1])
    return pages, last


def _schema_record(values: list[str | int]) -> bytes:
    types, body = b"", b""
    for v in values:
        if isinstance(v, int):
            types += _varint(4)
            body += v.to_bytes(4, "big")
        else:
            text = v.encode()
            types += _varint(13 + 2 * len(text))
            body += text
    header = _varint(len(types) + 1) + types
    return header + body


def _database_header(pages: int) -> bytes:
    head = bytearray(_HEADER)
    head[:16] = b"SQLite format 3\0"
    head[16:18] = PAGE.to_bytes(2, "big")
    head[18:24] = bytes([1, 1, 0, 64, 32, 32])
    head[24:28] = (1).to_bytes(4, "big")  # file change counter
    head[28:32] = pages.to_bytes(4, "big")
    head[40:44] = (1).to_bytes(4, "big")  # schema cookie
    head[44:48] = (4).to_bytes(4, "big")  # schema format
    head[56:60] = (1).to_bytes(4, "big")  # UTF-8
    head[92:96] = (1).to_bytes(4, "big")  # the page count is valid for change 1
    head[96:100] = _SQLITE_VERSION.to_bytes(4, "big")
    return bytes(head)


def image(tables: list[Table], pool: Executor) -> tuple[np.ndarray, list[str]]:
    """A database with these tables (its bytes), and the names of those left empty: rows too
    large to store here. The tables' cells are laid out on the pool, side by side; then each
    table's pages are written in place: its leaves (a block of rows starts a page), then the
    interior levels, the root last."""
    laid_out = [_cells(t.columns, pool) for t in tables]
    plans, left, pages = [], [], 1
    for t, blocks_of in zip(tables, laid_out, strict=True):
        blocks = blocks_of()
        if any(len(sizes) and sizes.max() > MAX_CELL for _, sizes in blocks):
            left.append(t.name)
            blocks = []
        paging = [_paging(sizes) for _, sizes in blocks]
        leaves = max(sum(int(page_of[-1]) + 1 for page_of in paging), 1)  # empty: one leaf
        plans.append((blocks, paging, pages + 1))
        pages += leaves + _interior_pages(leaves)
    out = np.zeros(pages * PAGE, np.uint8)
    roots = [_write_table(out, *plan) for plan in plans]
    schema = [_schema_record(["table", t.name, t.name, root, t.sql])
              for t, root in zip(tables, roots, strict=True)]
    rows = [_varint(len(r)) + _varint(i) + r for i, r in enumerate(schema, start=1)]
    page1 = _database_header(pages) + _btree_page(_LEAF, rows, offset=_HEADER)[_HEADER:]
    out[:PAGE] = np.frombuffer(page1, np.uint8)
    return out, left


def _write_table(out: np.ndarray, blocks: list[Block], paging: list[np.ndarray],
                 first: int) -> int:
    """Write a table's b-tree from page `first` on (its leaves, then the levels above); return
    its root page."""
    keys, page, rowid = [], first, 0
    for (cells, sizes), page_of in zip(blocks, paging, strict=True):
        count = int(page_of[-1]) + 1
        area = out[(page - 1) * PAGE:(page - 1 + count) * PAGE]
        keys += [rowid + k for k in _leaves(area, cells, sizes, page_of)]
        page, rowid = page + count, rowid + len(sizes)
    if not blocks:  # an empty table: one empty leaf
        page += 1
        keys = _leaves(out[(first - 1) * PAGE:first * PAGE], np.empty(0, np.uint8),
                       np.empty(0, np.int64), np.empty(0, np.int64))
    numbers = list(range(first, page))
    while len(numbers) > 1:
        level, keys = _interior(numbers, keys)
        numbers = list(range(numbers[-1] + 1, numbers[-1] + 1 + len(level)))
        for number, data in zip(numbers, level, strict=True):
            out[(number - 1) * PAGE:number * PAGE] = np.frombuffer(data, np.uint8)
    return numbers[0]
