"""Render a layout as a Perfetto protobuf trace, streamed packet by packet.

One trusted packet sequence: its first packet clears incremental state and carries every
interned name (event names, debug annotation names and string values); later packets need
that state. Timestamps are CLOCK_BOOTTIME nanoseconds, Perfetto's default clock.
"""

from __future__ import annotations

from typing import IO

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
    for row, (ts, typ, track, name, args, value, counter_tracks, counter_values,
              deltas) in enumerate(rows):
        packet = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=SEQUENCE_ID,
                                sequence_flags=_NEEDS)
        event = packet.track_event
        event.type = typ
        event.track_uuid = uuids[track]
        if name >= 0:
            event.name_iid = name + 1
        if args >= 0:
            event.debug_annotations.extend(annotation_sets[args])
        for delta_name, delta in zip(delta_names, deltas, strict=True):
            if delta >= 0:
                event.debug_annotations.add(name_iid=delta_name, int_value=delta)
        if typ == EventType.COUNTER:
            event.double_counter_value = value
        flows = layout.flows_out.get(row)
        if flows:
            event.flow_ids.extend(flows)
        flows = layout.flows_in.get(row)
        if flows:
            event.terminating_flow_ids.extend(flows)
        for counter_track, counter_value in zip(counter_tracks, counter_values, strict=True):
            if counter_track >= 0:
                event.extra_counter_track_uuids.append(uuids[counter_track])
                event.extra_counter_values.append(counter_value)
        _write(out, packet)
        packets += 1
    return packets
