"""Deflate for the trace's compressed packets: libdeflate's (the `deflate` package) at level 1
where installed, else zlib's at level 1. trace_processor reads either (zlib format).

Measured on two recordings' chunks, re-deflated (2026-12-04; bytes per recorded event on disk
and CPU per event; medium-llama 32 tokens / Gemma-3-270M 64 tokens, 2 threads): libdeflate
level 1 9.5 / 8.8 B and 0.15 / 0.18 us, level 2 9.4 / 8.7 B and 0.22 / 0.28 us, level 6 8.9 /
8.3 B and 0.43 / 0.54 us; ISA-L (the `isal` package, used before) level 2 10.1 / 9.3 B and
0.07 us, level 3 10.2 / 9.4 B and 0.30 us; zlib level 1 10.7 / 9.9 B and 0.31 us, level 4
9.5 / 8.9 B and 0.52 us, level 6 9.0 / 8.4 B and 0.8 us. The trace may be written while the
target runs, so the CPU counts as well as the bytes: libdeflate's level 1, a twentieth smaller
than ISA-L's best for twice its CPU (a tenth of the encoder's time), smaller and faster than
any level of zlib that is as fast.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable


def _deflate() -> tuple[str, Callable[[bytes, int], bytes | bytearray]]:
    try:
        import deflate
    except ImportError:
        return "zlib", zlib.compress
    return "libdeflate", deflate.zlib_compress


ENGINE, _COMPRESS = _deflate()
"""Which deflate is used."""
LEVEL = 1


def compress(data: bytes) -> bytes:
    """`data` in zlib format."""
    return bytes(_COMPRESS(data, LEVEL))
