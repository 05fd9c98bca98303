"""Is a file a whole Perfetto protobuf trace? Checked before either engine loads it.

trace_processor reads a trace as a stream of packets and silently leaves out a last packet that
the file cuts short (its `stats` say nothing), so a damaged file would answer queries with part
of its data. The top-level framing (`Trace.packet` = field 1, length-delimited, over and over)
is walked first, by the importer's own framing reader (wirescan.packet_chain).
"""

from __future__ import annotations

from pathlib import Path

from profinfer_perfetto.encode.output import PART_SUFFIX
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.wirescan import PACKET_TAG, packet_chain, padded, varint


def check_whole(path: Path, data: bytes) -> int:
    """Raise one sentence unless `data` (the bytes of `path`) is a sequence of whole packets.

    A trace that `record` was still writing (OUTPUT.part: the recorder was killed) may end in a
    chunk cut short: the length of its whole packets is returned, which is what is read.
    """
    if data[:1] in (b"{", b"["):
        raise ProfinferError(f"{path} is a JSON trace: queries read the protobuf traces that "
                             "`record` writes by default (JSON traces are for viewers)")
    buf = padded(data)
    _, _, packet = packet_chain(buf, 0, len(data))
    if packet == len(data):
        return packet
    if data[packet] != PACKET_TAG:
        raise ProfinferError(f"{path} is not a Perfetto trace (it does not parse as one)")
    if path.name.endswith(PART_SUFFIX):
        return packet
    size, pos = varint(buf, packet + 1)
    missing = "" if pos > len(data) else f": its last packet needs {pos + size - len(data)} " \
                                         "more bytes"
    raise ProfinferError(f"{path} is cut short{missing}")
