"""Encoding the synthetic recording: golden files, and the trace rules Perfetto relies on."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.capture.events import Kind
from profinfer_perfetto.encode import deflate, perfetto
from profinfer_perfetto.encode.chrome import write_chrome_json
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model import layout
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.names import INNER_WAIT_SLICE, PEAK_ARGS, PEAK_SLICE, WAIT_SLICE
from profinfer_perfetto.model.trace_model import build
from tests import synthetic, trace_reader

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("PROFINFER_UPDATE_GOLDEN") == "1"


def _perfetto(tmp_path: Path, status: str = "complete") -> Path:
    path = tmp_path / "synthetic.pftrace"
    with path.open("wb") as out:
        write_perfetto(build_layout(build(synthetic.recording(status))), out)
    return path


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; PROFINFER_UPDATE_GOLDEN=1 rewrites it"


def test_perfetto_golden(tmp_path: Path) -> None:
    """The packets, compressed chunks expanded, as text."""
    trace = official.Trace(packet=trace_reader.packets(_perfetto(tmp_path).read_bytes()))
    _golden("synthetic.pftrace.textproto", text_format.MessageToString(trace))


def test_chrome_json_golden() -> None:
    out = io.StringIO()
    write_chrome_json(build_layout(build(synthetic.recording())), out)
    events = json.loads(out.getvalue())["traceEvents"]
    assert sum(e["ph"] == "B" for e in events) == sum(e["ph"] == "E" for e in events)
    _golden("synthetic.json", out.getvalue())


def test_tracks_nesting_and_flows(tmp_path: Path) -> None:
    trace = trace_reader.read(_perfetto(tmp_path))
    assert trace.tids() == [synthetic.MAIN, synthetic.WORKER]
    main = [s for s in trace.thread_slices(synthetic.MAIN) if s.name != WAIT_SLICE]
    assert [(s.name, s.depth) for s in main] == [
        ("decode", 0), ("graph CPU", 1), ("MUL_MAT ffn_up-0", 2),
        ("RMS_NORM+MUL attn_norm-0", 2), ("ADD l_out-0", 2),
    ]
    worker = [s for s in trace.thread_slices(synthetic.WORKER) if s.name != WAIT_SLICE]
    assert [(s.name, s.depth) for s in worker][:2] == [("graph CPU", 0), ("MUL_MAT ffn_up-0", 1)]
    op = main[2]
    assert op.args["op"] == "MUL_MAT" and op.args["tensor"] == "ffn_up-0"
    assert op.args["layer"] == 0 and op.args["src1"] == "f32 64"
    assert op.parent is main[1] and main[1].parent is main[0]
    # A node is described once, on the calling thread's share; the worker's carries its node
    # (and its own counter counts, where not 0).
    assert [s.args for s in worker[1:]] == [
        {"node": 0, "counter_context-switches": 1}, {"node": 1}, {"node": 3,
                                                                  "counter_context-switches": 2}]
    waits = [s for s in trace.thread_slices(synthetic.WORKER) if s.name == WAIT_SLICE]
    assert [(w.ts, w.end) for w in waits] == [(5_000, 8_600), (9_900, 10_100), (11_000, 13_000)]
    edges = sorted((a.args["tensor"], b.args["tensor"]) for a, b in trace.flows)
    assert edges == [("attn_norm-0", "l_out-0"), ("ffn_up-0", "attn_norm-0"),
                     ("ffn_up-0", "l_out-0")]


def test_counters(tmp_path: Path) -> None:
    trace = trace_reader.read(_perfetto(tmp_path))
    by_name = {trace.track_name(u): v for u, v in trace.counters.items()}
    ((ts, rate),) = by_name["tokens/s"]
    assert ts == 14_000 and rate == pytest.approx(1 / 13e-6)
    # Zeros are not written (trace_processor stops reading extra counter values at a 0), nor
    # a value the track already holds: the samples are 1, 1, 1, 1, 3.
    assert [v for _, v in by_name[f"context-switches {synthetic.WORKER}"]] == [1, 3]


@pytest.mark.parametrize("status", ["complete", "target killed by SIGSEGV"])
def test_the_trace_says_whether_it_is_complete(tmp_path: Path, status: str) -> None:
    trace = trace_reader.read(_perfetto(tmp_path, status))
    (record,) = [s for s in trace.slices if s.name == "record"]
    assert record.args["status"] == status
    assert record.args["complete"] == (status == "complete")
    cut = [s.name for s in trace.instants if s.name != PEAK_SLICE]
    assert cut == ([] if status == "complete" else [f"trace cut short: {status}"])
    peaks = [s.args for s in trace.instants if s.name == PEAK_SLICE]
    assert peaks == [dict(zip(PEAK_ARGS, (p.kind.value, p.dtype, p.threads, p.value, p.how),
                              strict=True)) for p in synthetic.PEAKS]


def test_chunking_changes_nothing_but_the_chunks(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Events split over many compressed packets (each sequence's deltas running across them)
    decode to the same trace as one chunk."""
    whole = trace_reader.read(_perfetto(tmp_path))
    monkeypatch.setattr(perfetto, "CHUNK_ROWS", 3)
    (tmp_path / "chunked").mkdir()
    path = _perfetto(tmp_path / "chunked")
    chunks = official.Trace()
    chunks.ParseFromString(path.read_bytes())
    assert sum(p.HasField("compressed_packets") for p in chunks.packet) > 10
    chunked = trace_reader.read(path)
    assert chunked.packets == whole.packets
    assert [(s.name, s.ts, s.end, s.args) for s in chunked.slices] == [
        (s.name, s.ts, s.end, s.args) for s in whole.slices]
    assert chunked.counters == whole.counters


def test_compressed_packets_are_zlib_data() -> None:
    """trace_processor expands compressed packets as zlib data, whichever deflate wrote them."""
    data = bytes(range(256)) * 1000
    assert deflate.ENGINE in ("libdeflate", "zlib")
    assert zlib.decompress(deflate.compress(data)) == data


@pytest.mark.parametrize("top", [5, 2**40])
def test_rows_group_and_sort_by_their_keys(top: int) -> None:
    """Rows of equal keys share a code and sort in row order, whether keys and row numbers pack
    into one int64 or not (two keys near 2**40 make the packing renumber, and the sort of keys
    of 2**50 and more falls back to argsort)."""
    rng = np.random.default_rng(1)
    keys = (rng.choice([-1, top], 999), rng.integers(-1, 4, 999), rng.choice([-1, top], 999))
    code = perfetto._combined(keys)
    rows = list(zip(*(k.tolist() for k in keys), strict=True))
    assert len(set(code.tolist())) == len(set(rows))
    for i in range(0, 999, 97):
        assert (code == code[i]).tolist() == [r == rows[i] for r in rows]
    key = np.unique(code, return_inverse=True)[1].reshape(-1) * (2**50 if top > 5 else 1)
    assert perfetto._stable_order(key).tolist() == np.argsort(key, kind="stable").tolist()


@pytest.mark.parametrize("span", [10**8, 2**62])
def test_rows_are_written_in_lexsort_s_order(span: int) -> None:
    """The rows' writing order is lexsort's (time, ends first, depth; ties in row order),
    packed in one int64 or, where a time span leaves no room (2**62), by lexsort itself."""
    rng = np.random.default_rng(2)
    ts = rng.integers(0, span, 5000, dtype=np.int64)
    ts[1::2] = ts[::2]  # ties
    not_end, key = rng.integers(0, 2, 5000).astype(bool), rng.integers(-6, 7, 5000)
    assert (layout._writing_order(ts, not_end, key).tolist()
            == np.lexsort((key, not_end, ts)).tolist())
    assert layout._writing_order(ts[:0], not_end[:0], key[:0]).tolist() == []


def _shared_while_open(ids: list[int], begin: list[int], end: list[int]) -> bool:
    """Whether two flows of one id are open at once (each open from its begin to its end)."""
    return any(ids[i] == ids[j] and begin[i] <= end[j] and begin[j] <= end[i]
               for i in range(len(ids)) for j in range(i))


def test_a_dag_edge_keeps_its_flow_id_from_graph_to_graph() -> None:
    """Flow ids start over at each graph: the same edges at the same offsets in three graphs
    get the same ids in each, from a cycle as long as the most flows open at once."""
    begin = np.array([0, 5, 10, 12, 20])
    end = np.array([12, 20, 30, 40, 45])
    steps = [begin + 1000 * g for g in range(3)], [end + 1000 * g for g in range(3)]
    ids = layout.flow_ids(np.concatenate(steps[0]), np.concatenate(steps[1]),
                          np.repeat(np.arange(3), 5))
    assert ids.tolist() == [1, 2, 3, 4, 1] * 3


def test_flow_ids_count_on_where_a_graph_s_flow_is_open_as_the_next_starts() -> None:
    """An edge from one graph into the next (between a step's splits) is open as the next
    graph's flows start: numbering those from 1 again would reuse its id, so the ids run on
    from graph to graph instead."""
    begin, end, graph = np.array([0, 5, 10, 11]), np.array([50, 8, 12, 13]), np.array([0, 0, 1, 1])
    ids = layout.flow_ids(begin, end, graph)
    assert ids.tolist() == [1, 2, 3, 4]
    assert not _shared_while_open(ids.tolist(), begin.tolist(), end.tolist())


@pytest.mark.parametrize("seed", range(20))
def test_flows_open_at_once_never_share_an_id(seed: int) -> None:
    rng = np.random.default_rng(seed)
    begin = np.sort(rng.integers(0, 200, 60))
    end = begin + rng.integers(0, 40, 60)
    graph = np.sort(rng.integers(0, 4, 60)) if seed % 2 else rng.integers(0, 4, 60)
    ids = layout.flow_ids(begin, end, graph)
    assert not _shared_while_open(ids.tolist(), begin.tolist(), end.tolist())
    assert ids.min() >= 1


def test_a_layout_without_events_writes_its_tracks(tmp_path: Path) -> None:
    """A streamed chunk can lay out no event (nothing in it could be placed): it writes what it
    has (track descriptors, interned names), alone or after a chunk with events."""
    layout = build_layout(build(synthetic.decode_run(3, steps=2)))
    rows = {f.name for f in dataclasses.fields(layout)
            if isinstance(getattr(layout, f.name), np.ndarray) and f.name != "flows"}
    empty = dataclasses.replace(layout, flows=layout.flows[:0], row_args=[],
                                **{name: getattr(layout, name)[:0] for name in rows})
    paths = {name: tmp_path / f"{name}.pftrace" for name in ("empty", "full", "full+empty")}
    with paths["empty"].open("wb") as out:
        assert write_perfetto(empty, out) > len(layout.tracks)  # and a head per sequence
    with paths["full"].open("wb") as out:
        write_perfetto(layout, out)
    with paths["full+empty"].open("wb") as out:
        written = perfetto.Written()
        write_perfetto(layout, out, written)
        write_perfetto(empty, out, written)
    traces = {name: trace_reader.read(path) for name, path in paths.items()}
    assert traces["empty"].slices == []
    assert traces["full+empty"].slices == traces["full"].slices


def test_waits_inside_an_op_are_drawn_within_it(tmp_path: Path) -> None:
    """A barrier call inside an op and its return make a wait one level below the op's slice;
    a tail call's (no return seen) lasts to the op's end of work; one outside any op's work
    draws nothing."""
    rec = synthetic.recording()
    extra = np.array([
        synthetic.event(3_500, Kind.INNER_WAIT_BEGIN, synthetic.WORKER, cpu=1),
        synthetic.event(4_200, Kind.INNER_WAIT_END, synthetic.WORKER, cpu=1),
        synthetic.event(8_700, Kind.INNER_WAIT_BEGIN, synthetic.WORKER, cpu=1),
        synthetic.event(12_500, Kind.INNER_WAIT_BEGIN, synthetic.MAIN),
        synthetic.event(12_600, Kind.INNER_WAIT_END, synthetic.MAIN),
    ], synthetic.EVENT)
    rec = dataclasses.replace(rec, events=np.concatenate([rec.events, extra]))
    path = tmp_path / "inner.pftrace"
    with path.open("wb") as out:
        write_perfetto(build_layout(build(rec)), out)
    trace = trace_reader.read(path)
    waits = [s for s in trace.slices if s.name == INNER_WAIT_SLICE]
    assert [(w.ts, w.end) for w in waits] == [(3_500, 4_200), (8_700, 9_900)]
    assert [w.parent.name for w in waits if w.parent is not None] == [
        "MUL_MAT ffn_up-0", "RMS_NORM+MUL attn_norm-0"]
    assert all(w.parent is not None and w.depth == w.parent.depth + 1 for w in waits)
    assert {trace.tracks[w.track].thread.tid for w in waits} == {synthetic.WORKER}
