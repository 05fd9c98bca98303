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
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from profinfer_perfetto import __version__
from profinfer_perfetto.capture.run import Scheduling
from profinfer_perfetto.model import native
from profinfer_perfetto.model.aggregate import op_type_series
from profinfer_perfetto.model.backends import VULKAN_NAME, backend_name
from profinfer_perfetto.model.names import (
    BUILD_ID_ARG,
    COPY_ARGS,
    COPY_DIRECTIONS,
    CPU_ARG,
    DEVICE_TIME_ARG,
    GENERATE_SLICE,
    GRAPH_ARGS,
    HOST_CALL_SLICES,
    INNER_WAIT_SLICE,
    NODE_ARG,
    NODE_ARGS,
    PEAK_ARGS,
    PEAK_SLICE,
    PROMPT_SLICE,
    RECORD_ARGS,
    RECORD_SLICE,
    RECORDING_TRACK,
    ROUTING_ARGS,
    SCHED_ARGS,
    SEQ_ARGS,
    SEQUENCE_TRACK,
    STEP_ARGS,
    TOKENS_TRACK,
    WAIT_SLICE,
    counted_arg,
    counter_track,
    experts_track,
    graph_slice,
    note_arg,
    probe_args,
    src_arg,
    work_track,
)
from profinfer_perfetto.model.records import dense_unique, sorted_unique, threads_of
from profinfer_perfetto.model.trace_model import (
    Ops,
    Routing,
    StepBatch,
    TraceModel,
)
from profinfer_perfetto.model.work import op_work, role

ArgValue = int | float | str | bool
Args = tuple[tuple[str, ArgValue], ...]
T = TypeVar("T")
HOST_CALL_DEPTH = 4
"""Where a host call's slice sorts among slices that begin or end at the same time: below an
op's (1 or 2) and the waits inside it."""


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
    generation: int
    """Of the Tables `strings` and `arg_sets` come from (a chunk of a streamed run whose tables
    started over has a new one)."""
    ts: np.ndarray
    type: np.ndarray
    track: np.ndarray
    """Index into `tracks`."""
    name: np.ndarray
    """Index into `strings`, -1 for none (slice ends, counters)."""
    args: np.ndarray
    """Index into `arg_sets`, -1 for none."""
    desc: np.ndarray
    """Index into `arg_sets` of the node description an op slice refers to, -1 for none: a
    description is written out with the first slice of a file that refers to it, the later
    ones name it by number (the arg DESC_ARG; encode/perfetto.py)."""
    value: np.ndarray
    """Counter value (COUNTER rows)."""
    flows: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))
    """(n, 3): each DAG flow's id, the row of the slice begin it starts at and the row of the
    one it ends at, by id."""
    counter_track: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.int64))
    """(rows, counters): counter track index sampled at that slice begin or end, -1 for none."""
    counter_value: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.int64))
    """(rows, counters): the value sampled."""
    counter_names: list[str] = field(default_factory=list)
    counter_delta: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.int64))
    """(rows, counters): an op's count during its work, an arg `counter_arg(NAME)` of its slice
    begin; -1 for none, and for a count of 0 (most ops see no context switch: an arg on each
    would cost trace_processor a parse per op)."""
    sched: Scheduling | None = None
    """With --sched: the context switches and wakeups, written as Perfetto's own sched data."""
    row_args: list[RowArgs] = field(default_factory=list)
    """Int args that differ from row to row (a step's number, which an arg set would hold for
    one row only), written after each row's arg set, in this list's order."""

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class RowArgs:
    """An int arg, `key`, of some rows (in writing order): `values`, one per row. A token step's
    number as an arg set of its own cost its slice 1 µs or more per arg (interned, then
    serialized, once for one row); as columns, a few numpy passes per layout."""

    key: str
    rows: np.ndarray
    values: np.ndarray


def _shape(ne: np.ndarray) -> str:
    dims = [int(d) for d in ne]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return "x".join(map(str, dims))


def _node_args(model: TraceModel, node: int, fused: int) -> Args:
    """A node's description (its routing, which differs from graph to graph, aside; its
    position, `node`, is an arg of each op slice of its own)."""
    op, tensor = model.op_label(node, fused)
    first, rec = model.nodes.record(node), model.nodes.record(fused if fused >= 0 else node)
    ggml = model.run.ggml
    base_op = ggml.op_name(int(rec["op"])) if fused < 0 else op
    flops, nbytes = op_work(ggml, first)
    if fused >= 0:
        more_flops, more_bytes = op_work(ggml, rec)
        flops, nbytes = flops + more_flops, nbytes + more_bytes
    *named, subop_arg = NODE_ARGS
    args: list[tuple[str, ArgValue]] = list(zip(named, (
        base_op,
        tensor,
        role(tensor, base_op),
        int(model.nodes.layer[fused if fused >= 0 else node]),
        ggml.type_name(int(rec["type"])),
        ggml.type_name(int(first["src"][0]["type"])),
        _shape(rec["ne"]),
        flops,
        nbytes,
    ), strict=True))
    sub = ggml.subop_name(int(rec["op"]), int(rec["op_param0"]))
    if sub and fused < 0:
        args.append((subop_arg, sub))
    for i, src in enumerate(first["src"]):
        if src["ptr"]:
            args.append((src_arg(i), f"{ggml.type_name(int(src['type']))} {_shape(src['ne'])}"))
    return tuple(args)


def _contents(taken: np.ndarray) -> np.ndarray:
    """NODE records' bytes but their times (which it blanks in `taken`, a copy of them): a row of
    bytes each."""
    taken["ts"] = 0
    return taken.view(np.uint8).reshape(len(taken), taken.dtype.itemsize)


def _experts_text(routing: Routing) -> str:
    """Each token's experts, comma separated, tokens separated by spaces, in batch order."""
    return " ".join(",".join(map(str, row)) for row in routing.ids.tolist())


def _experts_name(routing: Routing, longest: int = 80) -> str:
    """A routing slice's name: each token's experts, or for a long batch how many tokens."""
    name = _experts_text(routing)
    return name if len(name) <= longest else f"{routing.n_tokens} tokens (experts in the op's args)"


def _routing_args(routing: Routing) -> list[tuple[str, ArgValue]]:
    """A Mixture-of-Experts op's routing: `experts` lists each token's experts (comma
    separated, tokens separated by spaces, in batch order); what the probe cut, if anything."""
    ids = routing.ids
    experts_arg, tokens_arg, per_token_arg, cut_arg = ROUTING_ARGS
    args: list[tuple[str, ArgValue]] = [
        (experts_arg, _experts_text(routing)),
        (tokens_arg, routing.n_tokens),
        (per_token_arg, routing.n_used),
    ]
    if ids.shape != (routing.n_tokens, routing.n_used):
        args.append((cut_arg, f"experts of {ids.shape[0]} of {routing.n_tokens} tokens, "
                              f"{ids.shape[1]} of {routing.n_used} per token"))
    return args


def _described(ops: Ops) -> np.ndarray:
    """Which op slices refer to their node's description (DESC_ARG): one per (graph, node), the
    lowest ith's (the calling thread's, ith 0, whose ops the model's nodes come from). Every op
    slice carries `node`; a description on every share would be parsed by trace_processor once
    per thread (most of its load time on a big trace)."""
    # A node is of one graph: by node, then ith (packed: a stable sort of runs of ops).
    order = np.argsort(ops.node * (int(ops.ith.max(initial=0)) + 1) + ops.ith, kind="stable")
    first = np.ones(len(order), bool)
    first[1:] = np.diff(ops.node[order]) != 0
    described = np.zeros(len(order), bool)
    described[order[first]] = True
    return described


def _distinct(columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of equal keys (a value per column): the first row of each distinct key, and each
    row's key among them (np.unique(axis=0) sorts rows ten times slower; one column, by a
    stable sort, which finds its runs)."""
    order = (np.argsort(columns[0], kind="stable") if len(columns) == 1
             else np.lexsort(columns[::-1]))
    new = np.zeros(len(order), bool)
    new[:1] = True
    for column in columns:
        new[1:] |= column[order][1:] != column[order][:-1]
    which = np.empty(len(order), np.int64)
    which[order] = np.cumsum(new) - 1
    return order[new], which


class _Rows:
    """Trace event rows gathered by kind; `ordered` sorts them once, as they must be written."""

    _FIELDS = ("ts", "type", "track", "name", "args", "desc", "value", "key")

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = {f: [] for f in self._FIELDS}
        self._sizes: list[int] = []
        self.count = 0
        self._ints: list[tuple[str, np.ndarray, np.ndarray]] = []

    def ints(self, key: str, rows: np.ndarray, values: npt.ArrayLike) -> None:
        """An int arg `key` of rows (their ids), one value each."""
        self._ints.append((key, rows, np.asarray(values, np.int64)))

    def row_args(self, rank: np.ndarray) -> list[RowArgs]:
        """The int args of rows, at their rows' places in writing order (`rank`)."""
        return [RowArgs(key, rank[rows], values) for key, rows, values in self._ints]

    def add(self, ts: npt.ArrayLike, type: EventType, track: npt.ArrayLike, *,
            name: npt.ArrayLike = -1, args: npt.ArrayLike = -1, desc: npt.ArrayLike = -1,
            value: npt.ArrayLike = 0.0, key: npt.ArrayLike = 0) -> np.ndarray:
        """Append rows; returns their ids (positions before ordering)."""
        ts = np.atleast_1d(np.asarray(ts, np.int64))
        n = len(ts)
        columns = {"ts": ts, "type": type, "track": track, "name": name, "args": args,
                   "desc": desc, "value": value, "key": key}
        for f in self._FIELDS:
            column = np.asarray(columns[f])  # one value for all the rows is spread in _column
            self._parts[f].append(column if column.ndim == 0 or column.shape == (n,)
                                  else np.broadcast_to(column, n))
        self._sizes.append(n)
        rows = np.arange(self.count, self.count + n)
        self.count += n
        return rows

    def slices(self, track: npt.ArrayLike, begin: np.ndarray, end: np.ndarray, depth: int,
               name: npt.ArrayLike, args: npt.ArrayLike = -1, desc: npt.ArrayLike = -1
               ) -> tuple[np.ndarray, np.ndarray]:
        """Begin and end rows of slices; at one time, ends go deepest first, begins outermost."""
        begin = np.asarray(begin, np.int64)
        end = np.maximum(np.asarray(end, np.int64), begin + 1)
        first = self.add(begin, EventType.SLICE_BEGIN, track, name=name, args=args, desc=desc,
                         key=depth)
        last = self.add(end, EventType.SLICE_END, track, key=-depth)
        return first, last

    def ordered(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The columns in writing order (but the sort's `key`), and each row id's position in
        it."""
        ts, kind, key = (self._column(f) for f in ("ts", "type", "key"))
        order = _writing_order(ts, kind != EventType.SLICE_END, key)
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        cols = {"ts": ts[order], "type": kind[order]}
        for f, dtype in (("track", np.int64), ("name", np.int64), ("args", np.int64),
                         ("desc", np.int64), ("value", np.float64)):
            cols[f] = self._placed(f, rank, dtype)
        return cols, rank

    def _column(self, field: str) -> np.ndarray:
        """A field's values of all rows, in the order they were added."""
        parts = self._parts[field]
        if not parts:
            return np.empty(0)
        return np.concatenate([part if part.ndim else part.repeat(n)
                               for part, n in zip(parts, self._sizes, strict=True)])

    def _placed(self, field: str, rank: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
        """A field's values of all rows, each put at its row's place in writing order (`rank`):
        no column in the order they were added first."""
        column = np.empty(self.count, dtype)
        start = 0
        for part, n in zip(self._parts[field], self._sizes, strict=True):
            column[rank[start:start + n]] = part
            start += n
        return column


def _writing_order(ts: np.ndarray, not_end: np.ndarray, key: np.ndarray) -> np.ndarray:
    """np.lexsort((key, not_end, ts)): by time, ends first, then by key; as one stable sort of
    the three packed in an int64 where they fit (a chunk's time span and slice depths always
    do), which took a quarter of the lexsort's time (2026-12-03: 1.5 ms against 5.3 for 70 k
    rows)."""
    if len(ts) == 0:
        return np.empty(0, np.int64)
    low, deepest = int(ts.min()), int(key.min())
    key_bits = (int(key.max()) - deepest).bit_length()
    if (int(ts.max()) - low).bit_length() + key_bits + 1 > 63:
        return np.lexsort((key, not_end, ts))
    packed = (((ts - low) << (key_bits + 1)) | (not_end.astype(np.int64) << key_bits)
              | (key.astype(np.int64) - deepest))
    order: np.ndarray = np.argsort(packed, kind="stable")
    return order


MAX_TABLE = 1 << 16
"""Entries Tables holds before it starts over."""


class _Indexed(Generic[T]):
    """Items numbered in order of first use."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._ids: dict[T, int] = {}

    def __call__(self, item: T) -> int:
        found = self._ids.get(item)
        if found is None:
            found = self._ids[item] = len(self.items)
            self.items.append(item)
        return found


class Tables:
    """The names and arg sets a layout's rows refer to by index, and each node description's
    pair of them. A streamed run carries them from chunk to chunk, so what repeats (a node
    computed alike in graph after graph) is named, described and serialized once; they start
    over when they hold more than MAX_TABLE entries (attention's shapes change with the KV cache
    at every step of a long run), and `generation` counts the starts."""

    def __init__(self) -> None:
        self.generation = 0
        self._clear()

    def _clear(self) -> None:
        self.string = _Indexed[str]()
        self.arg_set = _Indexed[Args]()
        """The id of a set of args; equal sets (a node in graph after graph) share one."""
        self.strings, self.arg_sets = self.string.items, self.arg_set.items
        self.contents: dict[bytes, tuple[int, int]] = {}
        """A node's (name, description) ids, by what its descriptors say (_content_keys)."""

    def start_layout(self) -> None:
        """Before a layout: start over if full (never within one, whose ids must hold)."""
        if len(self.strings) + len(self.arg_sets) + len(self.contents) > MAX_TABLE:
            self._clear()
            self.generation += 1


class _LayoutBuilder:
    def __init__(self, model: TraceModel, tables: Tables) -> None:
        self.model = model
        self.tables = tables
        tables.start_layout()
        self.strings, self.arg_set = tables.string, tables.arg_set
        self.rows = _Rows()
        self.tracks = [Track(1, TrackKind.PROCESS, model.run.process_name)]

    def track(self, track: Track) -> int:
        self.tracks.append(track)
        return len(self.tracks) - 1

    def build(self) -> Layout:
        model = self.model
        thread = {tid: self.track(Track((1 << 32) | tid, TrackKind.THREAD,
                                        model.run.threads.get(tid, model.run.process_name),
                                        parent=1, tid=tid))
                  for tid in model.thread_ids()}
        caller = np.isin(model.ops.tid, model.tokens.tid)
        batches = model.batches
        self.token_steps(thread, batches)
        self.graphs(thread)
        op_begin, op_end = self.ops(thread, caller)
        self.host_calls(thread)
        self.device_ops()
        self.expert_routing()
        self.sequences(batches)
        self.tokens_per_second()
        if model.cont.final:
            self.aggregate_counters()
            self.recording()
        cols, rank = self.rows.ordered()
        counter_track, counter_value, counter_delta = self.thread_counters(op_begin, op_end,
                                                                           rank)
        return Layout(
            pid=model.run.pid,
            process_name=model.run.process_name,
            cmdline=model.run.cmdline,
            tracks=self.tracks,
            strings=self.tables.strings,
            arg_sets=self.tables.arg_sets,
            generation=self.tables.generation,
            ts=cols["ts"],
            type=cols["type"].astype(np.int8, copy=False),
            track=cols["track"],
            name=cols["name"],
            args=cols["args"],
            desc=cols["desc"],
            value=cols["value"],
            flows=self.dag_flows(op_begin, rank, cols["ts"]),
            counter_track=counter_track,
            counter_value=counter_value,
            counter_names=list(model.run.counters),
            counter_delta=counter_delta,
            sched=model.sched,
            row_args=self.rows.row_args(rank),
        )

    def token_steps(self, thread: dict[int, int], batches: list[StepBatch]) -> None:
        tok = self.model.tokens
        phase_arg, tokens_arg, sequences_arg, pos_arg, step_arg, complete_arg = STEP_ARGS
        names = [self.strings(b.phase) for b in batches]
        args = [self.arg_set(((phase_arg, b.phase), (tokens_arg, b.n_tokens),
                              (sequences_arg, b.sequences), (complete_arg, complete)))
                for b, complete in zip(batches, tok.complete.tolist(), strict=True)]
        tracks = [thread[t] for t in tok.tid.tolist()]
        rows, _ = self.rows.slices(tracks, tok.begin, tok.end, 0, names, args)
        self._positions(pos_arg, rows, [b.pos for b in batches])
        self.rows.ints(step_arg, rows, self.model.cont.first_step + np.arange(len(batches)))

    def _positions(self, key: str, rows: np.ndarray, pos: list[int | None]) -> None:
        """Token positions as the int arg `key` of rows (none where a batch does not say)."""
        said = [(i, p) for i, p in enumerate(pos) if p is not None]
        self.rows.ints(key, rows[[i for i, _ in said]], [p for _, p in said])

    def graphs(self, thread: dict[int, int]) -> None:
        """Each graph on its calling thread, and on every thread that ran ops of it."""
        model, gr = self.model, self.model.graphs
        first_step, first_graph = model.cont.first_step, model.cont.first_graph
        step = model.tokens.containing(gr.begin)
        step = np.where(step < 0, step, first_step + step)
        named = {b: backend_name(model.run.ggml, b) for b in sorted_unique(gr.aux).tolist()}
        backends = [named[b] for b in gr.aux.tolist()]
        graph_arg, backend_arg, step_arg, *shared = GRAPH_ARGS
        values = zip(backends, (gr.arg1 & 0xFFFFFFFF).tolist(), (gr.arg1 >> 32).tolist(),
                     gr.complete.tolist(), strict=True)
        args = np.array([self.arg_set(((backend_arg, b), *zip(shared, v, strict=True)))
                         for b, *v in values], np.int64)
        # (thread, graph) pairs, by thread then graph: the calling thread's and the ops'.
        count = max(len(gr), 1)
        shown = sorted_unique(np.concatenate([
            gr.tid.astype(np.int64) * count + np.arange(len(gr)),
            model.ops.tid.astype(np.int64) * count + model.ops.graph]))
        tid, graph = shown // count, shown % count
        depth = np.isin(tid, model.tokens.tid).astype(np.int64)
        name = np.array([self.strings(graph_slice(b)) for b in backends], np.int64)
        for d in (0, 1):
            of = graph[depth == d]
            rows, _ = self.rows.slices([thread[t] for t in tid[depth == d].tolist()],
                                       gr.begin[of], gr.end[of], d, name[of], args[of])
            self.rows.ints(graph_arg, rows, first_graph + of)
            self.rows.ints(step_arg, rows, step[of])

    def ops(self, thread: dict[int, int], caller: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Op slices, then their barrier waits, one level below their graph, and the waits
        inside them one level below.

        Returns the begin and end row of each op's slice.
        """
        model, ops, nodes = self.model, self.model.ops, self.model.nodes
        name, args = self._node_ids(ops.node, ops.fused)
        routed = np.flatnonzero(np.isin(ops.node, list(model.routing)))
        routed_nodes, first, of_routed = np.unique(ops.node[routed], return_index=True,
                                                   return_inverse=True)
        with_routing = [self.arg_set(self.tables.arg_sets[args[routed[i]]]
                                     + tuple(_routing_args(model.routing[n])))
                        for n, i in zip(routed_nodes.tolist(), first.tolist(), strict=True)]
        args[routed] = np.array(with_routing, np.int64)[of_routed.reshape(-1)]
        index, at = dense_unique(nodes.index[ops.node], len(nodes))
        arg = np.array([self.arg_set(((NODE_ARG, i),)) for i in index.tolist()], np.int64)[at]
        desc = np.where(_described(ops), args, -1)
        if model.sched is not None:
            arg = self._with_cpu(arg, ops.cpu)
        tids, of_op = threads_of(ops.tid)
        track = np.array([thread[t] for t in tids.tolist()], np.int64)[of_op.reshape(-1)]
        depth = np.where(caller, 2, 1)
        begin_rows = np.empty(len(ops), np.int64)
        end_rows = np.empty(len(ops), np.int64)
        wait = self.strings(WAIT_SLICE)
        # A wait starts where its op's slice ends (slices last at least 1 ns).
        work_end = np.maximum(ops.work_end, ops.begin + 1)
        for d in (1, 2):
            sel = np.flatnonzero(depth == d)
            begin_rows[sel], end_rows[sel] = self.rows.slices(
                track[sel], ops.begin[sel], work_end[sel], d, name[sel], arg[sel], desc[sel])
            waits = sel[ops.end[sel] > work_end[sel]]
            self.rows.slices(track[waits], work_end[waits], ops.end[waits], d, wait)
            inner = model.inner_waits[depth[model.inner_waits[:, 0]] == d]
            if len(inner):
                self.rows.slices(track[inner[:, 0]], inner[:, 1], inner[:, 2], d + 1,
                                 self.strings(INNER_WAIT_SLICE))
        return begin_rows, end_rows

    def host_calls(self, thread: dict[int, int]) -> None:
        """A GPU backend's submits, waits for the device and copies (a copy's with its bytes and
        direction), on their threads, below whatever holds them."""
        calls = self.model.host_calls
        if calls is None:
            return
        bytes_arg, direction_arg = COPY_ARGS
        names, args = [], []
        for call, nbytes in zip(calls.aux.tolist(), calls.arg0.tolist(), strict=True):
            names.append(self.strings(HOST_CALL_SLICES[call]))
            direction = COPY_DIRECTIONS.get(call)
            args.append(-1 if direction is None
                        else self.arg_set(((bytes_arg, nbytes), (direction_arg, direction))))
        self.rows.slices([thread[t] for t in calls.tid.tolist()], calls.begin, calls.end,
                         HOST_CALL_DEPTH, names, args)

    def device_ops(self) -> None:
        """With --gpu-timestamps: the device's track (`Vulkan0`), a slice per timed op named
        and described like its op slice, each with where its time comes from."""
        device = self.model.device_ops
        if device is None or len(device) == 0:
            return
        track = self.track(Track(6 << 32, TrackKind.GLOBAL, VULKAN_NAME, parent=1))
        names, args = [], []
        for node, fused in zip(device.arg0.tolist(), device.arg1.tolist(), strict=True):
            name, desc = self._description(node, fused)
            names.append(name)
            args.append(self.arg_set((*self.tables.arg_sets[desc], DEVICE_TIME_ARG)))
        self.rows.slices(track, device.begin, device.end, 1, names, args)

    def _node_ids(self, node: np.ndarray, fused: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The name and description ids of nodes (or fused pairs): nodes of the same descriptors
        (a node in graph after graph, a descriptor sent again unchanged) and layers are looked
        up once, and the new ones described in node order."""
        nodes = self.model.nodes
        second = np.maximum(fused, 0)
        has = fused >= 0
        width, layers = len(nodes.descriptors) + 1, int(nodes.layer.max(initial=0)) + 2
        pair = nodes.desc[node] * width + np.where(has, nodes.desc[second], -1) + 1
        layer = (nodes.layer[node] + 1) * layers + np.where(has, nodes.layer[second], -1) + 1
        fits = (width * layers) ** 2 < 1 << 62
        first, which = _distinct((pair * layers ** 2 + layer,) if fits else (pair, layer))
        # Each one's node (or pair) of the lowest index, and in that order: new ones are
        # described in node order.
        pairs = len(nodes) + 1
        lowest = np.full(len(first), np.iinfo(np.int64).max)
        np.minimum.at(lowest, which, node * pairs + fused + 1)
        by_use = np.argsort(lowest)
        node, fused = lowest[by_use] // pairs, lowest[by_use] % pairs - 1
        # Each one's content looked up by its bytes; a content not known yet described at its
        # first use (a dictionary of the bytes: a lexsort of their 64-bit words took 1.7 times
        # as long, 2026-12-02, on the 190 k content keys of 30 s of a llama-server's records).
        keys = self._content_keys(node, fused)
        data, width, known = keys.tobytes(), keys.shape[1], self.tables.contents
        found = [known.get(data[at:at + width])
                 or self._described(data[at:at + width], n, f)
                 for at, n, f in zip(range(0, len(data), width), node.tolist(), fused.tolist(),
                                     strict=True)]
        ids = np.empty((2, len(first)), np.int64)
        ids[:, by_use] = np.array(found, np.int64).reshape(-1, 2).T
        return ids[0][which], ids[1][which]

    def _content_keys(self, node: np.ndarray, fused: np.ndarray) -> np.ndarray:
        """Each node's (or fused pair's) descriptors but their times, and its layers: a row of
        bytes each."""
        nodes = self.model.nodes
        width = nodes.descriptors.dtype.itemsize
        has = fused >= 0
        keys = np.zeros((len(node), 2 * width + 24), np.uint8)
        keys[:, :width] = _contents(nodes.records(node))
        keys[has, width:2 * width] = _contents(nodes.records(fused[has]))
        keys[:, 2 * width:] = np.stack([nodes.layer[node],
                                        np.where(has, nodes.layer[np.maximum(fused, 0)], -1),
                                        has.astype(np.int64)], 1).view(np.uint8)
        return keys

    def _description(self, node: int, fused: int) -> tuple[int, int]:
        """The name and description ids of a node (or fused pair) by what its descriptors say
        (a descriptor sent again unchanged is described once)."""
        key = self._content_keys(np.array([node]), np.array([fused]))[0].tobytes()
        return self._described(key, node, fused)

    def _described(self, key: bytes, node: int, fused: int) -> tuple[int, int]:
        """The name and description ids of content `key` (_content_keys), of `node` and
        `fused`."""
        known = self.tables.contents.get(key)
        if known is None:
            label, tensor = self.model.op_label(node, fused)
            known = self.tables.contents[key] = (self.strings(f"{label} {tensor}"),
                                                 self.arg_set(_node_args(self.model, node, fused)))
        return known

    def _with_cpu(self, arg: np.ndarray, cpu: np.ndarray) -> np.ndarray:
        """Each op's arg set with the CPU it began on."""
        pairs, which = np.unique(np.stack([arg, cpu.astype(np.int64)], 1), axis=0,
                                 return_inverse=True)
        ids = [self.arg_set((*self.tables.arg_sets[a], (CPU_ARG, c))) for a, c in pairs.tolist()]
        return np.array(ids, np.int64)[which.reshape(-1)]

    def expert_routing(self) -> None:
        """With Mixture-of-Experts routing: a track per layer, `experts layer L`, with a slice per
        graph over the layer's first expert op naming the experts each token went to."""
        model, ops = self.model, self.model.ops
        if not model.routing:
            return
        main = ops.ith == 0
        span = dict(zip(ops.node[main].tolist(),
                        zip(ops.begin[main].tolist(), ops.work_end[main].tolist(), strict=True),
                        strict=True))
        first: dict[tuple[int, int], int] = {}
        for node in sorted(model.routing):
            first.setdefault((int(model.nodes.graph[node]), int(model.nodes.layer[node])), node)
        by_layer: dict[int, list[int]] = {}
        for (_, layer), node in first.items():
            if node in span:
                by_layer.setdefault(layer, []).append(node)
        for layer, nodes in sorted(by_layer.items()):
            track = self.track(Track((4 << 32) | (layer & 0xFFFFFFFF), TrackKind.GLOBAL,
                                     experts_track(layer), parent=1))
            self.rows.slices(track, np.array([span[n][0] for n in nodes]),
                             np.array([span[n][1] for n in nodes]), 0,
                             [self.strings(_experts_name(model.routing[n])) for n in nodes])

    def sequences(self, batches: list[StepBatch]) -> None:
        """A track per sequence id, with a slice per token step that held its tokens."""
        tok = self.model.tokens
        rows: dict[int, list[tuple[int, int, int, int | None]]] = {}
        for step, batch in enumerate(batches):
            for run in batch.runs:
                rows.setdefault(run.seq, []).append((step, run.n_tokens, run.seq, run.pos))
        seq_arg, step_arg, tokens_arg, pos_arg = SEQ_ARGS
        for seq, steps in sorted(rows.items()):
            track = self.track(Track((5 << 32) | (seq & 0xFFFFFFFF), TrackKind.GLOBAL,
                                     f"{SEQUENCE_TRACK} {seq}", parent=1))
            at = np.array([step for step, *_ in steps], np.int64)
            first, _ = self.rows.slices(
                track, tok.begin[at], tok.end[at], 0,
                [self.strings(PROMPT_SLICE if n > 1 else GENERATE_SLICE) for _, n, _, _ in steps],
                [self.arg_set(((seq_arg, seq), (tokens_arg, n))) for _, n, seq, _ in steps])
            self.rows.ints(step_arg, first, self.model.cont.first_step + at)
            self._positions(pos_arg, first, [pos for *_, pos in steps])

    def tokens_per_second(self) -> None:
        tok = self.model.tokens
        n_tokens = tok.arg0.astype(np.int64)
        done = tok.complete & (n_tokens > 0)
        seconds = np.maximum(tok.end - tok.begin, 1)[done] / 1e9
        track = self.track(Track(2, TrackKind.COUNTER, TOKENS_TRACK, parent=1, unit="tokens/s"))
        self.rows.add(tok.end[done], EventType.COUNTER, track, value=n_tokens[done] / seconds)

    def aggregate_counters(self) -> None:
        """With --aggregate: each op type's summed work, a counter track in ms."""
        for op, samples in sorted(op_type_series(self.model).items()):
            track = self.track(Track(self._next_counter_uuid(), TrackKind.COUNTER,
                                     work_track(op), parent=1, unit="ms"))
            ts, work = zip(*samples, strict=True)
            self.rows.add(list(ts), EventType.COUNTER, track,
                          value=np.array(work, np.float64) / 1e6)

    def _next_counter_uuid(self) -> int:
        return (3 << 32) | len(self.tracks)

    def recording(self) -> None:
        model = self.model
        track = self.track(Track(3, TrackKind.GLOBAL, RECORDING_TRACK))
        self.rows.slices(track, np.array([model.run.begin_ns]), np.array([model.run.end_ns]), 0,
                         self.strings(RECORD_SLICE), self.arg_set(_recording_args(model)))
        if not model.run.complete:
            self.rows.add(model.run.end_ns - 1, EventType.INSTANT, track,
                          name=self.strings(f"trace cut short: {model.run.status}"))
        # The roofs 1 ns apart: instants at one time would nest in each other.
        for i, peak in enumerate(model.run.peaks):
            self.rows.add(model.run.begin_ns + i, EventType.INSTANT, track,
                          name=self.strings(PEAK_SLICE), args=self.arg_set(tuple(zip(
                              PEAK_ARGS, (peak.kind.value, peak.dtype, peak.threads,
                                          float(peak.value), peak.how), strict=True))))

    def dag_flows(self, op_begin: np.ndarray, rank: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """One flow per DAG edge, between the op slices of the graph's calling thread (ith 0):
        (n, 3) flow id, row it starts at, row it ends at (rows in writing order, at `ts`);
        ids from a small cycle that starts over at each graph (`flow_ids`)."""
        model, ops = self.model, self.model.ops
        main = ops.ith == 0
        begin_of_node = np.full(len(model.nodes), -1, np.int64)
        begin_of_node[ops.node[main]] = rank[op_begin[main]]
        out, into = begin_of_node[model.edges[:, 0]], begin_of_node[model.edges[:, 1]]
        shown = (out >= 0) & (into >= 0)
        out, into = out[shown], into[shown]
        order = np.argsort(out * self.rows.count + into, kind="stable")  # lexsort((into, out))
        ids = np.empty(len(order), np.int64)
        ids[order] = flow_ids(ts[out[order]], ts[into[order]],
                              model.nodes.graph[model.edges[shown, 0][order]])
        return np.stack([ids, out, into], 1)

    def thread_counters(self, op_begin: np.ndarray, op_end: np.ndarray,
                        rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each counter's running total over a thread's ops, sampled at each op's begin and end,
        and each op's own count.

        Returns the (rows, counters) counter track, value and op delta columns.
        """
        model, ops = self.model, self.model.ops
        shape = (self.rows.count, len(model.run.counters))
        tracks = np.full(shape, -1, np.int64)
        values = np.zeros(shape, np.int64)
        deltas = np.full(shape, -1, np.int64)
        deltas[rank[op_begin]] = np.where(ops.counter_delta > 0, ops.counter_delta, -1)
        for tid in sorted_unique(ops.tid).tolist():
            sel = np.flatnonzero(ops.tid == tid)
            for c, counter in enumerate(model.run.counters):
                track = self.track(Track((2 << 32) | (tid << 4) | c, TrackKind.COUNTER,
                                         counter_track(counter, tid), parent=1, tid=tid,
                                         unit="count"))
                delta = np.maximum(ops.counter_delta[sel, c], 0)
                after = model.cont.counter_totals.get((tid, c), 0) + np.cumsum(delta)
                for rows, sampled in ((op_begin[sel], after - delta), (op_end[sel], after)):
                    tracks[rank[rows], c] = track
                    values[rank[rows], c] = sampled
        return tracks, values, deltas


def build_layout(model: TraceModel, tables: Tables | None = None) -> Layout:
    """The trace layout of a model (`tables`: those of the earlier chunks of its run)."""
    return _LayoutBuilder(model, Tables() if tables is None else tables).build()


def _recording_args(model: TraceModel) -> Args:
    run = model.run
    values: tuple[ArgValue, ...] = (
        run.status,
        run.complete,
        model.cont.events + model.event_count,
        run.lost_events,
        run.lost_nodes,
        model.cont.dropped_ops + model.dropped_ops,
        round(run.recorder_cpu_s * 1000),
        round(run.drain_gap_s * 1000),
        f"profinfer-perfetto {__version__}",
        run.ggml.version,
        run.ggml.commit,
        run.ggml.build_id,
        ",".join(run.counters),
        " ".join(run.cmdline),
    )
    args: list[tuple[str, ArgValue]] = [
        (name, value) for name, value in zip(RECORD_ARGS, values, strict=True)
        if name != BUILD_ID_ARG or value]
    if run.sched_cpus is not None:
        args += zip(SCHED_ARGS, (",".join(map(str, run.sched_cpus)), model.sched_records,
                                 run.sched_lost), strict=True)
    args += [(counted_arg(name), round(share, 4)) for name, share in model.run.counted.items()]
    for fn, cost in sorted(model.run.probe_costs.items()):
        runs, ns_per_run = probe_args(fn)
        args += [(runs, cost.runs), (ns_per_run, round(cost.ns / cost.runs))]
    args += [(note_arg(i), note) for i, note in enumerate(model.run.notes)]
    return tuple(args)


def flow_ids(begin: np.ndarray, end: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """Ids for flows in start order (`begin` sorted; each flow open up to and at its `end`,
    started in `graph`) such that two flows open at once never share one.

    A flow's id is free again once the flow has ended, so ids are taken in turn from a small
    cycle: the flows' numbers modulo the most flows that start while any one is open, plus 1
    (most edges are short: 15 ids for medium-llama; unique ids were a sixth of the trace's
    bytes). The numbers start over at each graph, so an edge has the same id in every token
    step and an op's flow fields are the same bytes from step to step, which deflate then
    finds with the rest of the op's event (2.0 of 11.6 B per event on medium-llama where they
    went on counting from graph to graph); where a flow of one graph is still open as the next
    one's start (an edge between the splits of a step), they count on from graph to graph. By
    passes.c in one pass where the install built it (model/native.py), else by numpy: the
    same."""
    if native.PASSES is not None:
        return native.PASSES.flow_ids(begin, end, graph)
    cycle = int((np.searchsorted(begin, end, side="right") - np.arange(len(begin))).max(
        initial=1))
    by_graph = np.argsort(graph, kind="stable")
    starts = np.flatnonzero(np.diff(graph[by_graph], prepend=-1))
    number = np.empty(len(begin), np.int64)
    number[by_graph] = np.arange(len(begin)) - np.repeat(starts, np.diff(starts, append=len(
        begin)))
    ids: np.ndarray = number % cycle + 1
    if _shared_while_open(ids, begin, end):
        ids = np.arange(len(begin)) % cycle + 1
    return ids


def _shared_while_open(ids: np.ndarray, begin: np.ndarray, end: np.ndarray) -> bool:
    """Whether a flow starts while another of its id is open (at or before that one's end)."""
    if not len(ids):
        return False
    order = np.lexsort((begin, ids))
    span = int(max(begin.max(), end.max())) - int(begin.min()) + 1
    key = ids[order] * span - int(begin.min())
    open_until = np.maximum.accumulate(key + end[order].astype(np.int64))
    return bool((key[1:] + begin[order][1:].astype(np.int64) <= open_until[:-1]).any())
