"""Render a layout as a Perfetto protobuf trace, streamed packet by packet.

One trusted packet sequence: its first packet clears incremental state and carries every
interned name (event names, debug annotation names and string values); later packets need
that state. Timestamps are CLOCK_BOOTTIME nanoseconds, Perfetto's default clock.
"""

from __future__ import annotations

import struct
from typing import IO, Any

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.model.layout import ArgValue, EventType, Layout, Track, TrackKind

SEQUENCE_ID = 1
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def _write(out: IO[bytes], packet: pb.TracePacket) -> None:
    """Append one `Trace.packet` (field 1, length-delimited) to the stream."""
    body = packet.SerializeToString()
    size = len(body)
    head = bytearray([0x0A])
    while size >= 0x80:
        head.append((size & 0x7F) | 0x80)
        size >>= 7
    head.append(size)
    out.write(bytes(head) + body)


def _descriptor(layout: Layout, track: Track) -> pb.TrackDescriptor:
    desc = pb.TrackDescriptor(uuid=track.uuid)
    if track.parent:
        desc.parent_uuid = track.parent
    if track.kind == TrackKind.PROCESS:
        desc.process.pid = layout.pid
        desc.process.process_name = layout.process_name
        desc.process.cmdline.extend(layout.cmdline)
    elif track.kind == TrackKind.THREAD:
        desc.thread.pid = layout.pid
        desc.thread.tid = track.tid
        desc.thread.thread_name = track.name
    else:
        desc.name = track.name
        if track.kind == TrackKind.COUNTER:
            desc.counter.unit_name = track.unit
    return desc


class _Interner:
    """iids for annotation names; event names and string values use `strings` index + 1."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def name(self, key: str) -> int:
        return self.names.setdefault(key, len(self.names) + 1)


def _annotations(
    layout: Layout, interner: _Interner, string_iid: dict[str, int]
) -> list[list[pb.DebugAnnotation]]:
    sets: list[list[pb.DebugAnnotation]] = []
    for args in layout.arg_sets:
        annotations = []
        for key, value in args:
            a = pb.DebugAnnotation(name_iid=interner.name(key))
            _set_value(a, value, string_iid)
            annotations.append(a)
        sets.append(annotations)
    return sets


def _set_value(a: pb.DebugAnnotation, value: ArgValue, string_iid: dict[str, int]) -> None:
    if isinstance(value, bool):
        a.bool_value = value
    elif isinstance(value, int):
        a.int_value = value
    elif isinstance(value, float):
        a.double_value = value
    else:
        a.string_value_iid = string_iid.setdefault(value, len(string_iid) + 1)


def write_perfetto(layout: Layout, out: IO[bytes]) -> int:
    """Write the whole trace; returns the number of packets."""
    interner = _Interner()
    value_iid: dict[str, int] = {}
    annotation_sets = _annotations(layout, interner, value_iid)
    delta_names = [interner.name(f"counter.{c}") for c in layout.counter_names]

    first = pb.TracePacket(
        trusted_packet_sequence_id=SEQUENCE_ID,
        first_packet_on_sequence=True,
        previous_packet_dropped=1,
        sequence_flags=_CLEARED | _NEEDS,
    )
    interned = first.interned_data
    for i, s in enumerate(layout.strings, start=1):
        interned.event_names.add(iid=i, name=s)
    for key, iid in interner.names.items():
        interned.debug_annotation_names.add(iid=iid, name=key)
    for value, iid in value_iid.items():
        interned.debug_annotation_string_values.add(iid=iid, str=value.encode())
    first.track_descriptor.CopyFrom(_descriptor(layout, layout.tracks[0]))
    _write(out, first)
    packets = 1
    for track in layout.tracks[1:]:
        _write(out, pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID,
                                   sequence_flags=_NEEDS,
                                   track_descriptor=_descriptor(layout, track)))
        packets += 1

    uuids = [t.uuid for t in layout.tracks]
    track_bytes = [_TRACK_UUID + _varint(u) for u in uuids]
    extra_track_bytes = [_EXTRA_TRACK + _varint(u) for u in uuids]
    arg_blobs = [b"".join(_field(_ANNOTATION, a.SerializeToString()) for a in annotations)
                 for annotations in annotation_sets]
    delta_tags = [_ANNOTATION_NAME + _varint(n) for n in delta_names]
    rows = zip(
        layout.ts.tolist(),
        layout.type.tolist(),
        layout.track.tolist(),
        layout.name.tolist(),
        layout.args.tolist(),
        layout.value.tolist(),
        layout.counter_track.tolist(),
        layout.counter_value.tolist(),
        layout.counter_delta.tolist(),
        strict=True,
    )
    chunk: list[bytes] = []
    for row, (ts, typ, track, name, args, value, counter_tracks, counter_values,
              deltas) in enumerate(rows):
        parts = [_TYPES[typ], track_bytes[track]]
        if name >= 0:
            parts.append(_NAME_IID + _varint(name + 1))
        if args >= 0:
            parts.append(arg_blobs[args])
        for tag, delta in zip(delta_tags, deltas, strict=True):
            if delta >= 0:
                parts.append(_field(_ANNOTATION, tag + _INT_VALUE + _varint(delta)))
        if typ == EventType.COUNTER:
            parts.append(_DOUBLE_COUNTER + struct.pack("<d", value))
        for flow in layout.flows_out.get(row, ()):
            parts.append(_FLOW_ID + struct.pack("<Q", flow))
        for flow in layout.flows_in.get(row, ()):
            parts.append(_TERMINATING_FLOW_ID + struct.pack("<Q", flow))
        for counter_track, counter_value in zip(counter_tracks, counter_values, strict=True):
            if counter_track >= 0:
                parts.append(extra_track_bytes[counter_track])
                parts.append(_EXTRA_VALUE + _varint(counter_value))
        event = b"".join(parts)
        chunk.append(_field(_PACKET, b"".join(
            (_TIMESTAMP, _varint(ts), _EVENT_SEQUENCE, _field(_TRACK_EVENT, event)))))
        if len(chunk) == 8192:
            out.write(b"".join(chunk))
            chunk.clear()
    out.write(b"".join(chunk))
    return packets + len(layout)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n] if n >= 0 else _varint(n + (1 << 64))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(body)) + body


_SMALL = [bytes([i]) for i in range(0x80)]


def _tag(message: Any, name: str) -> bytes:
    """The wire tag of a field, from our schema (protos/profinfer_trace.proto)."""
    f = message.DESCRIPTOR.fields_by_name[name]
    wire = {f.TYPE_DOUBLE: 1, f.TYPE_FIXED64: 1, f.TYPE_MESSAGE: 2, f.TYPE_STRING: 2,
            f.TYPE_BYTES: 2}.get(f.type, 0)
    return _varint(f.number << 3 | wire)


# Events are written field by field with the tags of our schema, without a message object
# per event; the first packet and the track descriptors go through the generated classes.
_PACKET = _tag(pb.Trace, "packet")
_TIMESTAMP = _tag(pb.TracePacket, "timestamp")
_TRACK_EVENT = _tag(pb.TracePacket, "track_event")
_EVENT_SEQUENCE = (_tag(pb.TracePacket, "trusted_packet_sequence_id") + _varint(SEQUENCE_ID)
                   + _tag(pb.TracePacket, "sequence_flags") + _varint(_NEEDS))
_TYPES = {t: _tag(pb.TrackEvent, "type") + _varint(t) for t in EventType}
_TRACK_UUID = _tag(pb.TrackEvent, "track_uuid")
_NAME_IID = _tag(pb.TrackEvent, "name_iid")
_ANNOTATION = _tag(pb.TrackEvent, "debug_annotations")
_ANNOTATION_NAME = _tag(pb.DebugAnnotation, "name_iid")
_INT_VALUE = _tag(pb.DebugAnnotation, "int_value")
_DOUBLE_COUNTER = _tag(pb.TrackEvent, "double_counter_value")
_FLOW_ID = _tag(pb.TrackEvent, "flow_ids")
_TERMINATING_FLOW_ID = _tag(pb.TrackEvent, "terminating_flow_ids")
_EXTRA_TRACK = _tag(pb.TrackEvent, "extra_counter_track_uuids")
_EXTRA_VALUE = _tag(pb.TrackEvent, "extra_counter_values")
