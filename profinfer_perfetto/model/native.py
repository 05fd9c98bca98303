"""The model's compiled passes, where the install built them (profinfer_perfetto/compiled.py):
passes.c as _passes.so beside this file. Where it is absent, the model computes the same with
numpy (each caller keeps its numpy twin; tests/unit/test_model_native.py holds them equal)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from profinfer_perfetto import compiled

LIBRARY = Path(__file__).with_name("_passes.so")
"""Where the install builds passes.c."""
ABI = 9
"""passes.c's passes_abi(): the functions and arguments this module calls."""

_INT64 = ctypes.c_int64
_POINTER = ctypes.c_void_p


class _NodeFields(ctypes.Structure):
    """passes.c's struct node_fields: where a NODE record's fields lie in it, in bytes."""

    _fields_ = [(name, _INT64) for name in ("size", "ptr", "view_src", "src", "src_size",
                                             "slots", "src_ptr", "src_view")]


def _node_fields(dtype: np.dtype) -> _NodeFields:
    fields = dtype.fields
    assert fields is not None and fields["src"][0].subdtype is not None
    source, (slots,) = fields["src"][0].subdtype
    assert source.fields is not None
    return _NodeFields(dtype.itemsize, fields["ptr"][1], fields["view_src"][1], fields["src"][1],
                       source.itemsize, slots, source.fields["ptr"][1],
                       source.fields["view_src"][1])


def _within(index: np.ndarray, count: int, what: str) -> None:
    """Refuse an index a pass would read past `count` rows with (IndexError: `what` is out of
    range)."""
    if len(index) and not 0 <= int(index.min()) <= int(index.max()) < count:
        raise IndexError(f"{what} is out of range")


class Passes:
    """passes.c's functions, loaded from a built library."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._last_writers = library.last_writers
        self._last_writers.argtypes = [_POINTER, _POINTER, _INT64, ctypes.POINTER(_NodeFields),
                                       _POINTER, _POINTER, _POINTER]
        self._last_writers.restype = _INT64
        self._node_index = library.node_index
        self._node_index.argtypes = [_INT64, _POINTER, _POINTER, _INT64, _POINTER, _POINTER,
                                     _POINTER]
        self._node_index.restype = _INT64
        self._op_spans = library.op_spans
        self._op_spans.argtypes = [_INT64, *[_POINTER] * 9]
        self._op_spans.restype = _INT64
        self._merged_spans = library.merged_spans
        self._merged_spans.argtypes = [_INT64, *[_POINTER] * 3, _INT64, *[_POINTER] * 6]
        self._merged_spans.restype = None
        self._arrivals = library.arrivals
        self._arrivals.argtypes = [_INT64, *[_POINTER] * 4]
        self._arrivals.restype = _INT64
        self._releases = library.releases
        self._releases.argtypes = [_INT64, *[_POINTER] * 8]
        self._releases.restype = _INT64
        self._thread_numbers = library.thread_numbers
        self._thread_numbers.argtypes = [_INT64, *[_POINTER] * 5]
        self._thread_numbers.restype = _INT64
        self._entries = library.entries
        self._entries.argtypes = [_INT64, _POINTER, _POINTER, _POINTER, _INT64, _POINTER,
                                  _POINTER, _POINTER]
        self._entries.restype = _INT64
        self._flow_ids = library.flow_ids
        self._flow_ids.argtypes = [_INT64, *[_POINTER] * 3, _INT64, _POINTER]
        self._flow_ids.restype = _INT64

    def last_writers(self, records: np.ndarray, desc: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each source of the nodes (rows `desc` of the NODE records `records`, in graph order)
        as (reader, slot), with its producer: the last earlier node that wrote the storage it
        reads (-1: none)."""
        records = np.ascontiguousarray(records)
        desc = np.ascontiguousarray(desc, np.int64)
        _within(desc, len(records), "passes.c: last_writers: a node's descriptor")
        fields = _node_fields(records.dtype)
        out = [np.empty(len(desc) * fields.slots, np.int64) for _ in range(3)]
        found = self._last_writers(records.ctypes.data, desc.ctypes.data, len(desc),
                                   ctypes.byref(fields), *(o.ctypes.data for o in out))
        if found < 0:
            raise MemoryError("passes.c: last_writers")
        reader, slot, producer = (o[:found] for o in out)
        return reader, slot, producer

    def node_index(self, graph: np.ndarray, ptr: np.ndarray, q_graph: np.ndarray,
                   q_ptr: np.ndarray) -> np.ndarray:
        """For each query (a graph, a tensor address), the last node (by index) of that graph
        with that address (nodes: `graph` and `ptr`), -1 for none."""
        columns = _columns((graph, np.int64), (ptr, np.uint64), (q_graph, np.int64),
                           (q_ptr, np.uint64))
        found = np.empty(len(q_graph), np.int64)
        if self._node_index(len(graph), columns[0].ctypes.data, columns[1].ctypes.data,
                            len(q_graph), columns[2].ctypes.data, columns[3].ctypes.data,
                            found.ctypes.data) < 0:
            raise MemoryError("passes.c: node_index")
        return found

    def op_spans(self, tid: np.ndarray, ts: np.ndarray, begins: np.ndarray, graph: np.ndarray,
                 graph_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per op begin among work rows (op begins where `begins`, else barriers; by thread and
        time, each in its `graph`): its row, its last barrier's row (-1: none), its end and the
        end of its work (trace_model._op_rows and _op_ends)."""
        columns = _columns((tid, np.uint32), (ts, np.uint64), (begins, np.uint8),
                           (graph, np.int64), (graph_end, np.uint64))
        n = int(np.count_nonzero(begins))
        row, last_barrier = np.empty(n, np.int64), np.empty(n, np.int64)
        end, work_end = np.empty(n, np.uint64), np.empty(n, np.uint64)
        self._op_spans(len(tid), *(c.ctypes.data for c in columns),
                       *(o.ctypes.data for o in (row, last_barrier, end, work_end)))
        return row, last_barrier, end, work_end

    def merged_spans(self, tid: np.ndarray, ts: np.ndarray, graph: np.ndarray,
                     begin_tid: np.ndarray, begin_ts: np.ndarray, begin_graph: np.ndarray,
                     graph_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The end and end of work of op begins (by thread, then time, each in its graph)
        among barriers (so sorted), as op_spans gives them for the two merged
        (one_trap.work_rows)."""
        columns = _columns((tid, np.uint32), (ts, np.uint64), (graph, np.int64),
                           (begin_tid, np.uint32), (begin_ts, np.uint64),
                           (begin_graph, np.int64), (graph_end, np.uint64))
        _within(columns[5], len(graph_end), "passes.c: merged_spans: a begin's graph")
        end, work_end = np.empty(len(begin_ts), np.uint64), np.empty(len(begin_ts), np.uint64)
        self._merged_spans(len(tid), *(c.ctypes.data for c in columns[:3]), len(begin_ts),
                           *(c.ctypes.data for c in columns[3:]), end.ctypes.data,
                           work_end.ctypes.data)
        return end, work_end

    def arrivals(self, graph: np.ndarray, tid: np.ndarray, ptr: np.ndarray) -> np.ndarray:
        """Of barriers (by thread, then time, each in its graph, naming a node `ptr`), the rows
        of each thread's last at each node of each graph, in order (one_trap._arrivals)."""
        g, t, p = _columns((graph, np.int64), (tid, np.uint32), (ptr, np.uint64))
        rows = np.empty(len(g), np.int64)
        found = self._arrivals(len(g), g.ctypes.data, t.ctypes.data, p.ctypes.data,
                               rows.ctypes.data)
        if found < 0:
            raise MemoryError("passes.c: arrivals")
        return rows[:found]

    def releases(self, graph: np.ndarray, ptr: np.ndarray, ts: np.ndarray,
                 graph_begin: np.ndarray) -> tuple[np.ndarray, ...]:
        """Arrivals' (graph, node)s: each one's, and per (graph, node) its graph, its node and
        the release before it (one_trap._releases)."""
        columns = _columns((graph, np.int64), (ptr, np.uint64), (ts, np.uint64),
                           (graph_begin, np.uint64))
        m = len(columns[0])
        group, group_graph = np.empty(m, np.int64), np.empty(m, np.int64)
        group_ptr, before = np.empty(m, np.uint64), np.empty(m, np.uint64)
        found = self._releases(m, *(c.ctypes.data for c in columns),
                               *(o.ctypes.data for o in (group, group_graph, group_ptr, before)))
        if found < 0:
            raise MemoryError("passes.c: releases")
        return group, group_graph[:found], group_ptr[:found], before[:found]

    def thread_numbers(self, graph: np.ndarray, tid: np.ndarray, graph_tid: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Per arrival, its thread's number in its graph and the graph's threads
        (one_trap._ith)."""
        g, t, callers = _columns((graph, np.int64), (tid, np.uint32), (graph_tid, np.uint32))
        ith, nth = np.empty(len(g), np.int64), np.empty(len(g), np.int64)
        if self._thread_numbers(len(g), g.ctypes.data, t.ctypes.data, callers.ctypes.data,
                                ith.ctypes.data, nth.ctypes.data) < 0:
            raise MemoryError("passes.c: thread_numbers")
        return ith, nth

    def entries(self, graph: np.ndarray, tid: np.ndarray, ts: np.ndarray, q_graph: np.ndarray,
                q_tid: np.ndarray) -> np.ndarray:
        """Per (graph, thread) queried, when the thread last entered the graph loop in the graph
        (loop entries by thread, then time; 0: none; one_trap._entered)."""
        g, t, at, qg, qt = _columns((graph, np.int64), (tid, np.uint32), (ts, np.uint64),
                                    (q_graph, np.int64), (q_tid, np.uint32))
        found = np.empty(len(qg), np.uint64)
        if self._entries(len(g), g.ctypes.data, t.ctypes.data, at.ctypes.data, len(qg),
                         qg.ctypes.data, qt.ctypes.data, found.ctypes.data) < 0:
            raise MemoryError("passes.c: entries")
        return found

    def flow_ids(self, begin: np.ndarray, end: np.ndarray, graph: np.ndarray) -> np.ndarray:
        """Ids for flows in start order (`begin` sorted; each open up to and at its `end`,
        started in `graph`) such that two flows open at once never share one
        (layout.flow_ids)."""
        b, e, g = _columns((begin, np.int64), (end, np.int64), (graph, np.int64))
        graphs = int(g.max(initial=-1)) + 1
        _within(g, graphs, "passes.c: flow_ids: a flow's graph")
        ids = np.empty(len(b), np.int64)
        if self._flow_ids(len(b), b.ctypes.data, e.ctypes.data, g.ctypes.data, graphs,
                          ids.ctypes.data) < 0:
            raise MemoryError("passes.c: flow_ids")
        return ids


def _columns(*arrays: tuple[np.ndarray, type]) -> list[np.ndarray]:
    """Each array contiguous, of its C type."""
    return [np.ascontiguousarray(a, t) for a, t in arrays]


def load(path: Path = LIBRARY) -> Passes | None:
    """The passes built at `path`, or None where there is none, it does not load or it was
    built from another version of passes.c (compiled.load)."""
    library = compiled.load(path, "passes_abi", ABI)
    return None if library is None else Passes(library)


PASSES = load()
"""The compiled passes of this install, if it has them."""
