"""Is a file a whole Perfetto protobuf trace? Checked before either engine loads it.

trace_processor reads a trace as a stream of packets and silently leaves out a last packet that
the file cuts short (its `stats` say nothing), so a damaged file would answer queries with part
of its data. The top-level framing (`Trace.packet` = field 1, length-delimited, over and over)
is walked here: a few hundred packets for our compressed traces.
"""

from __future__ import annotations

from pathlib import Path

from profinfer_perfetto.encode.output import PART_SUFFIX
from profinfer_perfetto.errors import ProfinferError

_PACKET_TAG = (1 << 3) | 2
"""Field 1 (`Trace.packet`), wire type 2 (length-delimited)."""



def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it; (-1, pos) where the data ends inside it."""
    value = shift = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, pos


def check_whole(path: Path, data: bytes) -> int:
    """Raise one sentence unless `data` (the bytes of `path`) is a sequence of whole packets.

    A trace that `record` was still writing (OUTPUT.part: the recorder was killed) may end in a
    chunk cut short: the length of its whole packets is returned, which is what is read.
    """
    if data[:1] in (b"{", b"["):
        raise ProfinferError(f"{path} is a JSON trace: queries read the protobuf traces that "
                             "`record` writes by default (JSON traces are for viewers)")
    pos = 0
    while pos < len(data):
        packet = pos
        tag, pos = _varint(data, pos)
        if tag != _PACKET_TAG:
            raise ProfinferError(f"{path} is not a Perfetto trace (it does not parse as one)")
        size, pos = _varint(data, pos)
        if size < 0 or pos + size > len(data):
            if path.name.endswith(PART_SUFFIX):
                return packet
            missing = "" if size < 0 else f": its last packet needs {pos + size - len(data)} " \
                                          "more bytes"
            raise ProfinferError(f"{path} is cut short{missing}")
        pos += size
    return len(data)
