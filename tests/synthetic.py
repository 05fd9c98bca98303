"""A small hand-made recording: the events two threads would send for one decode step.

One token step > one graph of four computed nodes on two threads:
  0 MUL_MAT   ffn_up-0     (src0 a weight, src1 the graph input)
  1+2 fused RMS_NORM+MUL: norm-0 then attn_norm-0 (reads node 0 and a weight)
  3 ADD       l_out-0      (reads node 0 and a view of attn_norm-0)
Times are in ns; the thread with ith 0 describes the nodes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from profinfer_perfetto.analysis.ggml import GgmlInfo, RuntimeLayout, TensorLayout
from profinfer_perfetto.capture.events import (
    NODE,
    Backend,
    HostCall,
    Kind,
    TokenEntry,
    event_dtype,
)
from profinfer_perfetto.capture.run import Drained, Recording, Run
from profinfer_perfetto.machine.peaks import Peak, PeakKind

OPS = ("NONE", "DUP", "ADD", "MUL", "RMS_NORM", "MUL_MAT", "UNARY")
GGML = GgmlInfo(
    version="0.25.3",
    commit="synthetic",
    layout=TensorLayout(type=0, ne=16, nb=48, op=80, op_params=84, flags=148, src=152, n_src=10,
                        view_src=232, data=248, name=256, name_len=64, size=336),
    runtime=RuntimeLayout(cgraph_n_nodes=4, cplan_n_threads=16, batch_ext_tokens=64,
                          batch_ext_token_size=96),
    ops=OPS,
    unary_ops=("ABS", "SGN", "NEG"),
    glu_ops=("REGLU",),
    types=("f32", "f16", "q4_0"),
    type_sizes=((1, 4), (1, 2), (32, 18)),
)
PID, MAIN, WORKER = 100, 100, 101
WEIGHT, INPUT, UP, NORM, ATTN_NORM, VIEW, OUT = (0x1000 * i for i in range(1, 8))


EVENT = event_dtype(1)
"""The events of the synthetic runs, which read one counter (context-switches)."""


def event(ts: int, kind: Kind, tid: int, *, arg0: int = 0, arg1: int = 0, ith: int = 0,
           aux: int = 0, cpu: int = 0, counter: int = 0) -> tuple[object, ...]:
    return (ts, arg0, arg1, PID, tid, cpu, kind, ith, aux, (counter,))


def _node(ts: int, ptr: int, op: str, name: str, ne: tuple[int, ...], srcs: list[tuple[int, int]],
          view_src: int = 0) -> tuple[object, ...]:
    src = [(p, v, (64, 1, 1, 1), 0, 0) for p, v in srcs]
    src += [(0, 0, (0, 0, 0, 0), 0, 0)] * (6 - len(src))
    return (ts, ptr, view_src, ne, PID, MAIN, OPS.index(op), 0, 0, 0, src, name.encode())


PEAKS = (Peak(PeakKind.MEMORY, 2, 20.0, how="STREAM copy"),
         Peak(PeakKind.COMPUTE, 2, 100.0, "f32", "llama-bench pp512"))
"""The roofs the recording's machine was calibrated with."""


def recording(status: str = "complete") -> Recording:
    e = [
        event(1_000, Kind.TOKEN_BEGIN, MAIN, arg0=1, aux=TokenEntry.DECODE),
        event(2_000, Kind.GRAPH_BEGIN, MAIN, arg0=0xABC, arg1=(2 << 32) | 9),
        # node 0: both threads, the worker finishes first and waits
        event(3_000, Kind.OP_BEGIN, MAIN, arg0=UP, ith=0, aux=2, counter=10),
        event(3_100, Kind.OP_BEGIN, WORKER, arg0=UP, ith=1, aux=2, cpu=1, counter=50),
        event(5_000, Kind.BARRIER, WORKER, cpu=1, counter=51),
        event(8_000, Kind.BARRIER, MAIN, counter=12),
        # fused node 1+2
        event(8_500, Kind.OP_BEGIN, MAIN, arg0=NORM, arg1=ATTN_NORM, ith=0, aux=2, counter=12),
        event(8_600, Kind.OP_BEGIN, WORKER, arg0=NORM, arg1=ATTN_NORM, ith=1, aux=2, cpu=1,
               counter=51),
        event(9_500, Kind.BARRIER, MAIN, counter=12),
        event(9_900, Kind.BARRIER, WORKER, cpu=1, counter=51),
        # node 3: the main thread hits an inner barrier, then the loop barrier
        event(10_000, Kind.OP_BEGIN, MAIN, arg0=OUT, ith=0, aux=2, counter=12),
        event(10_100, Kind.OP_BEGIN, WORKER, arg0=OUT, ith=1, aux=2, cpu=1, counter=51),
        event(10_500, Kind.BARRIER, MAIN, counter=12),
        event(11_000, Kind.BARRIER, WORKER, cpu=1, counter=53),
        event(12_000, Kind.BARRIER, MAIN, counter=13),
        event(13_000, Kind.GRAPH_END, MAIN),
        event(14_000, Kind.TOKEN_END, MAIN),
    ]
    n = [
        _node(3_000, UP, "MUL_MAT", "ffn_up-0", (64, 1, 1, 1), [(WEIGHT, 0), (INPUT, 0)]),
        _node(8_500, NORM, "RMS_NORM", "norm-0", (64, 1, 1, 1), [(UP, 0)]),
        _node(8_500, ATTN_NORM, "MUL", "attn_norm-0", (64, 1, 1, 1), [(NORM, 0), (WEIGHT, 0)]),
        _node(10_000, OUT, "ADD", "l_out-0", (64, 1, 1, 1), [(UP, 0), (VIEW, ATTN_NORM)]),
    ]
    return Recording(
        events=np.array(e, EVENT),
        nodes=np.array(n, NODE),
        run=Run(
            ggml=GGML,
            pid=PID,
            process_name="llama-synthetic",
            cmdline=["llama-synthetic", "-t", "2"],
            threads={MAIN: "llama-synthetic", WORKER: "llama-synthetic"},
            counters=["context-switches"],
            lost_events=0,
            lost_nodes=0,
            begin_ns=500,
            end_ns=15_000,
            status=status,
            peaks=PEAKS,
        ),
    )


# A llama-like decode run with noise: for the regression gate's tests.
LAYER_OPS = (  # (op, tensor role, mean ns)
    ("RMS_NORM", "attn_norm", 4_000),
    ("MUL_MAT", "Qcur", 40_000),
    ("MUL_MAT", "ffn_up", 120_000),
    ("ADD", "l_out", 3_000),
)


def decode_run(seed: int, steps: int = 40, layers: int = 6, slow: str | None = None,
               factor: float = 1.10, noise: float = 0.08, speed: float = 1.0,
               gap: int = 5_000) -> Recording:
    """One prefill and `steps` decode steps on two threads, `gap` ns apart; `slow`
    ("MUL_MAT/Qcur") runs `factor` times longer; every op takes `speed` times its usual time
    (a slower machine)."""
    rng = np.random.default_rng(seed)
    events: list[tuple[object, ...]] = []
    nodes: list[tuple[object, ...]] = []
    ts = 1_000
    for step in range(steps + 1):
        n_tokens = 5 if step == 0 else 1
        events.append(event(ts, Kind.TOKEN_BEGIN, MAIN, arg0=n_tokens))
        ts += 1_000
        events.append(event(ts, Kind.GRAPH_BEGIN, MAIN, arg1=(2 << 32) | 64))
        for layer in range(layers):
            for i, (op, role_name, mean) in enumerate(LAYER_OPS):
                ptr = 0x10_000 + (layer * len(LAYER_OPS) + i) * 0x100
                scale = (factor if slow == f"{op}/{role_name}" else 1.0) * n_tokens ** 0.5 * speed
                work = [int(mean * scale * rng.lognormal(0, noise)) for _ in (MAIN, WORKER)]
                ts += 500
                for tid, ith, w in zip((MAIN, WORKER), (0, 1), work, strict=True):
                    events.append(event(ts + ith * 50, Kind.OP_BEGIN, tid, arg0=ptr, ith=ith,
                                        aux=2, cpu=ith))
                    events.append(event(ts + ith * 50 + w, Kind.BARRIER, tid, cpu=ith))
                nodes.append(_node(ts, ptr, op, f"{role_name}-{layer}", (64, n_tokens, 1, 1),
                                   [(WEIGHT, 0), (ptr - 0x100, 0)]))
                ts += max(work) + 100
        ts += 1_000
        events.append(event(ts, Kind.GRAPH_END, MAIN))
        ts += 1_000
        events.append(event(ts, Kind.TOKEN_END, MAIN))
        ts += gap
    events.sort(key=lambda e: (e[4], e[0]))  # by thread, then time
    rec = recording()
    rec.events = np.array(events, EVENT)
    rec.nodes = np.array(nodes, NODE)
    rec.run.end_ns = ts
    return rec


READ_AT = 7_950
"""When the host read the split's timestamps back: after its wait, before the split's end."""
VALUES = (100_000, 100_300, 101_000)
"""The split's timestamps: as it began, after the recording of node 0 (UP), after that of node
1 (NORM, with ATTN_NORM fused into it); node 3's recording enqueued nothing."""


def vulkan_step() -> Recording:
    """A decode step (1_000..9_000) whose Vulkan split (2_000..8_000) records node 0 (UP), node
    1 (NORM, with ATTN_NORM fused into it: node 2, sent by the next recording) and node 3 (OUT,
    a view: it records nothing), then the host waits for the device; the step's input is
    copied to the device first, and the recording of node 3 submits."""
    events = [
        event(1_000, Kind.TOKEN_BEGIN, MAIN, arg0=1),
        event(1_100, Kind.HOST_CALL_BEGIN, MAIN, arg0=256, aux=HostCall.TO_DEVICE),
        event(1_200, Kind.HOST_CALL_BEGIN, MAIN, aux=HostCall.SUBMIT),
        event(1_300, Kind.HOST_CALL_END, MAIN, aux=HostCall.SUBMIT),
        event(1_500, Kind.HOST_CALL_END, MAIN, aux=HostCall.TO_DEVICE),
        event(2_000, Kind.GRAPH_BEGIN, MAIN, arg0=0xABC, arg1=(1 << 32) | 4, aux=Backend.VULKAN),
        event(2_100, Kind.VK_NODE, MAIN, arg0=UP, aux=0),
        event(2_500, Kind.VK_NODE_END, MAIN, arg0=1),
        event(2_600, Kind.VK_NODE, MAIN, arg0=NORM, aux=1),
        event(3_000, Kind.VK_NODE_END, MAIN, arg0=1),
        event(3_100, Kind.VK_NODE, MAIN, arg0=OUT, arg1=ATTN_NORM, aux=3),
        event(3_200, Kind.HOST_CALL_BEGIN, MAIN, aux=HostCall.SUBMIT),
        event(3_300, Kind.HOST_CALL_END, MAIN, aux=HostCall.SUBMIT),
        event(3_400, Kind.VK_NODE_END, MAIN, arg0=0),
        event(3_500, Kind.HOST_CALL_BEGIN, MAIN, aux=HostCall.WAIT),
        event(7_900, Kind.HOST_CALL_END, MAIN, aux=HostCall.WAIT),
        event(8_000, Kind.GRAPH_END, MAIN, aux=Backend.VULKAN),
        event(9_000, Kind.TOKEN_END, MAIN),
    ]
    rec = recording()
    nodes = rec.nodes.copy()
    nodes["ts"] = 2_000
    return replace(rec, events=np.array(events, EVENT), nodes=np.array(nodes, NODE))


def timed_step(values: tuple[int, ...] = VALUES) -> Recording:
    """vulkan_step with the split's timestamps read back at READ_AT."""
    rec = vulkan_step()
    stamps = [event(READ_AT + i, Kind.VK_TIMESTAMP, MAIN, arg0=v,
                               arg1=len(values), aux=i) for i, v in enumerate(values)]
    events = np.concatenate([rec.events, np.array(stamps, EVENT)])
    return replace(rec, events=events[np.argsort(events["ts"], kind="stable")])


def drains(rec: Recording, count: int) -> list[Drained]:
    """The recording's records as `count` drains would have brought them, by time."""
    cuts = np.linspace(int(rec.events["ts"].min()), int(rec.events["ts"].max()) + 1, count + 1)

    def part(records: np.ndarray, i: int) -> np.ndarray:
        ts = records["ts"].astype(np.float64)
        picked: np.ndarray = records[(ts >= cuts[i]) & (ts < cuts[i + 1])]
        return picked

    return [Drained(part(rec.events, i), part(rec.nodes, i), part(rec.routes, i),
                    part(rec.batches, i), part(rec.sched, i)) for i in range(count)]


def described_at_graph_begin(rec: Recording) -> Recording:
    """The run with each node described at its graph's begin, as the probes do (a run with one
    trap per op derives its op begins there, before the node's op would have described it)."""
    begins = np.sort(rec.events["ts"][rec.events["kind"] == Kind.GRAPH_BEGIN])
    nodes = rec.nodes.copy()
    nodes["ts"] = begins[np.maximum(np.searchsorted(begins, nodes["ts"], "right") - 1, 0)]
    return replace(rec, nodes=nodes)
