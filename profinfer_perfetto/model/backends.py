"""Ops of the graph splits that another backend than the CPU's runs, cut from what its probes send.

The BLAS backend (ggml-blas) runs a split's MUL_MAT and OUT_PROD nodes one after another on the
thread that computes the split: each converts its weights to float, then calls cblas_sgemm once
per plane (ne[2] * ne[3] for MUL_MAT, once for OUT_PROD). Its probes send the split's nodes as it
begins (BLAS_NODE, in order) and each return of cblas_sgemm (BLAS_CALL). A node's op lasts from
the end of the one before (the split's begin for the first) to the return of its last plane,
its weight conversion included. The ops become the OP_BEGIN and BARRIER events the CPU backend's
probes send (thread 0 of 1, counters read at those same moments), so the rest of the model
treats every backend's ops alike. A split whose calls do not add up to its nodes' planes (a node
not described, more nodes than the probe describes) keeps no ops: they count as dropped.

A GPU backend adds its host side the same way: a probe on its graph_compute sends the split's
nodes, one on its launch or copy calls cuts it (docs/internals.md).
"""

from __future__ import annotations

import numpy as np

from profinfer_perfetto.analysis.ggml import GgmlInfo
from profinfer_perfetto.capture.events import Backend, Kind
from profinfer_perfetto.model.lookup import last_descriptor


def backend_name(ggml: GgmlInfo, backend: int) -> str:
    """A graph's backend, by the name the backend gives itself."""
    if backend == Backend.BLAS:
        return ggml.runtime.blas_backend or "BLAS"
    return "CPU"


def _planes(ggml: GgmlInfo, descriptors: np.ndarray, ptr: np.ndarray, at: np.ndarray
            ) -> np.ndarray:
    """cblas_sgemm calls of each BLAS node, from its descriptor (-1: not described)."""
    found = last_descriptor(descriptors, ptr, at)
    planes = np.full(len(ptr), -1, np.int64)
    d = descriptors[found[found >= 0]]
    planes[found >= 0] = np.where(d["op"] == ggml.op_id("OUT_PROD"), 1,
                                  d["ne"][:, 2] * d["ne"][:, 3])
    return planes


def blas_ops(events: np.ndarray, descriptors: np.ndarray, ggml: GgmlInfo
             ) -> tuple[np.ndarray, int]:
    """`events` (sorted by thread, then time) with the BLAS splits' nodes and calls turned into
    op events, still sorted; and how many of the nodes sent were left without an op."""
    kinds = events["kind"]
    node_rows = np.flatnonzero(kinds == Kind.BLAS_NODE)
    call_rows = np.flatnonzero(kinds == Kind.BLAS_CALL)
    if len(node_rows) == 0 and len(call_rows) == 0:
        return events, 0
    begins = np.flatnonzero((kinds == Kind.GRAPH_BEGIN) & (events["aux"] == Backend.BLAS))
    graph_ends = np.flatnonzero(kinds == Kind.GRAPH_END)
    planes = _planes(ggml, descriptors, events["arg0"][node_rows], events["ts"][node_rows])
    made: list[tuple[int, float, int, int]] = []  # (source row, position, kind, tensor)
    dropped = 0
    for begin in begins.tolist():
        after = int(np.searchsorted(graph_ends, begin))
        end = int(graph_ends[after]) if after < len(graph_ends) else len(events)
        if end == len(events) or events["tid"][end] != events["tid"][begin]:
            continue  # the capture stopped inside the split: its ops are unknown
        nodes = node_rows[np.searchsorted(node_rows, begin):np.searchsorted(node_rows, end)]
        calls = call_rows[np.searchsorted(call_rows, begin):np.searchsorted(call_rows, end)]
        p = planes[np.searchsorted(node_rows, nodes)]
        if len(nodes) == 0 or (p < 1).any() or int(p.sum()) != len(calls):
            dropped += len(nodes)
            continue
        last = calls[np.cumsum(p) - 1].tolist()
        starts = [begin, *last[:-1]]
        for row, start, stop in zip(nodes.tolist(), starts, last, strict=True):
            made.append((start, start + 0.75, Kind.OP_BEGIN, int(events["arg0"][row])))
            made.append((stop, stop + 0.5, Kind.BARRIER, 0))
    kept = np.flatnonzero((kinds != Kind.BLAS_NODE) & (kinds != Kind.BLAS_CALL))
    source = np.array([m[0] for m in made], np.int64)
    ops = events[source]
    ops["kind"] = [m[2] for m in made]
    ops["arg0"] = [m[3] for m in made]
    ops["arg1"], ops["ith"] = 0, 0
    ops["aux"] = np.where(ops["kind"] == Kind.OP_BEGIN, 1, 0)  # nth: one thread
    out = np.concatenate([events[kept], ops])
    position = np.concatenate([kept.astype(np.float64), [m[1] for m in made]])
    return out[np.argsort(position, kind="stable")], dropped
