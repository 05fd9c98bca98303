"""The trace model: token steps, graphs, graph nodes, per-thread ops and DAG edges.

Built from a recording's columnar events (capture/events.py), kept columnar. Every encoder
(Perfetto protobuf, Chrome JSON) renders this model and nothing else, so what a trace shows
is decided here:

- a token step is one llama_decode / llama_encode / llama_process call (prefill when its batch
  has more than one token, decode otherwise), on the thread that made it;
- a graph is one ggml_graph_compute call; every thread that ran its ops shows it;
- an op is one thread's share of one computed node (or fused node pair): from its start to
  the last barrier the thread entered before its next op (`work_end`), then the barrier wait
  until the thread's next op or the graph's end (`end`); a recording with one trap per op (no
  op begins) has its op begins derived from its barriers (model/one_trap.py);
- a DAG edge links the node that last wrote a tensor's storage to a node reading it, in its
  graph or, where a GPU backend's scheduler cut a token step into splits, in an earlier split
  of the step (through the scheduler's copy of it into the reader's backend, _copy_edges).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from profinfer_perfetto.capture.events import (
    BATCH_RUNS,
    COUNTER_UNREAD,
    ROUTE_EXPERTS,
    ROUTE_TOKENS,
    UNKNOWN_POS,
    Backend,
    HostCall,
    Kind,
    TokenEntry,
)
from profinfer_perfetto.capture.run import Recording, Run, Scheduling
from profinfer_perfetto.model import native
from profinfer_perfetto.model.backends import blas_ops, vulkan_device_times, vulkan_ops
from profinfer_perfetto.model.lookup import Latest, by_tensor, in_graph, last_descriptor, latest
from profinfer_perfetto.model.names import PHASES
from profinfer_perfetto.model.one_trap import (
    FUSED_OPS,
    Begins,
    is_one_trap,
    op_begins,
    with_op_begins,
    work_rows,
)
from profinfer_perfetto.model.records import dense_unique, sorted_unique, take, threads_of
from profinfer_perfetto.model.work import auto_named

_INVALID_COUNTER = np.uint64(COUNTER_UNREAD)
_LAYER = re.compile(r"-(\d+)$")


@dataclass
class Spans:
    """Begin/end pairs of one event kind: token steps or graphs."""

    tid: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    arg0: np.ndarray
    arg1: np.ndarray
    aux: np.ndarray
    complete: np.ndarray
    """False where the capture stopped before the span ended."""

    def __len__(self) -> int:
        return len(self.begin)

    def containing(self, ts: np.ndarray) -> np.ndarray:
        """Index of the span each timestamp falls in, -1 for none (spans do not overlap)."""
        if len(self.begin) == 0:
            return np.full(len(ts), -1, np.int64)
        i = np.searchsorted(self.begin, ts, side="right") - 1
        inside = (i >= 0) & (ts <= self.end[np.maximum(i, 0)])
        return np.where(inside, i, -1)


@dataclass
class Nodes:
    """One computed graph node as the thread with ith == 0 described it."""

    graph: np.ndarray
    index: np.ndarray
    """Position among the graph's described nodes (execution order)."""
    descriptors: np.ndarray
    """The NODE records the nodes' descriptors are among (the recording's, not a copy)."""
    desc: np.ndarray
    """Each node's descriptor, a row of `descriptors`: its shapes, types and sources."""
    ptr: np.ndarray
    """Each node's tensor address."""
    names: list[str]
    layer: np.ndarray
    """The layer of the tensor name's `-N` suffix; a node ggml named automatically (`node_21`)
    takes the layer of its first consumer; -1 for none."""

    def __len__(self) -> int:
        return len(self.graph)

    def records(self, nodes: np.ndarray) -> np.ndarray:
        """The descriptors of `nodes` (a copy)."""
        return take(self.descriptors, self.desc[nodes])

    def record(self, node: int) -> np.void:
        """One node's descriptor."""
        found: np.void = self.descriptors[self.desc[node]]
        return found


@dataclass
class Ops:
    """One thread's share of one computed node (or fused pair)."""

    tid: np.ndarray
    cpu: np.ndarray
    graph: np.ndarray
    node: np.ndarray
    fused: np.ndarray
    """Node index of the second node of a fused pair, -1 otherwise."""
    ith: np.ndarray
    begin: np.ndarray
    work_end: np.ndarray
    end: np.ndarray
    counter_delta: np.ndarray
    """(n, counters) counts during the op's work; -1 where unknown (thread changed CPU)."""

    def __len__(self) -> int:
        return len(self.begin)


MOE_OPS = ("MUL_MAT_ID", "ADD_ID")
"""The ops that route tokens to experts (their src[2] holds the expert ids)."""


@dataclass(frozen=True)
class Routing:
    """The experts one execution of a Mixture-of-Experts node sent its tokens to."""

    ids: np.ndarray
    """(tokens read, experts read) expert ids, in the order the router ranked them."""
    n_tokens: int
    """Tokens the op routed (more than `ids` has rows where the probe cut them)."""
    n_used: int
    """Experts per token (more than `ids` has columns where the probe cut them)."""


def _routing(routes: np.ndarray, nodes: Nodes, ops: Ops, moe_ops: set[int]
             ) -> dict[int, Routing]:
    """Routing records joined to the nodes whose calling thread's op began (or, with one trap
    per op, its work ended: the probe reads the ids at its barrier) at their ts; a
    Mixture-of-Experts node the probe did not read (its ids tensor, src[2], was read for an
    earlier node of the graph: a layer's gate, up and down share one) shares that one's."""
    if len(routes) == 0:
        return {}
    main = ops.ith == 0
    at = {(int(ts), int(nodes.ptr[n])): int(n)
          for times in (ops.begin[main], ops.work_end[main])
          for ts, n in zip(times.tolist(), ops.node[main].tolist(), strict=True)}
    chunks: dict[int, list[np.ndarray]] = {}
    shape: dict[int, tuple[int, int]] = {}
    for r in routes[np.argsort(routes["first_token"], kind="stable")]:
        node = at.get((int(r["ts"]), int(r["node"])))
        if node is None:
            continue
        n_tokens, n_used = int(r["n_tokens"]), int(r["n_used"])
        rows = min(ROUTE_TOKENS, n_tokens - int(r["first_token"]))
        chunks.setdefault(node, []).append(r["ids"][:rows, :min(n_used, ROUTE_EXPERTS)])
        shape[node] = (n_tokens, n_used)
    read = {node: Routing(np.concatenate(parts), *shape[node]) for node, parts in chunks.items()}
    found: dict[int, Routing] = {}
    last: tuple[int, int, Routing] | None = None
    ids_of = nodes.descriptors["src"]["ptr"][nodes.desc, 2].tolist()
    op_of = nodes.descriptors["op"][nodes.desc].tolist()
    for n in np.lexsort((nodes.index, nodes.graph)).tolist():
        if op_of[n] not in moe_ops:
            continue
        key = (int(nodes.graph[n]), ids_of[n])
        if n in read:
            last = (*key, read[n])
        elif last is None or key != last[:2]:
            continue
        found[n] = last[2]
    return found


@dataclass
class Continuation:
    """Where a model continues from: for a run written in chunks as it goes, the numbering and
    totals of the chunks before (a whole run starts from nothing and is final)."""

    first_step: int = 0
    first_graph: int = 0
    tokens_before: int = 0
    """Tokens of earlier steps (a launched run's positions count from its start)."""
    counter_totals: dict[tuple[int, int], int] = field(default_factory=dict)
    """(tid, counter) -> the thread's running total so far."""
    events: int = 0
    dropped_ops: int = 0
    sched_records: int = 0
    split_copies: frozenset[int] = frozenset()
    """Addresses that held a split's input copy (_copy_edges)."""
    final: bool = True
    """It ends the run (its model says how the run went)."""


@dataclass
class TraceModel:
    run: Run
    tokens: Spans
    graphs: Spans
    nodes: Nodes
    ops: Ops
    edges: np.ndarray
    """(n, 2) node indices: producer, consumer."""
    event_count: int
    op_stats: list[tuple[int, np.ndarray]]
    """With --aggregate: the per-tensor statistics read during the capture."""
    descriptors: np.ndarray
    """Every node descriptor the probes sent (NODE records), in arrival order."""
    dropped_ops: int
    """Op events outside any graph (a capture that began mid-graph)."""
    routing: dict[int, Routing] = field(default_factory=dict)
    """Node index -> the experts its Mixture-of-Experts op routed each token to."""
    sched: Scheduling | None = None
    """With --sched: the context switches and wakeups on the target's CPUs."""
    step_runs: dict[int, tuple[SeqRun, ...]] = field(default_factory=dict)
    """Token step index -> the sequences its batch named (steps of batches that name none are
    not here)."""
    cont: Continuation = field(default_factory=Continuation)
    inner_waits: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))
    """(n, 3): op index, begin, end of each wait at a barrier inside an op's own function (a
    matmul's threads wait there for each other): part of the op's work, drawn within it."""
    host_calls: Spans | None = None
    """A GPU backend's host calls (submits, waits for the device, copies; `aux`: HostCall,
    `arg0`: a copy's bytes)."""
    device_ops: Spans | None = None
    """With record --gpu-timestamps: each timed Vulkan recording's span on the device's track
    (`arg0`: its node, `arg1`: the node fused into it, -1 for none; model/backends.py
    vulkan_device_times says how it is placed)."""
    split_copies: frozenset[int] = frozenset()
    """Addresses that held a split's input copy, in this model and before (_copy_edges)."""

    @cached_property
    def batches(self) -> list[StepBatch]:
        """What each token step's batch held (step_batches), worked out once per model: the
        layout and the run's totals both read it."""
        return step_batches(self)

    @property
    def sched_records(self) -> int:
        """Scheduling records of the run so far."""
        return self.cont.sched_records + (0 if self.sched is None else len(self.sched.records))

    def then(self, final: bool = False) -> Continuation:
        """Where the next chunk continues from."""
        c = self.cont
        totals = dict(c.counter_totals)
        tids, which = threads_of(self.ops.tid)
        for counter in range(len(self.run.counters)):
            delta = np.maximum(self.ops.counter_delta[:, counter], 0)
            sums = np.bincount(which.reshape(-1), weights=delta, minlength=len(tids))
            for tid, total in zip(tids.tolist(), sums.tolist(), strict=True):
                totals[tid, counter] = totals.get((tid, counter), 0) + int(total)
        n_tokens = np.maximum(self.tokens.arg0.astype(np.int64), 0)
        return Continuation(
            first_step=c.first_step + len(self.tokens),
            first_graph=c.first_graph + len(self.graphs),
            tokens_before=c.tokens_before + int(n_tokens.sum()),
            counter_totals=totals,
            events=c.events + self.event_count,
            dropped_ops=c.dropped_ops + self.dropped_ops,
            sched_records=self.sched_records,
            split_copies=self.split_copies,
            final=final,
        )

    def op_label(self, node: int, fused: int) -> tuple[str, str]:
        """The op (sub-op for UNARY and GLU, `A+B` for a fused pair) and the tensor name."""
        ops = [node] if fused < 0 else [node, fused]
        labels = []
        for n in ops:
            rec = self.nodes.record(n)
            labels.append(
                self.run.ggml.subop_name(int(rec["op"]), int(rec["op_param0"]))
                or self.run.ggml.op_name(int(rec["op"]))
            )
        return "+".join(labels), self.nodes.names[ops[-1]]

    def thread_ids(self) -> list[int]:
        """The run's threads and every thread of the model's spans, in order."""
        spans = [self.ops.tid, self.tokens.tid, self.graphs.tid,
                 *([] if self.host_calls is None else [self.host_calls.tid])]
        seen = sorted_unique(np.concatenate([s.astype(np.int64) for s in spans])).tolist()
        return sorted(set(self.run.threads) | set(seen))


def layer_of(tensor_name: str) -> int:
    """The layer in a ggml tensor name's `-N` suffix, -1 for none."""
    m = _LAYER.search(tensor_name)
    return int(m.group(1)) if m else -1


def tensor_name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@lru_cache(maxsize=1 << 14)
def _named(raw: bytes) -> tuple[str, int, bool]:
    """A tensor's name, its layer and whether ggml named it, from its name field (a run decodes
    each name once)."""
    name = tensor_name(raw)
    return name, layer_of(name), auto_named(name)


def _spans(events: np.ndarray, begin: Kind, end: Kind, end_ns: int) -> Spans:
    """Pair each begin with the next end on its thread; events are sorted by (tid, ts)."""
    sel = take(events, (events["kind"] == begin) | (events["kind"] == end))
    kind, tid, ts = sel["kind"], sel["tid"], sel["ts"]
    is_begin = kind == begin
    closed = is_begin.copy()
    closed[:-1] &= (kind[1:] == end) & (tid[1:] == tid[:-1])
    closed[-1:] = False
    next_ts = np.zeros_like(ts)
    next_ts[:-1] = ts[1:]
    b = take(sel, is_begin)
    closed_b = closed[is_begin]
    order = np.argsort(b["ts"], kind="stable")
    end_ts = np.where(closed_b, next_ts[is_begin], np.uint64(end_ns))
    return Spans(
        tid=b["tid"][order],
        begin=b["ts"][order],
        end=end_ts[order],
        arg0=b["arg0"][order],
        arg1=b["arg1"][order],
        aux=b["aux"][order],
        complete=closed_b[order],
    )


def _latest_begin(is_begin: np.ndarray) -> np.ndarray:
    """For each row, the index of the latest row at or before it that is a begin (-1: none)."""
    idx = np.where(is_begin, np.arange(len(is_begin)), -1)
    return np.maximum.accumulate(idx) if len(idx) else idx


def _node_lookup(nodes: Nodes, graph: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Index of the node with this (graph, tensor address), -1 if none was described (the last
    one where a graph computed a tensor twice)."""
    return in_graph(nodes.graph, nodes.ptr, graph, ptr)


def _edges(nodes: Nodes, fused_second: np.ndarray, graphs: Spans, split_step: np.ndarray,
           copies: set[int]) -> np.ndarray:
    """Producer -> consumer node pairs: the last earlier writer of each source's storage, in
    the same graph or, where a token step's graph was cut into splits (`split_step`: each
    graph's step, -1 where it was not), in an earlier split of the step; and the edges into
    split inputs the scheduler copied (`copies`, _copy_edges)."""
    n = len(nodes)
    reader, slot, producer = _producers(nodes.descriptors, nodes.desc)
    found = producer >= 0
    graph_of = nodes.graph[producer[found]], nodes.graph[reader[found]]
    step_of = split_step[graph_of[0]]
    found[found] = (graph_of[0] == graph_of[1]) | ((step_of >= 0)
                                                   & (step_of == split_step[graph_of[1]]))
    pairs = np.concatenate([np.stack([producer[found], reader[found]], 1),
                            _copy_edges(nodes, graphs, split_step, reader[~found],
                                        slot[~found], copies)])
    # A fused pair is one op: edges of its second node belong to its first.
    op_of = np.arange(n)
    op_of[fused_second[fused_second >= 0]] = np.flatnonzero(fused_second >= 0)
    source, target = op_of[pairs[:, 0]], op_of[pairs[:, 1]]
    keys = sorted_unique((source * n + target)[source != target])
    return np.stack([keys // n, keys % n], 1).astype(np.int64).reshape(-1, 2)


def _producers(descriptors: np.ndarray, desc: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each source of the nodes (rows `desc` of the NODE records `descriptors`, in graph order)
    as (reader, slot), in that order, with its producer: the last earlier node that wrote the
    storage it reads (a view's source, else the tensor), -1 for none. By passes.c where the
    install built it (model/native.py), else by numpy: the same."""
    if native.PASSES is not None:
        return native.PASSES.last_writers(descriptors, desc)
    raw = take(descriptors, desc)
    storage = np.where(raw["view_src"] != 0, raw["view_src"], raw["ptr"])
    src_ptr, src_view = raw["src"]["ptr"], raw["src"]["view_src"]
    reader, slot = np.nonzero(src_ptr)
    read = np.where(src_view[reader, slot] != 0, src_view[reader, slot], src_ptr[reader, slot])
    return reader, slot, latest(storage, np.arange(len(raw)), read, reader, before=True)


def _split_steps(graphs: Spans, tokens: Spans) -> np.ndarray:
    """Each graph's token step where the scheduler cut the step into splits (graphs of more
    than one backend), -1 for the others."""
    step = tokens.containing(graphs.begin)
    inside, aux = step >= 0, graphs.aux.astype(np.int64)
    low = np.full(len(tokens), np.iinfo(np.int64).max)
    high = np.full(len(tokens), np.iinfo(np.int64).min)
    np.minimum.at(low, step[inside], aux[inside])
    np.maximum.at(high, step[inside], aux[inside])
    split = np.append(high > low, False)  # the last: graphs in no step (step -1)
    return np.where(split[step], step, -1)


def _key(record: np.void) -> bytes:
    """A tensor's shape and type, as a node's record or a source's says them."""
    return np.asarray(record["ne"]).tobytes() + int(record["type"]).to_bytes(4, "little")


def _copy_edges(nodes: Nodes, graphs: Spans, split_step: np.ndarray, reader: np.ndarray,
                slot: np.ndarray, copies: set[int]) -> np.ndarray:
    """Edges into a split's inputs the scheduler copied into the split's backend (ggml's
    `Vulkan0#embd#0`: a new tensor of the same shape and type, no node, no descriptor of its
    own): from the last node of that shape and type an earlier split of the step, on another
    backend, computed (one of the two a device's: a host backend such as BLAS reads the CPU's
    tensors where they are), to the nodes that read the copy. A source is taken for a copy where
    nothing in its split wrote it, it is no op's result (op NONE, like a weight) and it is the
    only such source of its shape and type in its split; or where its address held a copy
    before (`copies`, which it adds to: a weight's address never holds a copy)."""
    src = take(nodes.descriptors["src"], (nodes.desc[reader], slot))
    keep = (src["op"] == 0) & (split_step[nodes.graph[reader]] >= 0)
    if not keep.any():
        return np.empty((0, 2), np.int64)
    order = np.argsort(reader[keep], kind="stable")
    reader, src = reader[keep][order], src[keep][order]
    graph_of = nodes.graph[reader]
    device = graphs.aux == Backend.VULKAN
    steps, first = np.unique(split_step, return_index=True)
    first_of = dict(zip(steps.tolist(), first.tolist(), strict=True))
    pairs: list[tuple[int, int]] = []
    for g, at, count in zip(*np.unique(graph_of, return_index=True, return_counts=True),
                            strict=True):
        here = range(int(at), int(at + count))
        keys = {i: _key(src[i]) for i in here}
        ptrs_of: dict[bytes, set[int]] = {}
        for i in here:
            ptrs_of.setdefault(keys[i], set()).add(int(src["ptr"][i]))
        lo, hi = np.searchsorted(nodes.graph, [first_of[split_step[g]], g])
        earlier = np.arange(lo, hi)
        other = graphs.aux[nodes.graph[earlier]]
        earlier = earlier[(other != graphs.aux[g]) & (device[nodes.graph[earlier]] | device[g])]
        origin = {_key(nodes.record(o)): o for o in earlier.tolist()}
        for i in here:
            ptr = int(src["ptr"][i])
            if keys[i] in origin and (len(ptrs_of[keys[i]]) == 1 or ptr in copies):
                copies.add(ptr)
                pairs.append((origin[keys[i]], int(reader[i])))
    return np.array(pairs, np.int64).reshape(-1, 2)


def _inner_waits(events: np.ndarray, ops: Ops) -> np.ndarray:
    """Each thread's waits inside its ops, within the work of the thread's op that began last
    before: from a barrier call's event to its return's, the next event of the thread's of
    these two kinds (events are sorted by thread, then time); a tail call's (which returns to
    another function, unprobed) to the op's end of work."""
    inner = take(events, (events["kind"] == Kind.INNER_WAIT_BEGIN)
                 | (events["kind"] == Kind.INNER_WAIT_END))
    begins = np.flatnonzero(inner["kind"] == Kind.INNER_WAIT_BEGIN)
    after = np.minimum(begins + 1, max(len(inner) - 1, 0))
    returned = ((begins + 1 < len(inner)) & (inner["kind"][after] == Kind.INNER_WAIT_END)
                & (inner["tid"][after] == inner["tid"][begins]))
    begin = inner["ts"][begins].astype(np.int64)
    op = latest(ops.tid, ops.begin, inner["tid"][begins], begin)
    work_end = ops.work_end[np.maximum(op, 0)].astype(np.int64)
    end = np.where(returned, inner["ts"][after].astype(np.int64), work_end)
    inside = (op >= 0) & (begin < work_end) & (end <= work_end)
    return np.stack([op[inside], begin[inside], end[inside]], 1).astype(np.int64).reshape(-1, 3)


def build(recording: Recording, cont: Continuation | None = None) -> TraceModel:
    """The model of a recording (of a whole run, or of a chunk that continues `cont`)."""
    run, events = recording.run, recording.events
    order = np.lexsort((np.arange(len(events)), events["ts"], events["tid"]))
    events = take(events, order)
    device = vulkan_device_times(events)
    events, uncut = blas_ops(vulkan_ops(events), recording.nodes, run.ggml)
    tokens = _spans(events, Kind.TOKEN_BEGIN, Kind.TOKEN_END, run.end_ns)
    graphs = _spans(events, Kind.GRAPH_BEGIN, Kind.GRAPH_END, run.end_ns)
    nodes, auto, ops, dropped = _nodes_and_ops(recording, events, graphs)
    copies = set(cont.split_copies if cont else ())
    edges = _edges(nodes, _fused_second(nodes, ops), graphs, _split_steps(graphs, tokens),
                   copies)
    _inherit_layers(nodes, auto, edges)
    return TraceModel(
        run=run,
        tokens=tokens,
        graphs=graphs,
        nodes=nodes,
        ops=ops,
        edges=edges,
        event_count=len(recording.events),
        op_stats=recording.op_stats,
        descriptors=recording.nodes,
        dropped_ops=dropped + uncut,
        routing=_routing(recording.routes, nodes, ops,
                         {run.ggml.op_id(op) for op in MOE_OPS} - {-1}),
        sched=recording.scheduling,
        step_runs=_step_runs(recording.batches, tokens),
        cont=cont or Continuation(),
        inner_waits=_inner_waits(events, ops),
        host_calls=_host_calls(events, run.end_ns),
        device_ops=_device_ops(device, graphs, nodes),
        split_copies=frozenset(copies),
    )


def _device_ops(device: np.ndarray, graphs: Spans, nodes: Nodes) -> Spans | None:
    """The Vulkan recordings' device times (vulkan_device_times) of described nodes, each
    named by the node its recording began in its graph (None without any)."""
    if len(device) == 0:
        return None
    g = graphs.containing(device["host_ts"].astype(np.uint64))
    device, g = device[g >= 0], g[g >= 0]
    both = _node_lookup(nodes, np.concatenate([g, g]),
                        np.concatenate([device["node"], device["fused"]]))
    node, fused = both[:len(g)], np.where(device["fused"] != 0, both[len(g):], -1)
    known = node >= 0
    return Spans(tid=device["tid"][known], begin=device["begin"][known],
                 end=device["end"][known], arg0=node[known], arg1=fused[known],
                 aux=np.zeros(np.count_nonzero(known), np.uint32),
                 complete=np.ones(np.count_nonzero(known), bool))


def _host_calls(events: np.ndarray, end_ns: int) -> Spans:
    """A GPU backend's host calls, each call's begin paired with its next return of the same
    call on its thread (calls nest: a copy may submit), in time order."""
    kind = events["kind"]
    host = take(events, (kind == Kind.HOST_CALL_BEGIN) | (kind == Kind.HOST_CALL_END))
    if len(host) == 0:  # a CPU run's
        return _spans(host, Kind.HOST_CALL_BEGIN, Kind.HOST_CALL_END, end_ns)
    calls = [_spans(take(host, host["aux"] == c), Kind.HOST_CALL_BEGIN, Kind.HOST_CALL_END, end_ns)
             for c in HostCall]
    merged = {f: np.concatenate([getattr(c, f) for c in calls]) for f in vars(calls[0])}
    order = np.argsort(merged["begin"], kind="stable")
    return Spans(**{f: v[order] for f, v in merged.items()})


def _nodes_and_ops(recording: Recording, events: np.ndarray, graphs: Spans
                   ) -> tuple[Nodes, np.ndarray, Ops, int]:
    """The nodes (and which of them ggml named itself) and the ops of a recording's `events`
    (sorted by thread, then time), and the op begins dropped: from the op begins, or derived
    from the barriers where one trap per op recorded none (one_trap.py)."""
    run, descriptors = recording.run, by_tensor(recording.nodes)
    if is_one_trap(recording.events):
        fused = (run.ggml.op_id(FUSED_OPS[0]), run.ggml.op_id(FUSED_OPS[1]))
        graph_of = graphs.containing(events["ts"])
        begins = op_begins(events, graph_of, graphs.begin, graphs.tid, recording.nodes, fused,
                           descriptors)
        if not np.any((events["kind"] == Kind.OP_BEGIN) | (events["kind"] == Kind.OP_SKIP)):
            nodes, auto = _nodes(begins, recording.nodes, graphs, descriptors)
            return nodes, auto, *_one_trap_ops(events, graph_of, begins, graphs, nodes,
                                               len(run.counters))
        events = with_op_begins(events, begins)  # a BLAS or Vulkan split's ops too
    nodes, auto = _nodes(Begins.of_events(events), recording.nodes, graphs, descriptors)
    return nodes, auto, *_ops(events, graphs, nodes, len(run.counters))


def _nodes(begins: Begins, descriptors: np.ndarray, graphs: Spans, index: Latest
           ) -> tuple[Nodes, np.ndarray]:
    """A graph's nodes, in the order its calling thread (ith 0) ran them (its traced op
    begins'), each with the last descriptor sent for its tensor (the probes describe a tensor
    again only when it changed; `index`: by_tensor of the descriptors); and which of them ggml
    named itself."""
    executed = begins.where(begins.traced & (begins.ith == 0))
    executed = executed.where(np.argsort(executed.ts, kind="stable"))
    second = executed.arg1 != 0
    ptrs = np.stack([executed.arg0, np.where(second, executed.arg1, 0)], 1).reshape(-1)
    at = np.repeat(executed.ts, 2)
    keep = ptrs != 0
    ptrs, at = ptrs[keep], at[keep]
    described = last_descriptor(index, ptrs, at)
    node_graph = graphs.containing(at)
    ok = (described >= 0) & (node_graph >= 0)
    desc, node_graph = described[ok], node_graph[ok]
    first_of_graph = np.searchsorted(node_graph, node_graph, side="left")
    # Each descriptor's name decoded once: a graph's nodes are described alike at every step.
    used, of_node = dense_unique(desc, len(descriptors))
    named = [_named(n) for n in descriptors["name"][used].tolist()]
    names, layers, automatic = zip(*named, strict=True) if named else ((), (), ())
    nodes = Nodes(
        graph=node_graph,
        index=np.arange(len(desc)) - first_of_graph,
        descriptors=descriptors,
        desc=desc,
        ptr=ptrs[ok],
        names=np.array(names, object)[of_node].tolist(),
        layer=np.array(layers, np.int64)[of_node],
    )
    return nodes, np.array(automatic, bool)[of_node]


def _ops(events: np.ndarray, graphs: Spans, nodes: Nodes, counters: int) -> tuple[Ops, int]:
    """Ops: each op begin, and the barriers its thread entered before its next op (an op the
    --ops filter left out counts as a next op, and is dropped afterwards), by thread and time
    (as the events are); and the op begins dropped (outside any graph, or of a node not
    described)."""
    kinds = events["kind"]
    work = take(events,
                (kinds == Kind.OP_BEGIN) | (kinds == Kind.BARRIER) | (kinds == Kind.OP_SKIP))
    work_graph = graphs.containing(work["ts"])
    dropped = int(np.count_nonzero((work_graph < 0) & (work["kind"] == Kind.OP_BEGIN)))
    work, work_graph = take(work, work_graph >= 0), work_graph[work_graph >= 0]
    begin_rows, last_barrier, end, work_end = _op_spans(
        work["tid"], work["ts"], work["kind"] != Kind.BARRIER, work_graph, graphs.end)
    b, g = take(work, begin_rows), work_graph[begin_rows]
    has_barrier = last_barrier >= 0
    after = take(work, np.where(has_barrier, last_barrier, begin_rows))
    delta = _counter_deltas(b, after, has_barrier, counters)
    ops, undescribed = _described_ops(Begins.of_events(b), g, end, work_end, delta, nodes)
    return ops, dropped + undescribed


def _one_trap_ops(events: np.ndarray, graph_of: np.ndarray, begins: Begins, graphs: Spans,
                  nodes: Nodes, counters: int) -> tuple[Ops, int]:
    """The ops of a one-trap recording, as _ops gives them for its `events` (`graph_of`: each
    one's graph) with its op begins (one_trap.op_begins) among them, without copying its
    records: the begins paired with the barriers by columns; the begins read no counters."""
    begin_graph = graphs.containing(begins.ts)
    inside = begin_graph >= 0
    if not inside.all():
        begins, begin_graph = begins.where(inside), begin_graph[inside]
    barriers = np.flatnonzero((events["kind"] == Kind.BARRIER) & (graph_of >= 0))
    end, work_end = _begin_spans(events["tid"][barriers], events["ts"][barriers],
                                 graph_of[barriers], begins, begin_graph, graphs.end)
    delta = np.full((len(begins), counters), -1, np.int64)
    ops, undescribed = _described_ops(begins, begin_graph, end, work_end, delta, nodes)
    return ops, int(np.count_nonzero(~inside)) + undescribed


def _begin_spans(tid: np.ndarray, ts: np.ndarray, graph: np.ndarray, begins: Begins,
                 begin_graph: np.ndarray, graph_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The end and end of work of op begins (in `begin_graph`) among barriers (their threads,
    times and graphs; both by thread, then time), as _op_spans gives them for the two merged
    (work_rows). By passes.c in one pass where the install built it (model/native.py), else
    by numpy: the same."""
    if native.PASSES is not None:
        return native.PASSES.merged_spans(tid, ts, graph, begins.tid, begins.ts, begin_graph,
                                          graph_end)
    _, _, end, work_end = _op_spans(*work_rows(tid, ts, graph, begins, begin_graph), graph_end)
    return end, work_end


def _described_ops(b: Begins, g: np.ndarray, end: np.ndarray, work_end: np.ndarray,
                   delta: np.ndarray, nodes: Nodes) -> tuple[Ops, int]:
    """The ops of op begins `b` (in graphs `g`; their ends, ends of work and counter deltas)
    whose nodes were described, and how many traced op begins were of nodes not described."""
    node = _node_lookup(nodes, g, b.arg0)
    pairs = np.flatnonzero(b.arg1 != 0)
    fused = np.full(len(b), -1, np.int64)
    fused[pairs] = _node_lookup(nodes, g[pairs], b.arg1[pairs])
    known = (node >= 0) & b.traced
    ops = Ops(
        tid=b.tid[known],
        cpu=b.cpu[known],
        graph=g[known],
        node=node[known],
        fused=fused[known],
        ith=b.ith[known],
        begin=b.ts[known],
        work_end=work_end[known],
        end=end[known],
        counter_delta=delta[known],
    )
    return ops, int(np.count_nonzero(~known & b.traced))


def _op_spans(tid: np.ndarray, ts: np.ndarray, is_begin: np.ndarray, work_graph: np.ndarray,
              graph_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of work rows (op begins where `is_begin`, else barriers; by thread and time, each in its
    graph), the rows that begin ops, the row of each op's last barrier on its thread in its
    graph (-1: none), its end and the end of its work. By passes.c where the install built it
    (model/native.py), else by numpy: the same."""
    if native.PASSES is not None:
        return native.PASSES.op_spans(tid, ts, is_begin, work_graph, graph_end)
    begin_rows, last_barrier = _op_rows(tid, is_begin, work_graph)
    end, work_end = _op_ends(tid, ts, work_graph, begin_rows, last_barrier,
                             graph_end[work_graph[begin_rows]])
    return begin_rows, last_barrier, end, work_end


def _op_rows(tid: np.ndarray, is_begin: np.ndarray, work_graph: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The work rows (op begins where `is_begin`, else barriers; by thread and time) that begin
    ops, and the row of each op's last barrier on its thread in its graph (-1: none)."""
    owner = _latest_begin(is_begin)
    same = (owner >= 0) & (tid == tid[np.maximum(owner, 0)])
    same &= work_graph == work_graph[np.maximum(owner, 0)]
    begin_rows = np.flatnonzero(is_begin)
    op_of_row = np.cumsum(is_begin) - 1
    last_barrier = np.full(len(begin_rows), -1, np.int64)
    barrier_rows = np.flatnonzero(~is_begin & same)
    np.maximum.at(last_barrier, op_of_row[barrier_rows], barrier_rows)
    return begin_rows, last_barrier


def _op_ends(tid: np.ndarray, ts: np.ndarray, work_graph: np.ndarray, begin_rows: np.ndarray,
             last_barrier: np.ndarray, graph_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each op's end (its thread's next op in the graph, or the graph's end) and the end of its
    work (its last barrier, or its end)."""
    g = work_graph[begin_rows]
    nxt = np.append(begin_rows[1:], -1)[:len(begin_rows)]
    nxt_row = np.maximum(nxt, 0)
    next_same = (nxt >= 0) & (tid[nxt_row] == tid[begin_rows]) & (work_graph[nxt_row] == g)
    end = np.where(next_same, ts[nxt_row], graph_end)
    end = np.minimum(end, graph_end)
    has_barrier = last_barrier >= 0
    work_end = np.where(has_barrier, ts[np.maximum(last_barrier, 0)], end)
    return end, np.minimum(work_end, end)


def _counter_deltas(begins: np.ndarray, after: np.ndarray, has_barrier: np.ndarray,
                    counters: int) -> np.ndarray:
    """(ops, counters): each counter's count from an op's begin to its last barrier, where both
    were read on one CPU (-1: not known)."""
    usable = (after["cpu"] == begins["cpu"]) & has_barrier
    delta = np.full((len(begins), counters), -1, np.int64)
    for c in range(counters):
        v0, v1 = begins["counter"][:, c], after["counter"][:, c]
        ok = usable & (v0 < _INVALID_COUNTER) & (v1 < _INVALID_COUNTER) & (v1 >= v0)
        delta[ok, c] = (v1[ok] - v0[ok]).astype(np.int64)
    return delta


def _fused_second(nodes: Nodes, ops: Ops) -> np.ndarray:
    """Per node, the second node of the fused pair it begins (-1: none)."""
    fused_second = np.full(len(nodes), -1, np.int64)
    pairs = ops.fused >= 0
    fused_second[ops.node[pairs]] = ops.fused[pairs]
    return fused_second


def _inherit_layers(nodes: Nodes, auto: np.ndarray, edges: np.ndarray) -> None:
    """An unnamed node takes the layer of its first consumer that has one (consumers come after
    their producers, so theirs are still their own)."""
    producer, consumer = edges[:, 0], edges[:, 1]
    takes = auto[producer] & (nodes.layer[producer] < 0) & (nodes.layer[consumer] >= 0)
    unnamed, first = np.unique(producer[takes], return_index=True)
    nodes.layer[unnamed] = nodes.layer[consumer[takes][first]]


def token_phase(n_tokens: int, entry: int, sequences: int = 1) -> str:
    """How a token step is named: encode; decode (one token of each sequence in the batch);
    prefill (several tokens of one sequence); mixed (several sequences, not one token each: a
    server's prompt beside another sequence's decode)."""
    prefill, decode, mixed, encode = PHASES
    if entry == TokenEntry.ENCODE:
        return encode
    if n_tokens <= 1 or sequences == n_tokens:
        return decode
    return prefill if sequences <= 1 else mixed


@dataclass(frozen=True)
class SeqRun:
    """The tokens of one sequence in a token step's batch."""

    seq: int
    pos: int | None
    """Its first token's position (None: not known)."""
    n_tokens: int


@dataclass(frozen=True)
class StepBatch:
    """What a token step's batch held."""

    n_tokens: int
    phase: str
    sequences: int
    """Sequences in the batch (runs of one sequence id in its first BATCH_SCAN tokens)."""
    pos: int | None
    """Its first token's position: from the batch, else (a batch that leaves positions to the
    KV cache) the tokens decoded before it where the capture saw the process from its start;
    None where it is not known (--pid)."""
    runs: tuple[SeqRun, ...]
    """Its sequences, in batch order (the first BATCH_RUNS; a batch that names none is
    sequence 0's)."""


def _step_runs(batches: np.ndarray, tokens: Spans) -> dict[int, tuple[SeqRun, ...]]:
    """Token step index -> the runs its BATCH record names (joined on the step's thread and
    begin time): run r ends where the next one starts (the last one named, at the next one's
    start or the end of the scan). The records' fields are read as columns, once: a record's
    own cost 12 µs (2026-12-08, a server's 26 k steps)."""
    step_at = {(t, b): i for i, (t, b) in
               enumerate(zip(tokens.tid.tolist(), tokens.begin.tolist(), strict=True))}
    n_runs = batches["n_runs"].astype(np.int64)
    named = np.minimum(n_runs, BATCH_RUNS)
    start = batches["start"].astype(np.int64)
    end = start[:, 1:BATCH_RUNS + 1].copy()
    rows = np.flatnonzero(named > 0)
    end[rows, named[rows] - 1] = np.where(n_runs > named, start[np.arange(len(start)), named],
                                          batches["scanned"])[rows]
    found = {}
    for tid, ts, count, seq, pos, n_tokens, known in zip(
            batches["tid"].tolist(), batches["ts"].tolist(), named.tolist(),
            batches["seq"][:, :BATCH_RUNS].tolist(), batches["pos"][:, :BATCH_RUNS].tolist(),
            (end - start[:, :BATCH_RUNS]).tolist(), batches["pos_known"].tolist(), strict=True):
        step = step_at.get((tid, ts))
        if step is not None:
            found[step] = tuple(SeqRun(seq[r], pos[r] if known else None, n_tokens[r])
                                for r in range(count))
    return found


def step_batches(model: TraceModel) -> list[StepBatch]:
    tok = model.tokens
    n_tokens = tok.arg0.astype(np.int64)
    counted = (model.cont.tokens_before + np.cumsum(np.maximum(n_tokens, 0))
               - np.maximum(n_tokens, 0))
    first_pos = (tok.arg1 & 0xFFFFFFFF).astype(np.int64)
    sequences = np.maximum((tok.arg1 >> 32).astype(np.int64), 1)
    steps: list[StepBatch] = []
    for n, entry, seqs, given, count in zip(n_tokens.tolist(), tok.aux.tolist(),
                                            sequences.tolist(), first_pos.tolist(),
                                            counted.tolist(), strict=True):
        pos = given if given != UNKNOWN_POS else (count if model.run.from_start else None)
        runs = model.step_runs.get(len(steps))
        if runs is None:
            runs = (SeqRun(0, pos, n),)
        steps.append(StepBatch(n, token_phase(n, entry, seqs), seqs, pos, runs))
    return steps
