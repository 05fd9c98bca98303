"""encode/wire.py writes many messages at once; each must equal what protobuf itself writes."""

from __future__ import annotations

import numpy as np

from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.encode.wire import Pieces, tag, varint, varint_sizes, varints

EDGES = [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**32, 2**56, 2**63 - 1, -1, -2**63]


def test_varints_match_protobuf() -> None:
    matrix, length = varints(np.array(EDGES, np.int64))
    for value, row, n in zip(EDGES, matrix, length, strict=True):
        expected = pb.TrackEvent(extra_counter_values=[value]).SerializeToString()[1:]
        assert bytes(row[:n]) == expected == varint(value)
    assert varint_sizes(np.array(EDGES, np.int64)).tolist() == length.tolist()


def test_pieces_render_messages_as_protobuf_does() -> None:
    rng = np.random.default_rng(0)
    rows = 500
    kind = rng.integers(1, 5, rows)
    name = rng.integers(-1, 300, rows)
    uuid = rng.integers(0, 2**40, rows)
    value = rng.normal(size=rows)
    blob = pb.TrackEvent(flow_ids=[7, 8]).SerializeToString()
    has_blob = rng.random(rows) < 0.3
    # Each row's own run of terminating flow ids, of 0 to 40 ids (the longest few rendered as
    # slices), from one source.
    flows = [pb.TrackEvent(terminating_flow_ids=range(int(k))).SerializeToString()
             for k in rng.integers(0, 41, rows)]
    flow_size = np.array([len(f) for f in flows])
    p = Pieces(rows)
    p.varint(tag(pb.TrackEvent, "type"), kind)
    named = np.flatnonzero(name >= 0)
    p.varint(tag(pb.TrackEvent, "name_iid"), name[named] + 1, named)
    even = np.flatnonzero(uuid % 2 == 0)
    p.varint(tag(pb.TrackEvent, "track_uuid"), uuid[even], even)
    counter = np.flatnonzero(kind == 4)
    p.fixed64(tag(pb.TrackEvent, "double_counter_value"), value[counter], counter)
    p.add(np.frombuffer(blob, np.uint8), 0, np.where(has_blob, len(blob), 0))
    p.add(np.frombuffer(b"".join(flows), np.uint8), np.cumsum(flow_size) - flow_size, flow_size)
    p.constant(b"", np.arange(0))  # a piece on no row is left out
    data, ends = p.render()
    starts = np.concatenate([[0], ends[:-1]])
    for i in range(rows):
        expected = pb.TrackEvent(type=pb.TrackEvent.Type.Name(int(kind[i])))
        if name[i] >= 0:
            expected.name_iid = int(name[i]) + 1
        if uuid[i] % 2 == 0:
            expected.track_uuid = int(uuid[i])
        if kind[i] == 4:
            expected.double_counter_value = float(value[i])
        if has_blob[i]:
            expected.flow_ids.extend([7, 8])
        expected.MergeFromString(flows[i])
        got = pb.TrackEvent()
        got.ParseFromString(bytes(data[starts[i]:ends[i]]))
        assert got == expected
