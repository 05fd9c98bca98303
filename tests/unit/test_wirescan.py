"""wirescan on tiny hand-written protobuf bytes: packet framing, each wire type, runs, repeated
fields, and the messages it refuses; the official protobuf parser is the oracle where one is
needed."""

from __future__ import annotations

import struct

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.query.wirescan import (
    WIRE_BYTES,
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_VARINT,
    Messages,
    Schema,
    packet_spans,
    padded,
    scan,
    text,
)


def varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag(number, WIRE_BYTES) + varint(len(payload)) + payload


def _scan(messages: list[bytes], schema: Schema) -> tuple[np.ndarray, Messages | None]:
    """The messages back to back; what scan reads from each, and the buffer."""
    buf = padded(b"".join(messages))
    sizes = np.array([len(m) for m in messages], np.int64)
    ends = np.cumsum(sizes)
    return buf, scan(buf, ends - sizes, ends, schema)


def test_packets_framed_as_protobuf_parses_them() -> None:
    trace = official.Trace()
    for ts in (0, 1, 300, 2**40):
        trace.packet.add(timestamp=ts, trusted_packet_sequence_id=1)
    trace.packet.add()  # an empty packet: a tag and a length 0
    big = trace.packet.add(timestamp=5)
    big.track_event.name = "x" * 200  # a two-byte length
    data = trace.SerializeToString()
    spans = packet_spans(padded(data), 0, len(data))
    assert spans is not None
    starts, ends = spans
    assert len(starts) == len(trace.packet)
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        assert official.TracePacket.FromString(data[a:b]) == trace.packet[i]
    assert packet_spans(padded(b""), 0, 0) is not None


def test_bytes_that_are_not_a_sequence_of_packets_are_refused() -> None:
    whole = field(1, tag(8, WIRE_VARINT) + varint(5)) + field(1, b"")
    assert packet_spans(padded(whole), 0, len(whole)) is not None
    assert packet_spans(padded(whole[:-1]), 0, len(whole) - 1) is None  # cut short
    assert packet_spans(padded(whole + b"\0"), 0, len(whole) + 1) is None  # bytes after
    other = field(2, b"ab")  # field 2, not Trace.packet
    assert packet_spans(padded(other), 0, len(other)) is None


def test_each_wire_type_read_from_each_message() -> None:
    schema = Schema({1: WIRE_VARINT, 2: WIRE_FIXED64, 3: WIRE_FIXED32, 4: WIRE_BYTES})
    first = (tag(1, WIRE_VARINT) + varint(2**64 - 1) + tag(2, WIRE_FIXED64)
             + struct.pack("<Q", 2**63 + 5) + tag(3, WIRE_FIXED32) + struct.pack("<I", 7)
             + field(4, b"hello"))
    second = tag(1, WIRE_VARINT) + varint(300)  # the others absent
    buf, read = _scan([first, second, b""], schema)
    assert read is not None
    assert read.known.tolist() == [True, True, True]
    assert read.value[1].tolist() == [2**64 - 1, 300, 0]
    assert read.value[2].tolist() == [2**63 + 5, 0, 0]
    assert read.value[3].tolist() == [7, 0, 0]
    assert [read.present[n].tolist() for n in (1, 2, 3, 4)] == [
        [True, True, False], [True, False, False], [True, False, False], [True, False, False]]
    assert bytes(buf[read.start[4][0]:read.end[4][0]]) == b"hello"
    assert read.start[4].tolist()[1:] == [-1, -1]


def test_unknown_or_repeated_singular_fields_make_a_message_unknown() -> None:
    schema = Schema({1: WIRE_VARINT})
    once = tag(1, WIRE_VARINT) + varint(1)
    _, read = _scan([once, once + once, once + tag(9, WIRE_VARINT) + varint(2),
                     tag(1, WIRE_FIXED64) + bytes(8)], schema)
    assert read is not None
    # the last: field 1 with another wire type than the schema's
    assert read.known.tolist() == [True, False, False, False]


def test_repeated_fields_kept_in_order_with_their_owner() -> None:
    schema = Schema({1: WIRE_VARINT}, repeated={2: WIRE_VARINT})
    messages = [tag(2, WIRE_VARINT) + varint(5) + tag(1, WIRE_VARINT) + varint(1)
                + tag(2, WIRE_VARINT) + varint(6),
                tag(1, WIRE_VARINT) + varint(2),
                tag(2, WIRE_VARINT) + varint(7)]
    _, read = _scan(messages, schema)
    assert read is not None and read.known.all()
    owner, value = read.repeated[2]
    assert list(zip(owner.tolist(), value.tolist(), strict=True)) == [(0, 5), (0, 6), (2, 7)]


def test_a_run_of_back_to_back_fields_is_read_as_one() -> None:
    """Schema.run: a field's occurrences in a row span from the run's first tag to its end."""
    schema = Schema({1: WIRE_VARINT, 4: WIRE_BYTES}, run=4)
    annotations = field(4, b"a") + field(4, b"bc") + field(4, b"")
    message = tag(1, WIRE_VARINT) + varint(3) + annotations
    buf, read = _scan([message, annotations + tag(1, WIRE_VARINT) + varint(4)], schema)
    assert read is not None and read.known.tolist() == [True, True]
    assert bytes(buf[read.start[4][0]:read.end[4][0]]) == annotations
    assert bytes(buf[read.start[4][1]:read.end[4][1]]) == annotations
    assert read.value[1].tolist() == [3, 4]


def test_malformed_messages_are_refused() -> None:
    schema = Schema({1: WIRE_VARINT, 2: WIRE_BYTES, 3: WIRE_FIXED64})
    for bad in (field(2, b"abc")[:-1],  # a payload past the message's end
                tag(3, WIRE_FIXED64) + bytes(7),  # a fixed64 cut short
                tag(1, WIRE_VARINT) + b"\xff" * 11,  # a varint over 10 bytes
                tag(1, 3) + tag(1, 4),  # a group: wire types 3 and 4
                tag(1, 6)):  # a reserved wire type
        assert _scan([bad], schema)[1] is None, bad


def test_text_of_a_string_field() -> None:
    assert text("plain") == "plain"
    assert text(b"caf\xc3\xa9") == "café"
    assert text(b"bad \xff byte") == "bad \ufffd byte"


def test_packets_past_one_framing_window() -> None:
    """Framing goes window by window (8 MiB): packets of 3 MiB, and many small ones between
    whose payloads are full of the packet tag's byte (0x0a), each a false start."""
    sizes = [(3 << 20) if i % 50 == 0 else 9 for i in range(201)]
    packets = [field(1, (b"\x0a" if n < 10 else b"\0") * n) for n in sizes]
    data = b"".join(packets)
    spans = packet_spans(padded(data), 0, len(data))
    assert spans is not None
    assert spans[1].tolist() == np.cumsum([len(p) for p in packets]).tolist()
    assert (spans[1] - spans[0]).tolist() == sizes
