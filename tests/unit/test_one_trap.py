"""Ops derived from one trap per op (model/one_trap.py): the synthetic run's barriers alone give
the ops its arrival times make, an exact recording turns into what one trap would record, and
the derived op begins go among the barriers as a sort would put them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from profinfer_perfetto.capture.events import Backend, Kind, event_dtype
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.model.agreement import agreement
from profinfer_perfetto.model.one_trap import (
    Derived,
    as_one_trap,
    is_one_trap,
    with_op_begins,
    work_rows,
)
from profinfer_perfetto.model.trace_model import build
from tests import synthetic
from tests.synthetic import ATTN_NORM, MAIN, OUT, UP, WORKER

GRAPH_BEGIN, GRAPH_END = 2_000, 13_000
NAMED = [UP, UP, ATTN_NORM, ATTN_NORM, OUT, OUT, OUT]
"""The node each of the synthetic run's barriers follows, in time order (worker 5000, main 8000,
main 9500, worker 9900, main 10500 inside its op, worker 11000, main 12000)."""
AFTER_LOOP = [0, 0, 0, 0, 0, 1, 1]
"""Each thread's last barrier of the graph is the one after the loop."""


def one_trap_recording() -> Recording:
    rec = synthetic.described_at_graph_begin(synthetic.recording())
    events = rec.events[rec.events["kind"] != Kind.OP_BEGIN].copy()
    barriers = events["kind"] == Kind.BARRIER
    events["arg0"][barriers] = NAMED
    events["arg1"][barriers] = AFTER_LOOP
    return replace(rec, events=events)


def test_ops_are_derived_from_the_barrier_arrivals() -> None:
    model = build(one_trap_recording())
    ops = model.ops
    assert model.nodes.names == ["ffn_up-0", "norm-0", "attn_norm-0", "l_out-0"]
    assert model.dropped_ops == 0
    rows = list(zip(ops.tid.tolist(), ops.node.tolist(), ops.fused.tolist(), ops.ith.tolist(),
                    ops.begin.tolist(), ops.work_end.tolist(), ops.end.tolist(), strict=True))
    # A node's ops begin at the release before (the last arrival there; the graph's begin for
    # the first), end of work at the thread's last barrier naming it, end at its release (the
    # graph's end for the last node).
    assert rows == [
        (MAIN, 0, -1, 0, GRAPH_BEGIN, 8_000, 8_000),
        (MAIN, 1, 2, 0, 8_000, 9_500, 9_900),
        (MAIN, 3, -1, 0, 9_900, 12_000, GRAPH_END),
        (WORKER, 0, -1, 1, GRAPH_BEGIN, 5_000, 8_000),
        (WORKER, 1, 2, 1, 8_000, 9_900, 9_900),
        (WORKER, 3, -1, 1, 9_900, 11_000, GRAPH_END),
    ]
    assert (ops.counter_delta == -1).all()
    assert ops.cpu.tolist() == [0, 0, 0, 1, 1, 1]


def test_a_blas_split_s_ops_join_the_derived_ones() -> None:
    """A one-trap recording with a BLAS split after its CPU graph (the split's ops made from its
    cblas_sgemm calls, backends.blas_ops): the CPU graph's ops as without the split, and the
    split's two (its matmuls, each to its last call)."""
    rec = one_trap_recording()
    e = synthetic.event
    split = [e(20_000, Kind.GRAPH_BEGIN, MAIN, aux=Backend.BLAS),
             e(20_000, Kind.BLAS_NODE, MAIN, arg0=UP), e(20_000, Kind.BLAS_NODE, MAIN, arg0=OUT),
             *(e(t, Kind.BLAS_CALL, MAIN) for t in (20_200, 20_300, 20_450)),
             e(21_000, Kind.GRAPH_END, MAIN)]
    described = [synthetic._node(20_000, UP, "MUL_MAT", "up", (64, 4, 2, 1), []),
                 synthetic._node(20_000, OUT, "MUL_MAT", "out", (64, 4, 1, 1), [])]
    events = np.concatenate([rec.events, np.array(split, rec.events.dtype)])
    nodes = np.concatenate([rec.nodes, np.array(described, rec.nodes.dtype)])
    with_split = replace(rec, events=events, nodes=nodes)
    alone, both = build(rec).ops, build(with_split).ops
    cpu = both.graph == 0
    for name, values in vars(alone).items():
        assert np.array_equal(getattr(both, name)[cpu], values), name
    assert both.begin[~cpu].tolist() == [20_000, 20_300]
    assert both.work_end[~cpu].tolist() == [20_300, 20_450]


def test_a_thread_s_first_node_begins_where_it_entered_the_loop() -> None:
    rec = one_trap_recording()
    entries = [synthetic.event(3_000, Kind.LOOP_ENTER, MAIN),
               synthetic.event(4_000, Kind.LOOP_ENTER, WORKER),
               synthetic.event(GRAPH_END + 100, Kind.LOOP_ENTER, WORKER)]  # no graph's
    events = np.concatenate([rec.events, np.array(entries, rec.events.dtype)])
    ops = build(replace(rec, events=events)).ops
    # The first node's ops begin at the thread's entry, the later ones' at their release still.
    assert list(zip(ops.tid.tolist(), ops.begin.tolist(), strict=True)) == [
        (MAIN, 3_000), (MAIN, 8_000), (MAIN, 9_900),
        (WORKER, 4_000), (WORKER, 8_000), (WORKER, 9_900)]


def test_an_exact_recording_becomes_its_barriers_named() -> None:
    rec = synthetic.recording()
    assert not is_one_trap(rec.events)
    one = as_one_trap(rec)
    assert is_one_trap(one.events)
    assert not np.any(one.events["kind"] == Kind.OP_BEGIN)
    barriers = one.events[one.events["kind"] == Kind.BARRIER]
    in_time = barriers[np.argsort(barriers["ts"], kind="stable")]
    assert in_time["arg0"].tolist() == NAMED
    assert in_time["arg1"].tolist() == AFTER_LOOP
    assert len(one.events) == len(rec.events) - np.count_nonzero(rec.events["kind"]
                                                                 == Kind.OP_BEGIN)


def test_derived_and_exact_ops_are_of_the_same_threads_and_nodes() -> None:
    rec = synthetic.described_at_graph_begin(synthetic.recording())
    exact, derived = build(rec), build(as_one_trap(rec))
    same = agreement(exact, derived)
    assert same["same_ops"] and same["keys"] == same["keys_derived"] == 3
    assert np.array_equal(exact.ops.work_end, derived.ops.work_end)
    # Each thread's op begins where the barrier before released it: before its recorded begin.
    assert (derived.ops.begin <= exact.ops.begin).all()
    itself = agreement(exact, exact)
    assert itself["total_error"] == 0 and itself["op_begin_us"] == {"median": 0, "worst": 0}


def test_barriers_that_name_no_node_are_no_one_trap_recording() -> None:
    rec = synthetic.recording()
    events = rec.events[rec.events["kind"] != Kind.OP_BEGIN]
    assert not is_one_trap(events)
    assert len(build(replace(rec, events=events)).ops) == 0


@pytest.mark.parametrize("seed", range(20))
def test_begins_merge_among_barriers_as_a_sort_would(seed: int) -> None:
    """Barriers and op begins of a few threads, ties in time among both and between them: the
    merge, of columns (work_rows) or of records (with_op_begins), is the stable sort of both by
    thread, then time, each begin after the barriers."""
    rng = np.random.default_rng(seed)
    count, m = int(rng.integers(1, 60)), int(rng.integers(0, 60))
    barriers = np.zeros(count, event_dtype(1))
    barriers["tid"], barriers["ts"] = rng.integers(1, 4, count), rng.integers(0, 20, count)
    barriers["arg0"] = rng.integers(0, 2**63, count)
    barriers = barriers[np.lexsort((barriers["ts"], barriers["tid"]))]
    row = rng.integers(0, count, m)  # each begin at an arrival: its thread's
    ts = rng.integers(0, 20, m).astype(np.uint64)
    by_thread = np.lexsort((ts, barriers["tid"][row]))
    row, ts = row[by_thread], ts[by_thread]
    begins = Derived(tid=barriers["tid"][row], ts=ts, cpu=barriers["cpu"][row],
                     arg0=rng.integers(1, 2**63, m).astype(np.uint64),
                     arg1=np.zeros(m, np.uint64), ith=np.zeros(m, np.uint8),
                     traced=np.ones(m, bool), row=row, nth=np.ones(m, np.int64))
    graph, begin_graph = rng.integers(-1, 3, count), rng.integers(0, 3, m)
    merged = work_rows(barriers["tid"], barriers["ts"], graph, begins, begin_graph)
    both = np.concatenate([barriers, begins.records(barriers)])
    is_begin = np.arange(len(both)) >= count
    order = np.lexsort((is_begin, both["ts"], both["tid"]))
    expected = (both["tid"][order], both["ts"][order], is_begin[order],
                np.concatenate([graph, begin_graph])[order])
    for a, b in zip(merged, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert with_op_begins(barriers, begins).tobytes() == both[order].tobytes()
