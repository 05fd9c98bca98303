"""The model's compiled passes (model/passes.c) give what their numpy twins give, and the model
falls back to numpy where the library is absent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.events import NODE, Kind, event_dtype
from profinfer_perfetto.model import layout, native, one_trap, trace_model
from profinfer_perfetto.model.one_trap import Begins, as_one_trap
from profinfer_perfetto.model.trace_model import Nodes, build
from tests import synthetic


@pytest.fixture(scope="module")
def passes(wheel_library: Callable[[str], Path]) -> native.Passes:
    """passes.c as the package's wheel carries it (built by scripts/hatch_build.py)."""
    loaded = native.load(wheel_library("profinfer_perfetto/model/_passes.so"))
    assert loaded is not None
    return loaded


def _nodes(seed: int, n: int) -> np.ndarray:
    """Nodes whose tensors and sources share a few addresses: views, empty slots, in-place ops
    (a node that reads its own storage), storages written again and again."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(1, 2**47, 12).astype(np.uint64)

    def addresses(shape: tuple[int, ...], empty: float) -> np.ndarray:
        picked = pool[rng.integers(0, len(pool), shape)]
        return np.where(rng.random(shape) < empty, np.uint64(0), picked)

    nodes = np.zeros(n, NODE)
    nodes["ptr"] = addresses((n,), 0.0)
    nodes["view_src"] = addresses((n,), 0.7)
    slots = nodes["src"].shape[1]
    nodes["src"]["ptr"] = addresses((n, slots), 0.5)
    nodes["src"]["view_src"] = addresses((n, slots), 0.7)
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_both_find_the_same_producers(passes: native.Passes, seed: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes as rows of descriptors in another order, some of them twice."""
    rng = np.random.default_rng(seed)
    nodes = _nodes(seed, int(rng.integers(1, 300)))
    desc = rng.integers(0, len(nodes), int(rng.integers(0, 300)))
    monkeypatch.setattr(native, "PASSES", None)
    by_numpy = trace_model._producers(nodes, desc)
    compiled = passes.last_writers(nodes, desc)
    for a, b in zip(compiled, by_numpy, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(20))
def test_both_find_the_same_nodes(passes: native.Passes, seed: int,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs that compute a tensor twice (the last node counts), queries of graphs and
    addresses with no node."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 200)), int(rng.integers(0, 400))
    nodes = _nodes(seed, n)
    graph = np.sort(rng.integers(0, 6, n))
    model_nodes = Nodes(graph=graph, index=np.zeros(n, np.int64), descriptors=nodes,
                        desc=np.arange(n), ptr=nodes["ptr"], names=[""] * n,
                        layer=np.zeros(n, np.int64))
    q_graph = rng.integers(-1, 8, m)
    q_ptr = rng.choice(np.append(nodes["ptr"], np.uint64(7)), m)  # 7: no node's
    monkeypatch.setattr(native, "PASSES", None)
    by_numpy = trace_model._node_lookup(model_nodes, q_graph, q_ptr)
    assert np.array_equal(passes.node_index(graph, nodes["ptr"], q_graph, q_ptr), by_numpy)


@pytest.mark.parametrize("seed", range(20))
def test_both_find_the_same_op_spans(passes: native.Passes, seed: int) -> None:
    """Work rows of a few threads and graphs (graphs that end before a thread's next op, rows
    before a thread's first op begin, ops with no barrier)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    work = np.zeros(n, event_dtype(0))
    work["tid"] = rng.integers(1, 4, n)
    work["ts"] = rng.integers(0, 1_000, n)
    work = work[np.lexsort((work["ts"], work["tid"]))]
    work["kind"] = np.where(rng.random(n) < 0.4, Kind.OP_BEGIN, Kind.BARRIER)
    graph = rng.integers(0, 5, n)
    graph_end = rng.integers(0, 1_000, 5).astype(np.uint64)
    is_begin = work["kind"] != Kind.BARRIER
    rows, last_barrier = trace_model._op_rows(work["tid"], is_begin, graph)
    by_numpy = (rows, last_barrier, *trace_model._op_ends(work["tid"], work["ts"], graph, rows,
                                                          last_barrier, graph_end[graph[rows]]))
    compiled = passes.op_spans(work["tid"], work["ts"], is_begin, graph, graph_end)
    for a, b in zip(compiled, by_numpy, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(20))
def test_both_pair_begins_with_barriers_alike(passes: native.Passes, seed: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Op begins among barriers of a few threads and graphs, ties in time among both and
    between them (each begin after the barriers): merged in one pass as by work_rows, then
    op_spans (graphs that end before a thread's next op, barriers of another graph)."""
    rng = np.random.default_rng(seed)
    barriers, graph = _barriers(rng, int(rng.integers(0, 300)))
    m = int(rng.integers(0, 100))
    tid, ts = rng.integers(1, 5, m).astype(np.uint32), rng.integers(0, 200, m).astype(np.uint64)
    if len(barriers):  # half of them at a barrier's thread and time
        tie = rng.integers(0, len(barriers), m)
        at = rng.random(m) < 0.5
        tid[at], ts[at] = barriers["tid"][tie[at]], barriers["ts"][tie[at]]
    order = np.lexsort((ts, tid))
    begins = Begins(tid[order], ts[order], np.zeros(m, np.uint16), np.ones(m, np.uint64),
                    np.zeros(m, np.uint64), np.zeros(m, np.uint8), np.ones(m, bool))
    begin_graph = rng.integers(0, 4, m)
    graph_end = rng.integers(0, 250, 4).astype(np.uint64)
    results = []
    for compiled in (passes, None):
        monkeypatch.setattr(native, "PASSES", compiled)
        results.append(trace_model._begin_spans(barriers["tid"], barriers["ts"], graph, begins,
                                                begin_graph, graph_end))
    for a, b in zip(*results, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    with pytest.raises(IndexError):
        passes.merged_spans(barriers["tid"], barriers["ts"], graph, np.ones(1, np.uint32),
                            np.ones(1, np.uint64), np.array([4]), graph_end)


def test_both_give_the_same_model(passes: native.Passes, monkeypatch: pytest.MonkeyPatch
                                  ) -> None:
    """Edges, ops and a Vulkan split's device times (their nodes looked up alike), of runs
    recorded with two traps per op and with one (a fused pair among its nodes)."""
    recordings = [synthetic.recording(), synthetic.decode_run(3, steps=12),
                  synthetic.timed_step(),
                  *(as_one_trap(synthetic.described_at_graph_begin(r))
                    for r in (synthetic.recording(), synthetic.decode_run(3, steps=12)))]
    monkeypatch.setattr(native, "PASSES", None)
    by_numpy = [build(r) for r in recordings]
    monkeypatch.setattr(native, "PASSES", passes)
    for recording, expected in zip(recordings, by_numpy, strict=True):
        model = build(recording)
        assert len(model.edges) and np.array_equal(model.edges, expected.edges)
        assert vars(model.ops).keys() == vars(expected.ops).keys()
        for name, values in vars(model.ops).items():
            assert np.array_equal(values, getattr(expected.ops, name)), name
        assert (model.device_ops is None) == (expected.device_ops is None)
        if model.device_ops is not None and expected.device_ops is not None:
            assert np.array_equal(model.device_ops.arg0, expected.device_ops.arg0)
            assert np.array_equal(model.device_ops.arg1, expected.device_ops.arg1)


def test_a_missing_library_leaves_numpy_to_model(tmp_path: Path) -> None:
    assert native.load(tmp_path / "_passes.so") is None


def _barriers(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Barriers of a few threads in a few graphs, by thread and time, naming a few nodes (ties
    in time, a node named twice by a thread, graphs a thread is not in)."""
    barriers = np.zeros(n, event_dtype(0))
    barriers["kind"] = Kind.BARRIER
    barriers["tid"] = rng.integers(1, 5, n)
    barriers["ts"] = rng.integers(0, 200, n)
    barriers["arg0"] = rng.integers(1, 9, n) * 0x100
    order = np.lexsort((barriers["ts"], barriers["tid"]))
    return barriers[order], rng.integers(0, 4, n)[order]


@pytest.mark.parametrize("seed", range(20))
def test_both_derive_the_same_one_trap_arrivals(passes: native.Passes, seed: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals, releases, thread numbers and loop entries (model/one_trap.py)."""
    rng = np.random.default_rng(seed)
    barriers, g = _barriers(rng, int(rng.integers(0, 300)))
    graph_begin = rng.integers(0, 50, 4).astype(np.uint64)
    graph_tid = rng.integers(1, 6, 4).astype(np.uint32)
    loops, loop_g = _barriers(rng, int(rng.integers(0, 20)))
    loops["kind"] = Kind.LOOP_ENTER
    results = []
    for compiled in (passes, None):
        monkeypatch.setattr(native, "PASSES", compiled)
        rows = one_trap._arrivals(g, barriers["tid"], barriers["arg0"], barriers["ts"])
        arrival, arrival_g = barriers[rows], g[rows]
        results.append([rows, *one_trap._releases(arrival_g, arrival["arg0"], arrival["ts"],
                                                  graph_begin),
                        *one_trap._ith(arrival_g, arrival["tid"], graph_tid),
                        one_trap._entered(loops, loop_g, arrival["tid"], arrival_g)])
    for a, b in zip(*results, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(20))
def test_both_number_the_same_flows(passes: native.Passes, seed: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Flows in start order over a few graphs: mostly short, some open across the next graph's
    start (its numbering then shares an id while open: ids count on over the graphs), ties in
    time, a flow that ends before it starts."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    begin = np.sort(rng.integers(0, 150, n))
    end = begin + np.where(rng.random(n) < 0.05, rng.integers(0, 80, n), rng.integers(0, 3, n))
    end[rng.random(n) < 0.02] -= 10
    graph = np.searchsorted(np.sort(rng.integers(0, 150, 3)), begin)
    results = []
    for compiled in (passes, None):
        monkeypatch.setattr(native, "PASSES", compiled)
        results.append(layout.flow_ids(begin, end, graph))
    assert results[0].dtype == results[1].dtype and np.array_equal(results[0], results[1])
    with pytest.raises(IndexError):
        passes.flow_ids(np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([-1]))


def test_a_descriptor_out_of_range_is_refused(passes: native.Passes) -> None:
    """The compiled pass reads a node's descriptor where its index says: never past them."""
    nodes = _nodes(0, 4)
    with pytest.raises(IndexError):
        passes.last_writers(nodes, np.array([0, 4]))
