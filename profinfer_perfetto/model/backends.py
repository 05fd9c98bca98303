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

The Vulkan backend (ggml-vulkan) records a split's nodes into command buffers on the calling
thread, one ggml_vk_build_graph call per node it does not fuse into the one before (views and
empty nodes too, recording nothing), and the device runs them later. Its probes describe the
split's nodes as it begins and send each call's entry (VK_NODE) and return (VK_NODE_END): the
host's side of each node is an op of its own, from the call's entry to its return.
"""

from __future__ import annotations

import numpy as np

from profinfer_perfetto.analysis.ggml import GgmlInfo
from profinfer_perfetto.capture.events import Backend, Kind
from profinfer_perfetto.model.lookup import last_descriptor

DEVICE_TICK_NS = 1
"""Nanoseconds in a tick of the device's timestamps: the Vulkan device's timestampPeriod
(VkPhysicalDeviceLimits, read with vkGetPhysicalDeviceProperties), which the probes do not
read: 1 on Mesa's lavapipe; a device with another period shows its times scaled by it."""
DEVICE_TIME = np.dtype([("tid", np.int64), ("host_ts", np.int64), ("node", np.uint64),
                        ("fused", np.uint64), ("begin", np.int64), ("end", np.int64)])
"""A Vulkan recording's device time (vulkan_device_times)."""
VULKAN_NAME = "Vulkan0"
"""The Vulkan backend's name for its first device: the probes do not read which device a split
ran on, so a run on several devices shows them all as the first."""


def backend_name(ggml: GgmlInfo, backend: int) -> str:
    """A graph's backend, by the name the backend gives itself."""
    if backend == Backend.BLAS:
        return ggml.runtime.blas_backend or "BLAS"
    if backend == Backend.VULKAN:
        return VULKAN_NAME
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


def vulkan_ops(events: np.ndarray) -> np.ndarray:
    """`events` (sorted by thread, then time) with the Vulkan splits' node recordings turned into
    op events, still sorted. A recording's entry begins an op (thread 0 of 1); its return ends
    the op's work and the op at once (a barrier, then an op skip: the backend's loop between
    two recordings is no wait). The last node fused into a recording, which the next recording
    or the split's end sends, is the op's fused second node."""
    kinds = events["kind"]
    nodes = np.flatnonzero(kinds == Kind.VK_NODE)
    if len(nodes) == 0:
        return events
    ends = np.flatnonzero(kinds == Kind.VK_NODE_END)
    out = events.copy()
    out["arg1"][nodes] = _fused_tails(events, nodes)
    out["kind"][nodes], out["ith"][nodes], out["aux"][nodes] = Kind.OP_BEGIN, 0, 1
    out["kind"][ends], out["arg0"][ends] = Kind.BARRIER, 0
    skips = out[ends]
    skips["kind"] = Kind.OP_SKIP
    position = np.concatenate([np.arange(len(out), dtype=np.float64), ends + 0.5])
    return np.concatenate([out, skips])[np.argsort(position, kind="stable")]


def _fused_tails(events: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The last node fused into each recording (rows `nodes`, VK_NODE), 0 for none: what the
    next recording of its split, or the split's end, says."""
    kinds = events["kind"]
    marks = np.flatnonzero((kinds == Kind.VK_NODE)
                           | ((kinds == Kind.GRAPH_END) & (events["aux"] == Backend.VULKAN)))
    after = np.searchsorted(marks, nodes) + 1
    mark = marks[np.minimum(after, len(marks) - 1)]
    told = (after < len(marks)) & (events["tid"][mark] == events["tid"][nodes])
    return np.where(told, events["arg1"][mark], 0)


def _enqueued(events: np.ndarray) -> np.ndarray:
    """The rows of the Vulkan recordings (VK_NODE) that enqueued work, by their return's value:
    those the backend writes a GPU timestamp after."""
    kinds, tids = events["kind"], events["tid"]
    nodes = np.flatnonzero(kinds == Kind.VK_NODE)
    ends = np.flatnonzero(kinds == Kind.VK_NODE_END)
    if len(ends) == 0:
        return ends
    after = np.searchsorted(ends, nodes)
    end = ends[np.minimum(after, len(ends) - 1)]
    next_node = np.append(nodes[1:], len(events))
    paired = (after < len(ends)) & (end < next_node) & (tids[end] == tids[nodes])
    enqueued: np.ndarray = nodes[paired & (events["arg0"][end] != 0)]
    return enqueued


def _reading(events: np.ndarray, first: int, splits: np.ndarray, timed: np.ndarray
             ) -> np.ndarray | None:
    """The recordings that the timestamps read back at row `first` (VK_TIMESTAMP, index 0) time,
    in order: those of its split that enqueued work; None where their counts disagree (events
    lost, or more values than the probe sends)."""
    count = int(events["arg1"][first])
    rows = first + np.arange(count)
    if count < 2 or rows[-1] >= len(events) or np.any(
            (events["kind"][rows] != Kind.VK_TIMESTAMP) | (events["aux"][rows] != rows - first)):
        return None
    split = int(splits[max(int(np.searchsorted(splits, first)) - 1, 0)]) if len(splits) else -1
    if split < 0 or split > first or events["tid"][split] != events["tid"][first]:
        return None
    mine = timed[(timed > split) & (timed < first)]
    return mine if len(mine) == count - 1 else None


def vulkan_device_times(events: np.ndarray) -> np.ndarray:
    """The device time of each Vulkan recording that a split's GPU timestamps time (record
    --gpu-timestamps), from `events` sorted by thread, then time. The backend writes a timestamp
    as the split begins and one after each recording that enqueued work, so value i+1 less
    value i is the i-th such recording's time on the device (DEVICE_TICK_NS a tick). The device's
    clock is not the host's: a split's times are laid back to back so that the last ends when
    the host had read them back, after its wait for the split. Rows (DEVICE_TIME): the
    recording's thread and host time, its node and fused node (addresses), its device span."""
    kinds = events["kind"]
    stamps = np.flatnonzero((kinds == Kind.VK_TIMESTAMP) & (events["aux"] == 0))
    if len(stamps) == 0:  # a run without --gpu-timestamps
        return np.zeros(0, DEVICE_TIME)
    timed = _enqueued(events)
    splits = np.flatnonzero((kinds == Kind.GRAPH_BEGIN) & (events["aux"] == Backend.VULKAN))
    tails = dict(zip(timed.tolist(), _fused_tails(events, timed).tolist(), strict=True))
    parts = []
    for first in stamps.tolist():
        mine = _reading(events, first, splits, timed)
        if mine is None:
            continue
        values = events["arg0"][first:first + len(mine) + 1].astype(np.int64)
        dur = np.maximum(np.diff(values), 0) * DEVICE_TICK_NS
        end = int(events["ts"][first]) - (dur.sum() - np.cumsum(dur))
        part = np.zeros(len(mine), DEVICE_TIME)
        part["tid"], part["host_ts"] = events["tid"][mine], events["ts"][mine]
        part["node"], part["fused"] = events["arg0"][mine], [tails[m] for m in mine.tolist()]
        part["begin"], part["end"] = end - dur, end
        parts.append(part)
    return np.concatenate(parts) if parts else np.zeros(0, DEVICE_TIME)
