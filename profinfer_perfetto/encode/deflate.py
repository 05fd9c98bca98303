"""Deflate for the trace's compressed packets: ISA-L's (the `isal` package) where installed,
else zlib's. trace_processor reads either (zlib format).

Measured on a Gemma-3-270M recording (515,840 events, 20.4 MB of packets before compression,
2026-11-25): zlib level 6 1.06 us of CPU per event and 6.9 B per event on disk, zlib level 1
0.27 us and 8.8 B, isal level 1 0.07 us and 8.8 B, level 2 0.07 us and 8.6 B, level 3 0.27 us
and 8.5 B. The trace is written while the target runs, so the CPU counts more than the bytes:
isal at level 2, else zlib at level 1.
"""

from __future__ import annotations

from collections.abc import Callable


def _deflate() -> tuple[str, Callable[[bytes, int], bytes], int]:
    try:
        from isal import isal_zlib
    except ImportError:
        import zlib

        return "zlib", zlib.compress, 1
    return "isal", isal_zlib.compress, 2


ENGINE, _COMPRESS, LEVEL = _deflate()
"""Which deflate is used, and at which level."""


def compress(data: bytes) -> bytes:
    """`data` in zlib format."""
    return _COMPRESS(data, LEVEL)
