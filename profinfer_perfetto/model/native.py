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
ABI = 3
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


class Passes:
    """passes.c's functions, loaded from a built library."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._last_writers = library.last_writers
        self._last_writers.argtypes = [_POINTER, _INT64, ctypes.POINTER(_NodeFields), _POINTER,
                                       _POINTER, _POINTER]
        self._last_writers.restype = _INT64
        self._node_index = library.node_index
        self._node_index.argtypes = [_INT64, _POINTER, _POINTER, _INT64, _POINTER, _POINTER,
                                     _POINTER]
        self._node_index.restype = _INT64
        self._op_spans = library.op_spans
        self._op_spans.argtypes = [_INT64, *[_POINTER] * 9]
        self._op_spans.restype = _INT64

    def last_writers(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each source of the nodes (NODE records, in graph order) as (reader, slot), with its
        producer: the last earlier node that wrote the storage it reads (-1: none)."""
        nodes = np.ascontiguousarray(nodes)
        fields = _node_fields(nodes.dtype)
        out = [np.empty(len(nodes) * fields.slots, np.int64) for _ in range(3)]
        found = self._last_writers(nodes.ctypes.data, len(nodes), ctypes.byref(fields),
                                   *(o.ctypes.data for o in out))
        if found < 0:
            raise MemoryError("passes.c: last_writers")
        reader, slot, producer = (o[:found] for o in out)
        return reader, slot, producer

    def node_index(self, graph: np.ndarray, ptr: np.ndarray, q_graph: np.ndarray,
                   q_ptr: np.ndarray) -> np.ndarray:
        """For each query (a graph, a tensor address), the last node (by index) of that graph
        with that address (nodes: `graph` and `ptr`), -1 for none."""
        columns = [np.ascontiguousarray(a, t) for a, t in ((graph, np.int64), (ptr, np.uint64),
                                                           (q_graph, np.int64),
                                                           (q_ptr, np.uint64))]
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
        columns = [np.ascontiguousarray(a, t) for a, t in ((tid, np.uint32), (ts, np.uint64),
                                                           (begins, np.uint8), (graph, np.int64),
                                                           (graph_end, np.uint64))]
        n = int(np.count_nonzero(begins))
        row, last_barrier = np.empty(n, np.int64), np.empty(n, np.int64)
        end, work_end = np.empty(n, np.uint64), np.empty(n, np.uint64)
        self._op_spans(len(tid), *(c.ctypes.data for c in columns),
                       *(o.ctypes.data for o in (row, last_barrier, end, work_end)))
        return row, last_barrier, end, work_end


def load(path: Path = LIBRARY) -> Passes | None:
    """The passes built at `path`, or None where there is none, it does not load or it was
    built from another version of passes.c (compiled.load)."""
    library = compiled.load(path, "passes_abi", ABI)
    return None if library is None else Passes(library)


PASSES = load()
"""The compiled passes of this install, if it has them."""
