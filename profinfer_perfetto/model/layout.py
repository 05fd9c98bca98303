"""How the trace model is laid out for a viewer: tracks, slices, flows, counters, in time order.

One process track; under it a thread track per thread, with strictly nested slices
(token step > graph > op, then the op's barrier wait), a counter track per perf counter per
thread, and a tokens/s counter; a global "profinfer-perfetto" track holds the recording itself
(its status, losses and settings). Every encoder renders this layout, so the protobuf and the
JSON trace show the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from profinfer_perfetto import __version__
from profinfer_perfetto.model.trace_model import TraceModel, layer_of, token_phase

ArgValue = int | float | str | bool
Args = tuple[tuple[str, ArgValue], ...]

WAIT_SLICE = "barrier wait"
RECORDING_TRACK = "profinfer-perfetto"


class TrackKind(IntEnum):
    PROCESS = 0
    THREAD = 1
    COUNTER = 2
    GLOBAL = 3


class EventType(IntEnum):
    """Same values as Perfetto's TrackEvent.Type."""

    SLICE_BEGIN = 1
    SLICE_END = 2
    INSTANT = 3
    COUNTER = 4


@dataclass(frozen=True)
class Track:
    uuid: int
    kind: TrackKind
    name: str
    parent: int = 0
    tid: int = 0
    unit: str = ""


@dataclass
class Layout:
    """Tracks, then one row per trace event in the order they must be written."""

    pid: int
    process_name: str
    cmdline: list[str]
    tracks: list[Track]
    strings: list[str]
    """Event names and string argument values, referred to by index."""
    arg_sets: list[Args]
    ts: np.ndarray
    type: np.ndarray
    track: np.ndarray
    """Index into `tracks`."""
    name: np.ndarray
    """Index into `strings`, -1 for none (slice ends, counters)."""
    args: np.ndarray
    """Index into `arg_sets`, -1 for none."""
    value: np.ndarray
    """Counter value (COUNTER rows)."""
    flows_out: dict[int, list[int]] = field(default_factory=dict)
    """Row -> flow ids that start at that slice begin."""
    flows_in: dict[int, list[int]] = field(default_factory=dict)
    """Row -> flow ids that end at that slice begin."""
    extra_counters: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Row -> (counter track index, value) sampled at that slice begin or end."""

    def __len__(self) -> int:
        return len(self.ts)


def _shape(ne: np.ndarray) -> str:
    dims = [int(d) for d in ne]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return "x".join(map(str, dims))


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        return self.index.setdefault(s, len(self.index))


def _node_args(model: TraceModel, node: int, fused: int) -> Args:
    op, tensor = model.op_label(node, fused)
    rec = model.nodes.raw[fused if fused >= 0 else node]
    ggml = model.ggml
    args: list[tuple[str, ArgValue]] = [
        ("op", ggml.op_name(int(rec["op"])) if fused < 0 else op),
        ("tensor", tensor),
        ("layer", layer_of(tensor)),
        ("node", int(model.nodes.index[node])),
        ("dtype", ggml.type_name(int(rec["type"]))),
        ("shape", _shape(rec["ne"])),
    ]
    sub = ggml.subop_name(int(rec["op"]), int(rec["op_param0"]))
    if sub and fused < 0:
        args.append(("subop", sub))
    for i, src in enumerate(model.nodes.raw[node]["src"]):
        if src["ptr"]:
            args.append((f"src{i}", f"{ggml.type_name(int(src['type']))} {_shape(src['ne'])}"))
    return tuple(args)


def build_layout(model: TraceModel) -> Layout:
    strings = _Strings()
    arg_sets: list[Args] = []
    tracks = [Track(1, TrackKind.PROCESS, model.process_name)]
    thread_track: dict[int, int] = {}
    for tid in model.thread_ids():
        thread_track[tid] = len(tracks)
        tracks.append(
            Track(
                (1 << 32) | tid,
                TrackKind.THREAD,
                model.threads.get(tid, f"thread {tid}"),
                parent=1,
                tid=tid,
            )
        )
    counter_track: dict[tuple[int, int], int] = {}
    for tid in sorted({int(t) for t in model.ops.tid}):
        for c, counter in enumerate(model.counters):
            counter_track[(tid, c)] = len(tracks)
            tracks.append(
                Track((2 << 32) | (tid << 4) | c, TrackKind.COUNTER, f"{counter} {tid}",
                      parent=1, tid=tid, unit="count")
            )
    tps_track = len(tracks)
    tracks.append(Track(2, TrackKind.COUNTER, "tokens/s", parent=1, unit="tokens/s"))
    recording_track = len(tracks)
    tracks.append(Track(3, TrackKind.GLOBAL, RECORDING_TRACK))

    # Slices: (track, begin, end, depth, name, args) as columns, gathered per kind.
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("track", "begin", "end", "depth",
                                                         "name", "args")}

    def add(track: np.ndarray, begin: np.ndarray, end: np.ndarray, depth: int,
            name: np.ndarray, args: np.ndarray) -> None:
        n = len(begin)
        cols["track"].append(np.broadcast_to(track, n).astype(np.int64))
        cols["begin"].append(begin.astype(np.int64))
        cols["end"].append(np.maximum(end.astype(np.int64), begin.astype(np.int64) + 1))
        cols["depth"].append(np.full(n, depth, np.int64))
        cols["name"].append(np.broadcast_to(name, n).astype(np.int64))
        cols["args"].append(np.broadcast_to(args, n).astype(np.int64))

    tok = model.tokens
    tok_args = []
    tok_names = []
    for i in range(len(tok)):
        n_tokens = int(np.int64(tok.arg0[i]))
        phase = token_phase(n_tokens, int(tok.aux[i]))
        tok_names.append(strings(phase))
        tok_args.append(len(arg_sets))
        arg_sets.append((("phase", phase), ("n_tokens", n_tokens), ("step", i),
                         ("complete", bool(tok.complete[i]))))
    add(np.array([thread_track[int(t)] for t in tok.tid], np.int64), tok.begin, tok.end, 0,
        np.array(tok_names, np.int64), np.array(tok_args, np.int64))

    # Graphs: on the calling thread, and on every thread that ran ops of the graph.
    gr = model.graphs
    graph_token = tok.containing(gr.begin)
    graph_name = strings("graph CPU")
    graph_args = []
    for i in range(len(gr)):
        graph_args.append(len(arg_sets))
        arg_sets.append((("graph", i), ("backend", "CPU"), ("token_step", int(graph_token[i])),
                         ("n_nodes", int(gr.arg1[i] & 0xFFFFFFFF)),
                         ("n_threads", int(gr.arg1[i] >> 32)),
                         ("complete", bool(gr.complete[i]))))
    graph_args_arr = np.array(graph_args, np.int64)
    pairs = {(int(t), i) for i, t in enumerate(gr.tid)}
    pairs |= set(zip(model.ops.tid.tolist(), model.ops.graph.tolist(), strict=True))
    g_tid, g_idx = (np.array(sorted(pairs), np.int64).reshape(-1, 2).T if pairs
                    else (np.empty(0, np.int64), np.empty(0, np.int64)))
    caller_depth = np.isin(g_tid, tok.tid)
    for depth in (0, 1):
        sel = caller_depth == bool(depth)
        add(np.array([thread_track[t] for t in g_tid[sel].tolist()], np.int64),
            gr.begin[g_idx[sel]], gr.end[g_idx[sel]], depth, np.int64(graph_name),
            graph_args_arr[g_idx[sel]])

    # Ops and their barrier waits, one level below their graph.
    ops = model.ops
    node_key = np.stack([ops.node, ops.fused], 1)
    uniq, inverse = np.unique(node_key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    op_names, op_args = [], []
    for node, fused in uniq.tolist():
        label, tensor = model.op_label(node, fused)
        op_names.append(strings(f"{label} {tensor}"))
        op_args.append(len(arg_sets))
        arg_sets.append(_node_args(model, node, fused))
    op_track = np.array([thread_track[t] for t in ops.tid.tolist()], np.int64)
    op_depth = np.where(np.isin(ops.tid, tok.tid), 2, 1)
    first_op_row = sum(len(c) for c in cols["begin"])
    for depth in (1, 2):
        sel = op_depth == depth
        add(op_track[sel], ops.begin[sel], ops.work_end[sel], depth,
            np.array(op_names, np.int64)[inverse[sel]], np.array(op_args, np.int64)[inverse[sel]])
    op_slice = np.empty(len(ops), np.int64)
    op_slice[np.flatnonzero(op_depth == 1)] = first_op_row + np.arange(np.count_nonzero(op_depth == 1))
    op_slice[np.flatnonzero(op_depth == 2)] = (
        first_op_row + np.count_nonzero(op_depth == 1) + np.arange(np.count_nonzero(op_depth == 2))
    )
    waits = ops.end > ops.work_end
    wait_name = strings(WAIT_SLICE)
    for depth in (1, 2):
        sel = waits & (op_depth == depth)
        add(op_track[sel], ops.work_end[sel], ops.end[sel], depth, np.int64(wait_name),
            np.int64(-1))

    rec_name = strings("record")
    arg_sets.append(_recording_args(model))
    add(np.int64(recording_track), np.array([model.begin_ns]), np.array([model.end_ns]), 0,
        np.int64(rec_name), np.int64(len(arg_sets) - 1))

    s_track, s_begin, s_end, s_depth, s_name, s_args = (np.concatenate(cols[k]) for k in cols)
    n = len(s_begin)
    # Event rows: slice begins, slice ends, counter samples, instants.
    ts = [s_begin, s_end]
    typ = [np.full(n, EventType.SLICE_BEGIN), np.full(n, EventType.SLICE_END)]
    trk = [s_track, s_track]
    nam = [s_name, np.full(n, -1)]
    arg = [s_args, np.full(n, -1)]
    val = [np.zeros(n), np.zeros(n)]
    # Same-time order on a track: ends (deepest first), then begins (outermost first).
    key = [s_depth, -s_depth]

    dur_s = np.maximum(tok.end - tok.begin, 1) / 1e9
    n_tok = tok.arg0.astype(np.int64)
    done = tok.complete & (n_tok > 0)
    ts.append(tok.end[done].astype(np.int64))
    typ.append(np.full(np.count_nonzero(done), EventType.COUNTER))
    trk.append(np.full(np.count_nonzero(done), tps_track))
    nam.append(np.full(np.count_nonzero(done), -1))
    arg.append(np.full(np.count_nonzero(done), -1))
    val.append(n_tok[done] / dur_s[done])
    key.append(np.zeros(np.count_nonzero(done), np.int64))

    if model.status != "complete":
        ts.append(np.array([model.end_ns - 1]))
        typ.append(np.array([EventType.INSTANT]))
        trk.append(np.array([recording_track]))
        nam.append(np.array([strings(f"trace cut short: {model.status}")]))
        arg.append(np.array([-1]))
        val.append(np.zeros(1))
        key.append(np.zeros(1, np.int64))

    all_ts = np.concatenate(ts).astype(np.int64)
    all_type = np.concatenate(typ).astype(np.int8)
    all_key = np.concatenate(key).astype(np.int64)
    order = np.lexsort((all_key, all_type != EventType.SLICE_END, all_ts))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))

    layout = Layout(
        pid=model.pid,
        process_name=model.process_name,
        cmdline=model.cmdline,
        tracks=tracks,
        strings=list(strings.index),
        arg_sets=arg_sets,
        ts=all_ts[order],
        type=all_type[order],
        track=np.concatenate(trk).astype(np.int64)[order],
        name=np.concatenate(nam).astype(np.int64)[order],
        args=np.concatenate(arg).astype(np.int64)[order],
        value=np.concatenate(val).astype(np.float64)[order],
    )

    # DAG flows between the op slices of the graph's calling thread (ith 0).
    main = ops.ith == 0
    slice_of_node = dict(zip(ops.node[main].tolist(), op_slice[main].tolist(), strict=True))
    for flow_id, (producer, consumer) in enumerate(model.edges.tolist(), start=1):
        p, c = slice_of_node.get(producer), slice_of_node.get(consumer)
        if p is not None and c is not None:
            layout.flows_out.setdefault(int(rank[p]), []).append(flow_id)
            layout.flows_in.setdefault(int(rank[c]), []).append(flow_id)

    # Per-thread counters: the running total of each counter over the thread's ops.
    for c in range(len(model.counters)):
        delta = np.maximum(ops.counter_delta[:, c], 0)
        for tid in np.unique(ops.tid).tolist():
            sel = np.flatnonzero(ops.tid == tid)
            after = np.cumsum(delta[sel])
            before = after - delta[sel]
            track_index = counter_track[(tid, c)]
            for row, v in zip(rank[op_slice[sel]].tolist(), before.tolist(), strict=True):
                layout.extra_counters.setdefault(row, []).append((track_index, v))
            for row, v in zip(rank[op_slice[sel] + n].tolist(), after.tolist(), strict=True):
                layout.extra_counters.setdefault(row, []).append((track_index, v))
    return layout


def _recording_args(model: TraceModel) -> Args:
    args: list[tuple[str, ArgValue]] = [
        ("status", model.status),
        ("complete", model.status == "complete"),
        ("events", model.event_count),
        ("events_lost", model.lost_events),
        ("nodes_lost", model.lost_nodes),
        ("ops_dropped", model.dropped_ops),
        ("tool", f"profinfer-perfetto {__version__}"),
        ("ggml_version", model.ggml.version),
        ("ggml_commit", model.ggml.commit),
        ("counters", ",".join(model.counters)),
        ("command", " ".join(model.cmdline)),
    ]
    args += [(f"note{i}", note) for i, note in enumerate(model.notes)]
    return tuple(args)
