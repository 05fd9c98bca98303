"""The compiled renderer, where scripts/setup.sh built it: render.c as _render.so beside this
file, called through ctypes over numpy buffers (no Python C API, nothing more to install).
Where it is absent (not built, no C compiler) wire.py copies the same bytes with numpy."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

LIBRARY = Path(__file__).with_name("_render.so")
"""Where scripts/setup.sh builds render.c."""
ABI = 1
"""render.c's render_abi(): the functions and arguments this module calls."""

_INT64 = ctypes.c_int64
_POINTER = ctypes.c_void_p
_Range = tuple[np.ndarray, np.ndarray, np.ndarray]
"""A source buffer, and each row's start in it and size."""


class _Packets(ctypes.Structure):
    """render.c's struct packets."""

    _fields_ = [("counters", _INT64), ("tags", _POINTER), ("tag_end", _POINTER),
                ("delta", _POINTER), ("source", _POINTER * 4), ("start", _POINTER * 4),
                ("size", _POINTER * 4), ("prefix", _POINTER), ("prefix_end", _POINTER),
                ("count", _POINTER), ("is_counter", _POINTER), ("value", _POINTER),
                ("track", _POINTER), ("sampled", _POINTER), ("sample", _POINTER)]


class Renderer:
    """render.c's functions, loaded from a built library."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._piece = library.render_piece
        self._piece.argtypes = [_POINTER, _INT64, _POINTER, _POINTER, _INT64, _POINTER, _INT64,
                                _POINTER, _INT64, _POINTER, _INT64]
        self._piece.restype = ctypes.c_int
        self._packets = library.render_packets
        self._packets.argtypes = [_POINTER, _INT64, _INT64, ctypes.POINTER(_Packets),
                                      _POINTER]
        self._packets.restype = _INT64

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

    def packets(self, tags: list[bytes], delta: np.ndarray, ranges: list[_Range],
                prefixes: list[bytes], count: np.ndarray, is_counter: np.ndarray,
                value: np.ndarray, track: np.ndarray, sampled: np.ndarray,
                sample: np.ndarray) -> bytes:
        """Rows' packets back to back (encode/perfetto.py's _Events.rendered says what each
        argument holds; ranges: the sequence heads, bodies, flow ids and terminating ones)."""
        keep = []  # the buffers the struct points into, alive until the calls return

        def at(values: np.ndarray, dtype: npt.DTypeLike) -> int:
            buffer: np.ndarray = np.ascontiguousarray(values, dtype)
            keep.append(buffer)
            return int(buffer.ctypes.data)

        def joined(parts: list[bytes]) -> tuple[int, int]:
            return (at(np.frombuffer(b"".join(parts) or b"\0", np.uint8), np.uint8),
                    at(np.cumsum([len(t) for t in parts], dtype=np.int64), np.int64))

        for source, start, size in ranges:
            if len(size) and (min(start.min(), size.min()) < 0
                              or (start + size).max() > len(source)):
                raise AssertionError("a range reaches past its source")
        p = _Packets(count.shape[1], *joined(tags), at(delta, np.int64),
                     (_POINTER * 4)(*(at(r[0], np.uint8) for r in ranges)),
                     (_POINTER * 4)(*(at(r[1], np.int64) for r in ranges)),
                     (_POINTER * 4)(*(at(r[2], np.int64) for r in ranges)), *joined(prefixes),
                     at(count, np.int64), at(is_counter, np.uint8), at(value, "<f8"),
                     at(track, np.int64), at(sampled, np.uint8), at(sample, np.int64))
        rows = len(delta)
        event = np.empty(rows, np.int64)  # each row's event size, from the first call
        out = np.empty(self._packets(None, 0, rows, ctypes.byref(p), event.ctypes.data),
                       np.uint8)
        if self._packets(out.ctypes.data, out.size, rows, ctypes.byref(p),
                         event.ctypes.data) != out.size:
            raise AssertionError("the packets did not fill their buffer")
        return out.tobytes()


def _steps(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Int64 values as render.c reads them: a buffer and the step between rows (0: one value
    for all, as np.broadcast_to gives it)."""
    if values.dtype == np.int64 and values.strides in ((0,), (8,)):
        return values, values.strides[0] // 8
    return np.ascontiguousarray(values, np.int64), 1


def load(path: Path = LIBRARY) -> Renderer | None:
    """The renderer built at `path`, or None where there is none, it does not load or it was
    built from another version of render.c."""
    if sys.byteorder != "little":  # render.c copies doubles as they lie in memory
        return None
    try:
        library = ctypes.CDLL(str(path))
        return Renderer(library) if library.render_abi() == ABI else None
    except (OSError, AttributeError):
        return None


RENDERER = load()
"""The compiled renderer of this install, if it has one."""
