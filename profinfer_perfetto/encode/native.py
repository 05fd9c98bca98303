"""The compiled renderer, where scripts/setup.sh built it: render.c as _render.so beside this
file, called through ctypes over numpy buffers (no Python C API, nothing more to install).
Where it is absent (not built, no C compiler) wire.py copies the same bytes with numpy."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

LIBRARY = Path(__file__).with_name("_render.so")
"""Where scripts/setup.sh builds render.c."""

_INT64 = ctypes.c_int64
_POINTER = ctypes.c_void_p


class Renderer:
    """render.c's functions, loaded from a built library."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._piece = library.render_piece
        self._piece.argtypes = [_POINTER, _INT64, _POINTER, _POINTER, _INT64, _POINTER, _INT64,
                                _POINTER, _INT64, _POINTER, _INT64]
        self._piece.restype = ctypes.c_int

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


def _steps(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Int64 values as render.c reads them: a buffer and the step between rows (0: one value
    for all, as np.broadcast_to gives it)."""
    if values.dtype == np.int64 and values.strides in ((0,), (8,)):
        return values, values.strides[0] // 8
    return np.ascontiguousarray(values, np.int64), 1


def load(path: Path = LIBRARY) -> Renderer | None:
    """The renderer built at `path`, or None where there is none (or it does not load)."""
    try:
        return Renderer(ctypes.CDLL(str(path)))
    except (OSError, AttributeError):
        return None


RENDERER = load()
"""The compiled renderer of this install, if it has one."""
