"""Ops from one trap per op: each thread's barrier arrivals in ggml's graph loop.

ggml's compute loop runs every non-empty node of a graph on every thread, then calls
ggml_barrier. A one-trap recording has no op begins, only those calls, each naming the node its
thread has just finished (a BARRIER's arg0; 0: not known). Per graph computation:

- a thread's arrival at node n, a(t, n), is its last barrier naming n: the end of its work;
- the barrier's release r(n) is the last arrival there over the graph's threads (the threads
  leave it a wake-up later, which this ignores): the end of every thread's op on n;
- a thread's op on n begins at the release before it (the node before's; the first node's at
  the graph's begin), so the wake-up and the loop's own steps count as its work; but not before
  the thread entered the loop's function for the graph (a LOOP_ENTER, where the build has one):
  the thread pool's kick-off and wake-up before the first node are no op's.

The derivation places an op begin there for each (thread, node), then the model pairs op begins
and barriers as for a recording that has them (trace_model._one_trap_ops, as _ops).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from profinfer_perfetto.capture.events import COUNTER_UNREAD, Kind
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.model import native
from profinfer_perfetto.model.lookup import Latest, in_graph, last_descriptor, latest
from profinfer_perfetto.model.records import sorted_unique, take, whole

FUSED_OPS = ("RMS_NORM", "MUL")
"""The node pair ggml's CPU backend fuses (ggml_compute_forward_rms_norm_mul_fused): one call,
one barrier, which names the second node."""


def is_one_trap(events: np.ndarray) -> bool:
    """Whether a recording's ops are to be derived from its barriers: it has barriers that name
    their node and no op begins."""
    kinds = events["kind"]
    if np.any((kinds == Kind.OP_BEGIN) | (kinds == Kind.OP_SKIP)):
        return False
    return bool(np.any((kinds == Kind.BARRIER) & (events["arg0"] != 0)))


@dataclass
class Begins:
    """Op begins as columns, by thread, then time: a recording's own (`of_events`) or derived
    from its barriers (op_begins)."""

    tid: np.ndarray
    ts: np.ndarray
    cpu: np.ndarray
    arg0: np.ndarray
    """The node's tensor address (a fused pair's first node)."""
    arg1: np.ndarray
    """A fused pair's second node's tensor address, else 0."""
    ith: np.ndarray
    traced: np.ndarray
    """Whether the op ran (an OP_BEGIN, not an OP_SKIP)."""

    @classmethod
    def of_events(cls, events: np.ndarray) -> Begins:
        """Events' fields (views, not copies); `traced`: which are OP_BEGINs."""
        return cls(events["tid"], events["ts"], events["cpu"], events["arg0"], events["arg1"],
                   events["ith"], events["kind"] == Kind.OP_BEGIN)

    def __len__(self) -> int:
        return len(self.ts)

    def where(self, rows: np.ndarray) -> Begins:
        """The begins of `rows` (an index array or a mask)."""
        return Begins(self.tid[rows], self.ts[rows], self.cpu[rows], self.arg0[rows],
                      self.arg1[rows], self.ith[rows], self.traced[rows])


@dataclass
class Derived(Begins):
    """Op begins op_begins derived: each at an arrival, `row` (its event), on that arrival's
    thread and CPU; `nth`: its graph's threads."""

    row: np.ndarray
    nth: np.ndarray

    def records(self, events: np.ndarray) -> np.ndarray:
        """The begins as OP_BEGIN events (copies of their arrivals' records), counters
        unread."""
        begins = take(events, self.row)
        begins["kind"] = Kind.OP_BEGIN
        begins["ts"], begins["arg0"], begins["arg1"] = self.ts, self.arg0, self.arg1
        begins["ith"], begins["aux"] = self.ith, self.nth
        begins["counter"] = np.uint64(COUNTER_UNREAD)
        return begins


def op_begins(events: np.ndarray, graph_of: np.ndarray, graph_begin: np.ndarray,
              graph_tid: np.ndarray, descriptors: np.ndarray, fused_ops: tuple[int, int],
              index: Latest) -> Derived:
    """The op begins of `events` (sorted by thread, then time; `graph_of`: each one's graph, -1
    for none), sorted so: one for each thread's share of each node its barriers name, at the
    release before, on the CPU of the thread's arrival; `fused_ops` (op ids) makes a pair of a
    node and the one it reads (`index`: by_tensor of the descriptors)."""
    named = np.flatnonzero((events["kind"] == Kind.BARRIER) & (events["arg0"] != 0)
                           & (graph_of >= 0))
    arrived = named[_arrivals(graph_of[named], events["tid"][named], events["arg0"][named],
                              events["ts"][named])]
    g, tid, ptr = graph_of[arrived], events["tid"][arrived], events["arg0"][arrived]
    group, group_g, group_ptr, before = _releases(g, ptr, events["ts"][arrived], graph_begin)
    first = _fused_first(group_g, group_ptr, before, descriptors, fused_ops, index)[group]
    ith, nth = _ith(g, tid, graph_tid)
    ts = np.maximum(before[group], _entered(events, graph_of, tid, g))
    order = np.lexsort((ts, tid))
    first, ptr = first[order], ptr[order]
    fused = first != 0
    return Derived(tid=tid[order], ts=ts[order], cpu=events["cpu"][arrived[order]],
                   arg0=np.where(fused, first, ptr), arg1=np.where(fused, ptr, 0),
                   ith=ith[order].astype(np.uint8), traced=np.ones(len(order), bool),
                   row=arrived[order], nth=nth[order])


def with_op_begins(events: np.ndarray, begins: Derived) -> np.ndarray:
    """`events` and op begins (each sorted by thread, then time) as one array so sorted, each
    begin after the events of its thread at its time (_merged): for a recording whose events
    hold ops of their own (a BLAS or Vulkan split's: backends.py); work_rows pairs a CPU run's
    by columns."""
    at, is_begin = _merged(events["tid"], events["ts"], begins)
    merged = np.empty(len(is_begin), events.dtype)
    whole(merged)[at], whole(merged)[~is_begin] = whole(begins.records(events)), whole(events)
    return merged


def work_rows(tid: np.ndarray, ts: np.ndarray, graph: np.ndarray, begins: Begins,
              begin_graph: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Barriers (their threads, times and graphs, by thread, then time) and op begins (so
    sorted, in `begin_graph`) as one sequence of work rows so sorted, each begin after the
    barriers of its thread at its time (_merged): its threads, times, which rows are begins,
    and graphs. A merge of columns, not of whole records (a third of the derivation's time,
    2026-12-02)."""
    at, is_begin = _merged(tid, ts, begins)
    barrier_at = np.flatnonzero(~is_begin)
    columns = []
    for barrier, begin in ((tid, begins.tid), (ts, begins.ts), (graph, begin_graph)):
        merged = np.empty(len(is_begin), barrier.dtype)
        merged[at], merged[barrier_at] = begin, barrier
        columns.append(merged)
    return columns[0], columns[1], is_begin, columns[2]


def _merged(tid: np.ndarray, ts: np.ndarray, begins: Begins) -> tuple[np.ndarray, np.ndarray]:
    """Where rows (their threads and times, by thread, then time) and op begins (so sorted) go
    in one sequence so sorted, each begin after the rows of its thread at its time: the begins'
    positions, and which places are begins. A merge, not a sort of both."""
    at = np.empty(len(begins), np.int64)
    threads = sorted_unique(begins.tid)
    lo, hi = (np.searchsorted(tid, threads, side) for side in ("left", "right"))
    first = np.searchsorted(begins.tid, threads)
    last = np.append(first[1:], len(begins))
    for t in range(len(threads)):
        at[first[t]:last[t]] = lo[t] + np.searchsorted(ts[lo[t]:hi[t]],
                                                       begins.ts[first[t]:last[t]], "right")
    at += np.arange(len(begins))
    is_begin = np.zeros(len(tid) + len(begins), bool)
    is_begin[at] = True
    return at, is_begin


def _arrivals(g: np.ndarray, tid: np.ndarray, ptr: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Of barriers (by thread, then time; each in graph `g`, naming node `ptr`), the rows of
    each thread's last at each node of each graph, in order. By passes.c where the install
    built it (model/native.py), else by numpy: the same; as are _releases, _ith and
    _entered."""
    if native.PASSES is not None:
        return native.PASSES.arrivals(g, tid, ptr)
    order = np.lexsort((ts, ptr, tid, g))
    sorted_tid, sorted_ptr, sorted_g = tid[order], ptr[order], g[order]
    last = np.ones(len(order), bool)
    last[:-1] = ((sorted_g[1:] != sorted_g[:-1]) | (sorted_tid[1:] != sorted_tid[:-1])
                 | (sorted_ptr[1:] != sorted_ptr[:-1]))
    rows: np.ndarray = np.sort(order[last])
    return rows


def _entered(events: np.ndarray, graph_of: np.ndarray, tid: np.ndarray, g: np.ndarray
             ) -> np.ndarray:
    """Per (thread, graph), the time the thread entered the graph loop's function in the graph
    (its last entry there; 0: none)."""
    loops = np.flatnonzero((events["kind"] == Kind.LOOP_ENTER) & (graph_of >= 0))
    if len(loops) == 0:
        return np.zeros(len(g), np.uint64)
    ts = events["ts"][loops]
    if native.PASSES is not None:
        return native.PASSES.entries(graph_of[loops], events["tid"][loops], ts, g, tid)
    entry = latest(_thread_in_graph(graph_of[loops], events["tid"][loops]), ts,
                   _thread_in_graph(g, tid), np.full(len(g), np.iinfo(np.int64).max))
    return np.where(entry >= 0, ts[np.maximum(entry, 0)], 0).astype(np.uint64)


def _thread_in_graph(g: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One key per (graph, thread)."""
    return (g.astype(np.uint64) << np.uint64(32)) | tid.astype(np.uint64)


def _releases(g: np.ndarray, ptr: np.ndarray, ts: np.ndarray, graph_begin: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The (graph, node) of each arrival (in graph `g`, at node `ptr`, at `ts`), as an index
    into the (graph, node)s (numbered by their first arrival); and per (graph, node): its graph,
    its tensor and the release of the barrier before it (the graph's begin for its first node),
    nodes ordered by their barriers' releases, then by number."""
    if native.PASSES is not None:
        group, group_g, group_ptr, before = native.PASSES.releases(g, ptr, ts, graph_begin)
        return group, group_g, group_ptr, before
    order = np.lexsort((ptr, g))
    sorted_g, ptr = g[order], ptr[order]
    new = np.ones(len(order), bool)
    new[1:] = (sorted_g[1:] != sorted_g[:-1]) | (ptr[1:] != ptr[:-1])
    starts = np.flatnonzero(new)
    by_first = np.argsort(order[starts])  # a (graph, node)'s first row: its first arrival
    number = np.empty(len(starts), np.int64)
    number[by_first] = np.arange(len(starts))
    group = np.empty(len(order), np.int64)
    group[order] = number[np.cumsum(new) - 1]
    group_g, group_ptr = sorted_g[starts][by_first], ptr[starts][by_first]
    if len(starts) == 0:
        return group, group_g, group_ptr, np.empty(0, np.uint64)
    release = np.maximum.reduceat(ts[order], starts)[by_first]
    by_time = np.lexsort((release, group_g))
    same_graph = np.zeros(len(starts), bool)
    same_graph[1:] = group_g[by_time][1:] == group_g[by_time][:-1]
    previous = np.concatenate([[0], release[by_time][:-1]]).astype(np.uint64)
    before = np.empty(len(starts), np.uint64)
    before[by_time] = np.where(same_graph, previous, graph_begin[group_g[by_time]])
    return group, group_g, group_ptr, before


def _fused_first(group_g: np.ndarray, group_ptr: np.ndarray, at: np.ndarray,
                 descriptors: np.ndarray, fused_ops: tuple[int, int], index: Latest
                 ) -> np.ndarray:
    """Per (graph, node), the first node of the fused pair it ends (0: none): the node of the
    pair's first op it reads, where no barrier of its graph names that one (`index`: by_tensor
    of the descriptors)."""
    first = np.zeros(len(group_ptr), np.uint64)
    second = last_descriptor(index, group_ptr, at)
    rows = np.flatnonzero(second >= 0)
    rows = rows[descriptors["op"][second[rows]] == fused_ops[1]]
    # Every source of every such node at once, a row of slots per node.
    src = descriptors["src"]["ptr"][second[rows]]
    slots = src.shape[1]
    flat = src.reshape(-1)
    pair = flat != 0
    read = last_descriptor(index, flat[pair], np.repeat(at[rows], slots)[pair])
    pair[pair] = read >= 0
    pair[pair] = descriptors["op"][read[read >= 0]] == fused_ops[0]
    g = np.repeat(group_g[rows], slots)[pair]
    pair[pair] = in_graph(group_g, group_ptr, g, flat[pair]) < 0  # no barrier of its own
    taken = pair.reshape(-1, slots)
    has = taken.any(axis=1)
    first[rows[has]] = src[has, taken.argmax(axis=1)[has]]
    return first


def _ith(g: np.ndarray, tid: np.ndarray, graph_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per arrival, its thread's number in its graph (0: the thread that computes the graph, then
    the others by thread id) and the graph's threads seen."""
    if native.PASSES is not None:
        return native.PASSES.thread_numbers(g, tid, graph_tid)
    other = tid != graph_tid[g]
    order = np.lexsort((tid, other, g))
    sorted_g, sorted_tid = g[order], tid[order]
    new_graph = np.ones(len(order), bool)
    new_graph[1:] = sorted_g[1:] != sorted_g[:-1]
    new_thread = new_graph.copy()
    new_thread[1:] |= sorted_tid[1:] != sorted_tid[:-1]
    number = np.cumsum(new_thread) - 1
    ith = np.empty(len(order), np.int64)
    ith[order] = number - np.maximum.accumulate(np.where(new_graph, number, 0))
    nth = np.zeros(len(graph_tid), np.int64)
    np.maximum.at(nth, g, ith + 1)
    return ith, nth[g]


def as_one_trap(recording: Recording) -> Recording:
    """What one trap per op would have recorded of a run recorded with both: its barriers, each
    naming the node its thread's latest op begin in the graph named (the second of a fused
    pair) where it names none, the thread's last barrier in the graph the one after the loop
    (arg1 1); no op begins or skips."""
    events = recording.events
    events = events[np.lexsort((np.arange(len(events)), events["ts"], events["tid"]))]
    kinds = events["kind"]
    graph_begin = np.sort(events["ts"][kinds == Kind.GRAPH_BEGIN])
    graph_no = np.searchsorted(graph_begin, events["ts"], side="right")
    begins = np.flatnonzero(kinds == Kind.OP_BEGIN)
    barriers = np.flatnonzero(kinds == Kind.BARRIER)
    op = latest(events["tid"][begins], begins, events["tid"][barriers], barriers)
    op_row = begins[np.maximum(op, 0)]
    same = (op >= 0) & (graph_no[op_row] == graph_no[barriers])
    node = np.where(events["arg1"][op_row] != 0, events["arg1"][op_row], events["arg0"][op_row])
    named = events["arg0"][barriers]
    events["arg0"][barriers] = np.where((named == 0) & same, node, named)
    after = np.ones(len(barriers), bool)
    after[:-1] = ((events["tid"][barriers][1:] != events["tid"][barriers][:-1])
                  | (graph_no[barriers][1:] != graph_no[barriers][:-1]))
    events["arg1"][barriers] = after
    kept = (kinds != Kind.OP_BEGIN) & (kinds != Kind.OP_SKIP)
    return replace(recording, events=events[kept])
