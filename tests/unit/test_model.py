"""The trace model built from the synthetic recording: spans, ops, barrier waits, DAG."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from profinfer_perfetto.capture.events import (
    BATCH,
    BATCH_RUNS,
    NODE,
    UNKNOWN_POS,
    Backend,
    Kind,
)
from profinfer_perfetto.model import trace_model
from profinfer_perfetto.model.backends import blas_ops
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.records import dense_unique, first_rows, sorted_unique, threads_of
from profinfer_perfetto.model.trace_model import (
    SeqRun,
    build,
    layer_of,
    step_batches,
    token_phase,
)
from profinfer_perfetto.model.work import op_work
from tests import synthetic


def test_token_and_graph_spans() -> None:
    model = build(synthetic.recording())
    assert model.tokens.begin.tolist() == [1_000] and model.tokens.end.tolist() == [14_000]
    assert model.graphs.begin.tolist() == [2_000] and model.graphs.end.tolist() == [13_000]
    assert model.tokens.complete.all() and model.graphs.complete.all()


def test_ops_end_at_the_last_barrier_before_the_next_op() -> None:
    ops = build(synthetic.recording()).ops
    main = ops.tid == synthetic.MAIN
    # ADD on the main thread passes an inner barrier at 10_500; its share ends at 12_000.
    assert ops.begin[main].tolist() == [3_000, 8_500, 10_000]
    assert ops.work_end[main].tolist() == [8_000, 9_500, 12_000]
    assert ops.end[main].tolist() == [8_500, 10_000, 13_000]
    worker = ops.tid == synthetic.WORKER
    assert ops.work_end[worker].tolist() == [5_000, 9_900, 11_000]
    assert ops.end[worker].tolist() == [8_600, 10_100, 13_000]


def test_counter_deltas_and_fused_pairs() -> None:
    model = build(synthetic.recording())
    assert model.ops.counter_delta[:, 0].tolist() == [2, 0, 1, 1, 0, 2]
    labels = [model.op_label(n, f) for n, f in zip(model.ops.node, model.ops.fused, strict=True)]
    assert labels[:3] == [("MUL_MAT", "ffn_up-0"), ("RMS_NORM+MUL", "attn_norm-0"),
                          ("ADD", "l_out-0")]


def test_dag_edges_follow_storage_through_views_and_fusion() -> None:
    model = build(synthetic.recording())
    # ffn_up -> fused norm (reads it), ffn_up -> l_out, fused attn_norm -> l_out (via a view).
    assert model.edges.tolist() == [[0, 1], [0, 3], [1, 3]]


def test_ops_outside_any_graph_are_dropped_and_counted() -> None:
    rec = synthetic.recording()
    rec.events = rec.events[rec.events["ts"] >= 3_000]  # capture began after the graph did
    model = build(rec)
    assert len(model.ops) == 0 and model.dropped_ops == 6


def test_graphs_in_no_token_step_keep_their_ops_and_edges() -> None:
    rec = synthetic.recording()  # a chunk of graphs whose token step is not in it
    rec.events = rec.events[~np.isin(rec.events["kind"], [Kind.TOKEN_BEGIN, Kind.TOKEN_END])]
    model = build(rec)
    assert len(model.tokens) == 0 and len(model.graphs) == 1 and len(model.ops) == 6
    assert model.edges.tolist() == [[0, 1], [0, 3], [1, 3]]


def test_names() -> None:
    assert layer_of("ffn_gate-17") == 17 and layer_of("embd") == -1
    assert token_phase(7, 0) == "prefill" and token_phase(1, 0) == "decode"
    assert token_phase(5, 1) == "encode"
    # Several sequences: one token each is a decode step; any with more is mixed.
    assert token_phase(2, 0, 2) == "decode" and token_phase(9, 0, 2) == "mixed"


@pytest.mark.parametrize(("arg1", "from_start", "pos"), [
    ((2 << 32) | 41, True, 41),  # the batch's own position wins
    (UNKNOWN_POS, True, 0),  # else the tokens decoded since a launched run began
    (UNKNOWN_POS, False, None),  # which --pid cannot know
])
def test_step_positions(arg1: int, from_start: bool, pos: int | None) -> None:
    rec = synthetic.recording()
    rec.events["arg1"][rec.events["kind"] == Kind.TOKEN_BEGIN] = arg1
    rec.run.from_start = from_start
    (step,) = step_batches(build(rec))
    assert step.pos == pos and step.sequences == max(arg1 >> 32, 1)
    assert np.int64(np.uint64(2**64 - 1)) == -1  # n_tokens unknown is carried as -1


def test_set_rows_is_the_rows_it_writes_not_its_whole_destination() -> None:
    """SET_ROWS writes a few rows into a big tensor (a KV cache): its work is those rows read
    and written, with the row ids."""
    ggml = replace(synthetic.GGML, ops=(*synthetic.OPS, "SET_ROWS"))
    node = np.zeros(1, NODE)[0]
    node["op"], node["type"] = len(synthetic.OPS), 0  # into f32
    node["ne"] = (256, 4096, 1, 1)  # the cache: 4096 rows of 256
    node["src"][0] = (1, 0, (256, 2, 1, 1), 0, 0)  # two rows of f32
    node["src"][1] = (2, 0, (2, 1, 1, 1), 0, 0)  # their indices
    flops, nbytes = op_work(ggml, node)
    assert flops == 512
    assert nbytes == 2 * 512 * 4 + ggml.nbytes(0, 2)


def _blas_split(calls: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """A BLAS graph split (100..1000 ns) of two matmuls, the first of two planes, with the
    cblas_sgemm returns at `calls`; and the two nodes' descriptors."""
    e = synthetic.event
    events = [e(100, Kind.GRAPH_BEGIN, synthetic.MAIN, aux=Backend.BLAS, counter=7),
              e(100, Kind.BLAS_NODE, synthetic.MAIN, arg0=synthetic.UP),
              e(100, Kind.BLAS_NODE, synthetic.MAIN, arg0=synthetic.OUT),
              *(e(t, Kind.BLAS_CALL, synthetic.MAIN, counter=t) for t in calls),
              e(1_000, Kind.GRAPH_END, synthetic.MAIN)]
    nodes = [synthetic._node(100, synthetic.UP, "MUL_MAT", "up", (64, 4, 2, 1), []),
             synthetic._node(100, synthetic.OUT, "MUL_MAT", "out", (64, 4, 1, 1), [])]
    return np.array(events, synthetic.EVENT), np.array(nodes, NODE)


def test_a_blas_split_is_cut_into_ops_at_each_nodes_last_call() -> None:
    """A node's op runs from the previous one's end (the split's begin) to the return of its
    last plane's cblas_sgemm, with the counters read at those moments."""
    events, nodes = _blas_split([200, 300, 450])
    out, dropped = blas_ops(events, nodes, synthetic.GGML)
    assert dropped == 0
    got = [(int(r["ts"]), Kind(r["kind"]), int(r["arg0"]), int(r["counter"][0]),
            int(r["ith"]), int(r["aux"])) for r in out]
    assert got == [(100, Kind.GRAPH_BEGIN, 0, 7, 0, Backend.BLAS),
                   (100, Kind.OP_BEGIN, synthetic.UP, 7, 0, 1),
                   (300, Kind.BARRIER, 0, 300, 0, 0),
                   (300, Kind.OP_BEGIN, synthetic.OUT, 300, 0, 1),
                   (450, Kind.BARRIER, 0, 450, 0, 0),
                   (1_000, Kind.GRAPH_END, 0, 0, 0, 0)]


def test_a_blas_split_whose_calls_do_not_add_up_keeps_no_ops() -> None:
    events, nodes = _blas_split([200, 450])
    out, dropped = blas_ops(events, nodes, synthetic.GGML)
    assert dropped == 2
    assert [Kind(k) for k in out["kind"]] == [Kind.GRAPH_BEGIN, Kind.GRAPH_END]


def test_a_flow_id_comes_back_only_after_its_flow_ended() -> None:
    """Flow ids from a small cycle: flows that share an id never overlap, and the later one
    starts at a later time than the earlier one ends (trace_processor frees an id when its flow
    terminates, in time order, across threads); every DAG edge between shown ops is a flow."""
    layout = build_layout(build(synthetic.decode_run(5, steps=12)))
    ids, out, into = layout.flows.T
    begin, end = layout.ts[out], layout.ts[into]
    assert len(ids) > 100 and ids.min() >= 1 and len(np.unique(ids)) < len(ids) // 10
    for flow_id in np.unique(ids).tolist():
        same = np.flatnonzero(ids == flow_id)
        same = same[np.argsort(begin[same], kind="stable")]
        assert (begin[same][1:] > end[same][:-1]).all(), flow_id
    assert (begin <= end).all() and (out < into).all()



def test_a_step_s_runs_are_read_from_its_batch_record() -> None:
    """Run r of a BATCH record ends where run r + 1 starts; the last one named at the start of
    the next (more runs than BATCH_RUNS) or at the end of the scan; positions only where the
    record knows them; a record of no step of the chunk is left out."""
    steps = trace_model.Spans(*(np.array(c) for c in ([7, 7, 8], [100, 200, 300])),
                              *(np.zeros(3, np.int64) for _ in range(5)))
    records = np.zeros(4, BATCH)
    records["tid"], records["ts"] = [7, 8, 7, 9], [100, 300, 200, 100]
    records["n_runs"], records["scanned"] = [2, 20, 0, 1], [9, 64, 5, 3]
    records["pos_known"] = [1, 0, 1, 1]
    records["seq"][0, :2], records["pos"][0, :2], records["start"][0, :2] = [3, 1], [40, 7], [0, 4]
    records["seq"][1, :BATCH_RUNS] = np.arange(BATCH_RUNS)
    records["start"][1, :BATCH_RUNS + 1] = 2 * np.arange(BATCH_RUNS + 1)
    runs = trace_model._step_runs(records, steps)
    assert runs.keys() == {0, 1, 2}
    assert runs[0] == (SeqRun(3, 40, 4), SeqRun(1, 7, 5))
    assert runs[2] == tuple(SeqRun(r, None, 2) for r in range(BATCH_RUNS))
    assert runs[1] == ()


@pytest.mark.parametrize("seed", range(5))
def test_the_distinct_values_are_numpy_s(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for values in (rng.integers(-5, 2**40, 500), rng.integers(100, 103, 300).astype(np.uint32),
                   np.zeros(0, np.int64)):
        assert np.array_equal(sorted_unique(values), np.unique(values))
        threads, which = threads_of(values)
        expected, inverse = np.unique(values, return_inverse=True)
        assert np.array_equal(threads, expected) and np.array_equal(which, inverse)
        assert np.array_equal(first_rows(inverse, len(expected)),
                              np.unique(values, return_index=True)[1])
    rows = rng.integers(0, 50, 400)
    used, which = dense_unique(rows, 50)
    expected, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    assert np.array_equal(used, expected) and np.array_equal(which, inverse)
    assert np.array_equal(first_rows(which, len(used)), first)
