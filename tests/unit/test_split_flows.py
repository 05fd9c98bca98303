"""DAG edges and flows across a token step's splits: a CPU split's result read by the Vulkan
split through the scheduler's copy of it into the device, and the Vulkan split's result read
by the CPU's output split through its copy back, told from the weights the splits read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from profinfer_perfetto.capture.events import NODE, Backend, Kind
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import TraceModel, build
from tests import synthetic

e = synthetic.event
M = synthetic.MAIN
EMBD, SCALE, NORM, NORMED, OUT = (0x10_000 * i for i in range(1, 6))
"""The nodes: EMBD on the CPU; SCALE (reads EMBD's copy), NORM, NORMED (reads a weight of
NORM's shape) on Vulkan0; OUT on the CPU (reads NORMED's copy)."""
TO_DEVICE, FROM_DEVICE, NORM_WEIGHT, TABLE, TOKENS = (0x100_000 * i for i in range(1, 6))
"""The scheduler's copies, and what no node writes: a weight the shape of one token's row, the
embedding table, the input tokens."""
F32, NONE = 0, synthetic.OPS.index("NONE")


def _src(ptr: int, ne: tuple[int, ...], op: str = "NONE") -> tuple[object, ...]:
    return (ptr, 0, (*ne, *(1,) * (4 - len(ne))), F32, synthetic.OPS.index(op))


def _node(ts: int, ptr: int, op: str, name: str, ne: tuple[int, ...],
          srcs: list[tuple[object, ...]]) -> tuple[object, ...]:
    srcs = srcs + [(0, 0, (0, 0, 0, 0), 0, 0)] * (6 - len(srcs))
    return (ts, ptr, 0, (*ne, 1, 1), synthetic.PID, M, synthetic.OPS.index(op), 0, F32, 0, srcs,
            name.encode())


def _step(at: int, tokens: int) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """A token step of `tokens` tokens from `at`: its events and its nodes' descriptors (its
    splits CPU, Vulkan0, CPU; each copy just before the split that reads it)."""
    row = (64, tokens)
    events = [
        e(at, Kind.TOKEN_BEGIN, M, arg0=tokens),
        e(at + 100, Kind.GRAPH_BEGIN, M, arg0=0xA, arg1=(1 << 32) | 1, aux=Backend.CPU),
        e(at + 200, Kind.OP_BEGIN, M, arg0=EMBD, aux=1),
        e(at + 300, Kind.GRAPH_END, M, aux=Backend.CPU),
        e(at + 400, Kind.GRAPH_BEGIN, M, arg0=0xB, arg1=(1 << 32) | 3, aux=Backend.VULKAN),
        *(x for i, node in enumerate((SCALE, NORM, NORMED)) for x in (
            e(at + 500 + 200 * i, Kind.VK_NODE, M, arg0=node, aux=i),
            e(at + 600 + 200 * i, Kind.VK_NODE_END, M, arg0=1))),
        e(at + 1_200, Kind.GRAPH_END, M, aux=Backend.VULKAN),
        e(at + 1_300, Kind.GRAPH_BEGIN, M, arg0=0xC, arg1=(1 << 32) | 1, aux=Backend.CPU),
        e(at + 1_400, Kind.OP_BEGIN, M, arg0=OUT, aux=1),
        e(at + 1_500, Kind.GRAPH_END, M, aux=Backend.CPU),
        e(at + 1_600, Kind.TOKEN_END, M),
    ]
    nodes = [
        _node(at, EMBD, "MUL_MAT", "embd", row, [_src(TABLE, (64, 1000)), _src(TOKENS, (1,))]),
        _node(at, SCALE, "MUL", "inp_scaled", row, [_src(TO_DEVICE, row)]),
        _node(at, NORM, "RMS_NORM", "norm", row, [_src(SCALE, row, "MUL")]),
        _node(at, NORMED, "MUL", "result_norm", row,
              [_src(NORM, row, "RMS_NORM"), _src(NORM_WEIGHT, (64,))]),
        _node(at, OUT, "MUL_MAT", "result_output", (1000, tokens),
              [_src(TABLE, (64, 1000)), _src(FROM_DEVICE, row)]),
    ]
    return events, nodes


def split_run(*tokens: int) -> Recording:
    """Token steps of these many tokens, one after the other."""
    steps = [_step(10_000 * (i + 1), n) for i, n in enumerate(tokens)]
    rec = synthetic.recording()
    return replace(rec, events=np.array([x for s, _ in steps for x in s], synthetic.EVENT),
                   nodes=np.array([x for _, n in steps for x in n], NODE),
                   run=replace(rec.run, end_ns=10_000 * (len(tokens) + 1)))


def _edges(model: TraceModel) -> set[tuple[int, str, str]]:
    """(token step, producer, consumer) of each DAG edge, by tensor name."""
    step = model.tokens.containing(model.graphs.begin)
    return {(int(step[model.nodes.graph[a]]), model.nodes.names[a], model.nodes.names[b])
            for a, b in model.edges.tolist()}


IN_STEP = {("embd", "inp_scaled"), ("inp_scaled", "norm"), ("norm", "result_norm"),
           ("result_norm", "result_output")}
"""Each step's edges: into the Vulkan split from the CPU's, and out of it to the CPU's."""


def test_a_split_s_copied_input_is_an_edge_from_the_node_of_the_split_before() -> None:
    # A prompt of 2 tokens: each copy is the only source of its shape no node of its split
    # wrote (the weight of a token's row is smaller).
    assert _edges(build(split_run(2))) == {(0, a, b) for a, b in IN_STEP}


def test_a_copy_the_shape_of_a_weight_is_known_by_its_address_from_an_earlier_step() -> None:
    # A decode step alone: the copy of embd and the norm's weight have the same shape, and
    # either could be the copy; no edge is guessed (the output's copy is still alone).
    alone = IN_STEP - {("embd", "inp_scaled")}
    assert _edges(build(split_run(1))) == {(0, a, b) for a, b in alone}
    # After the prompt its address held a copy: a weight's never does.
    assert _edges(build(split_run(2, 1))) == {(s, a, b) for s in (0, 1) for a, b in IN_STEP}
    # The same when the steps come in chunks of a streamed run.
    first = split_run(2)
    second = split_run(2, 1)
    later = second.events["ts"] >= 20_000
    second = replace(second, events=second.events[later])
    model = build(second, build(first).then())
    assert ("embd", "inp_scaled") in {(a, b) for _, a, b in _edges(model)}


def test_flows_cross_the_splits_and_never_share_an_id_while_open() -> None:
    rec = split_run(2, 1, 1, 1)
    model = build(rec)
    layout = build_layout(model)
    names = {i: s for i, s in enumerate(layout.strings)}
    named = {(names[int(layout.name[a])], names[int(layout.name[b])])
             for a, b in layout.flows[:, 1:].tolist()}
    assert named == {("MUL_MAT embd", "MUL inp_scaled"),
                     ("MUL result_norm", "MUL_MAT result_output"),
                     ("MUL inp_scaled", "RMS_NORM norm"), ("RMS_NORM norm", "MUL result_norm")}
    assert len(layout.flows) == 4 * len(IN_STEP)
    # A flow begins at its producer's op slice in one graph and ends in another's.
    opened: dict[int, int] = {}
    for flow_id, out, into in sorted(layout.flows.tolist(), key=lambda f: layout.ts[f[1]]):
        assert opened.get(flow_id, -1) < layout.ts[out]
        opened[flow_id] = int(layout.ts[into])
