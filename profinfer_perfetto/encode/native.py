"""The compiled renderer, where the install built it (profinfer_perfetto/compiled.py): render.c
as _render.so beside this file. Where it is absent (not built, no C compiler) numpy renders the
same bytes (encode/perfetto.py, wire.py)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from profinfer_perfetto import compiled

LIBRARY = Path(__file__).with_name("_render.so")
"""Where the install builds render.c."""
ABI = 5
"""render.c's render_abi(): the functions and arguments this module calls."""

_INT64 = ctypes.c_int64
_POINTER = ctypes.c_void_p
Strings = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Byte strings in one buffer: the buffer, each entry's start in it and its size."""


class _Strings(ctypes.Structure):
    """render.c's struct strings."""

    _fields_ = [("bytes", _POINTER), ("bytes_size", _INT64), ("count", _INT64),
                ("start", _POINTER), ("size", _POINTER)]


class _Events(ctypes.Structure):
    """render.c's struct events."""

    _fields_ = [("rows", _INT64), ("counters", _INT64), ("counter_type", _INT64),
                ("tags", _Strings), ("prefix", _Strings), ("ts", _POINTER), ("track", _POINTER),
                ("name", _POINTER), ("args", _POINTER), ("type", _POINTER), ("value", _POINTER),
                ("desc", _Strings), ("flow_end", _POINTER * 2), ("flow_id", _POINTER * 2),
                ("count", _POINTER),
                ("counter_track", _POINTER), ("counter_value", _POINTER),
                ("sampled", _POINTER), ("tracks", _INT64), ("seq", _POINTER), ("uuid", _POINTER),
                ("own", _POINTER), ("head", _Strings), ("last", _POINTER),
                ("arg_sets", _Strings)]


@dataclass
class Tables:
    """A layout's events as render_events reads them (encode/perfetto.py's _Events says what
    each holds)."""

    tags: list[bytes]
    """The tags render.c writes, in its order."""
    prefixes: list[bytes]
    """Each counter's annotation: its name and value tag."""
    counter_type: int
    ts: np.ndarray
    track: np.ndarray
    name: np.ndarray
    args: np.ndarray
    type: np.ndarray
    value: np.ndarray
    desc: Strings
    """By row."""
    flows: np.ndarray
    """(flows, 3): each flow's id, the row it starts at and the row it ends at."""
    count: np.ndarray
    """(rows, counters), as counter_track, counter_value and sampled."""
    counter_track: np.ndarray
    counter_value: np.ndarray
    sampled: np.ndarray
    seq: np.ndarray
    """By track, as uuid and own."""
    uuid: np.ndarray
    own: np.ndarray
    head: Strings
    """By sequence, as last (which moves on as packets are written)."""
    last: np.ndarray
    arg_sets: Strings


class Events:
    """A layout's tables handed to render.c, for its packets a chunk of rows at a time."""

    def __init__(self, renderer: Renderer, tables: Tables) -> None:
        self._function = renderer.render_events
        self._keep: list[np.ndarray] = []  # the buffers the struct points into
        self.last: np.ndarray = np.ascontiguousarray(tables.last, np.int64)
        """Each sequence's last packet time, as written so far."""
        t = tables
        if not _fits(t):
            raise AssertionError("the tables of one layout differ in their rows")
        flows = [renderer.flows(t.flows[:, 0], t.flows[:, k], len(t.ts)) for k in (1, 2)]
        self._events = _Events(
            len(t.ts), t.count.shape[1], t.counter_type, self._joined(t.tags),
            self._joined(t.prefixes), self._at(t.ts), self._at(t.track), self._at(t.name),
            self._at(t.args), self._at(t.type, np.int8), self._at(t.value, "<f8"),
            self._strings(t.desc), (_POINTER * 2)(*(self._at(end) for end, _ in flows)),
            (_POINTER * 2)(*(self._at(ids) for _, ids in flows)),
            self._at(t.count), self._at(t.counter_track), self._at(t.counter_value),
            self._at(t.sampled, np.uint8), len(t.seq), self._at(t.seq), self._at(t.uuid),
            self._at(t.own, np.uint8), self._strings(t.head), self._at(self.last),
            self._strings(t.arg_sets))
        self._out = np.empty(0, np.uint8)

    def _at(self, values: np.ndarray, dtype: npt.DTypeLike = np.int64) -> int:
        buffer: np.ndarray = np.ascontiguousarray(values, dtype)
        self._keep.append(buffer)
        return int(buffer.ctypes.data)

    def _strings(self, strings: Strings) -> _Strings:
        source, start, size = strings
        return _Strings(self._at(source, np.uint8), len(source), len(size), self._at(start),
                        self._at(size))

    def _joined(self, parts: list[bytes]) -> _Strings:
        size = np.array([len(p) for p in parts], np.int64)
        return self._strings((np.frombuffer(b"".join(parts), np.uint8), np.cumsum(size) - size,
                              size))

    def render(self, rows: np.ndarray) -> bytes:
        """The packets of `rows` (layout rows, in writing order) back to back."""
        rows = np.ascontiguousarray(rows, np.int64)
        last = self.last.copy()
        while True:
            if len(self._out) < 64 * len(rows):
                self._out = np.empty(64 * len(rows), np.uint8)
            size = self._function(self._out.ctypes.data, self._out.size, rows.ctypes.data,
                                   len(rows), ctypes.byref(self._events))
            if size >= 0:
                return self._out[:size].tobytes()
            if size != -1:
                raise AssertionError("an event refers past one of its tables")
            self.last[:] = last  # did not fit: again, into twice the room
            self._out = np.empty(2 * len(self._out), np.uint8)


class Renderer:
    """render.c's functions, loaded from a built library."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._piece = library.render_piece
        self._piece.argtypes = [_POINTER, _INT64, _POINTER, _POINTER, _INT64, _POINTER, _INT64,
                                _POINTER, _INT64, _POINTER, _INT64]
        self._piece.restype = ctypes.c_int
        self.render_events = library.render_events
        self.render_events.argtypes = [_POINTER, _INT64, _POINTER, _INT64,
                                       ctypes.POINTER(_Events)]
        self.render_events.restype = _INT64
        self._flows = library.render_flows
        self._flows.argtypes = [_POINTER, _POINTER, _POINTER, _POINTER, _INT64, _INT64]
        self._flows.restype = ctypes.c_int
        self._changes = library.render_changes
        self._changes.argtypes = [_POINTER, _POINTER, _POINTER, _INT64, _INT64, _INT64, _POINTER,
                                  _POINTER]
        self._changes.restype = ctypes.c_int

    def piece(self, out: np.ndarray, next_free: np.ndarray, source: np.ndarray,
              at: np.ndarray | None, start: np.ndarray, length: np.ndarray) -> None:
        """Copy a piece's bytes onto its rows (Pieces.render); `next_free` (int64) moves on."""
        source = np.ascontiguousarray(source, np.uint8)
        rows = len(start)
        if at is not None:
            at = np.ascontiguousarray(at, np.int64)
        start, start_step = _steps(start)
        length, length_step = _steps(length)
        failed = self._piece(out.ctypes.data, out.size, next_free.ctypes.data,
                             source.ctypes.data, source.size,
                             None if at is None else at.ctypes.data, rows,
                             start.ctypes.data, start_step, length.ctypes.data, length_step)
        if failed:
            raise AssertionError("a piece reaches past its source or the output")

    def changes(self, track: np.ndarray, value: np.ndarray, tracks: int) -> np.ndarray:
        """Which counter samples to write (encode/perfetto.py's _changes; `tracks`: how many
        tracks there are)."""
        track = np.ascontiguousarray(track, np.int64)
        value = np.ascontiguousarray(value, np.int64)
        sampled = np.empty(track.shape, bool)
        last = np.zeros(tracks * track.shape[1], np.int64)
        seen = np.zeros(tracks * track.shape[1], np.uint8)
        if self._changes(sampled.ctypes.data, track.ctypes.data, value.ctypes.data,
                         track.shape[0], track.shape[1], tracks, last.ctypes.data,
                         seen.ctypes.data):
            raise AssertionError("a counter sample on a track that is not one")
        return sampled

    def flows(self, ids: np.ndarray, at: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the flows at each of `rows` rows (flow i at row at[i]), by id within a row:
        where each row's end, and the ids in row order."""
        ids = np.ascontiguousarray(ids, np.int64)
        at = np.ascontiguousarray(at, np.int64)
        end, ordered = np.empty(rows, np.int64), np.empty(len(ids), np.int64)
        if self._flows(end.ctypes.data, ordered.ctypes.data, ids.ctypes.data, at.ctypes.data,
                       len(ids), rows):
            raise AssertionError("a flow at a row that is not one")
        return end, ordered

    def events(self, tables: Tables) -> Events:
        """A layout's events, to render a chunk of rows at a time."""
        return Events(self, tables)


def _fits(t: Tables) -> bool:
    """Whether the tables hold the rows, tracks and sequences render.c reads."""
    rows, counters = len(t.ts), (len(t.ts), len(t.prefixes))
    return ({len(a) for a in (t.track, t.name, t.args, t.type, t.value, t.desc[1], t.desc[2])}
            == {rows} and {len(t.uuid), len(t.own)} == {len(t.seq)}
            and {len(t.last), len(t.head[1]), len(t.head[2])} == {len(t.last)}
            and {a.shape for a in (t.count, t.counter_track, t.counter_value, t.sampled)}
            == {counters})


def _steps(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Int64 values as render.c reads them: a buffer and the step between rows (0: one value
    for all, as np.broadcast_to gives it)."""
    if values.dtype == np.int64 and values.strides in ((0,), (8,)):
        return values, values.strides[0] // 8
    return np.ascontiguousarray(values, np.int64), 1


def load(path: Path = LIBRARY) -> Renderer | None:
    """The renderer built at `path`, or None where there is none, it does not load or it was
    built from another version of render.c (compiled.load)."""
    library = compiled.load(path, "render_abi", ABI)
    return None if library is None else Renderer(library)


RENDERER = load()
"""The compiled renderer of this install, if it has one."""
