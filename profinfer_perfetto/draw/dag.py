"""One graph of a run drawn as its DAG (ProfDAG): a node per graph node that ran, an edge per
DAG edge the trace's flows carry, the nodes of a layer in a box of their own, each node filled
by its time (or its bandwidth) from white to red, on a log scale from the graph's least to its
most. Where a GPU backend's scheduler cut a token step into splits, each split is a graph of
its own backend: the nodes of other splits that fed it are drawn too, in a box per split named
by its backend.

The graph is read from the same prelude tables the metrics read (profinfer_node, the trace's
`flow` table between op slices), so it answers alike on both engines; graphviz's `dot` lays it
out as SVG.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass, field
from enum import StrEnum

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.session import TraceQuery


class Fill(StrEnum):
    """What a node's colour says."""

    TIME = "time"
    """Its share of the graph's node time (first thread's start to last thread's end)."""
    BANDWIDTH = "bandwidth"
    """The bytes its shapes imply over its time (GB/s)."""


@dataclass(frozen=True)
class DagNode:
    node: int
    op: str
    role: str
    tensor: str
    layer: int
    dur: int
    flops: int
    bytes: int

    def value(self, fill: Fill) -> float:
        if fill == Fill.TIME:
            return float(self.dur)
        return self.bytes / self.dur if self.dur > 0 else 0.0


@dataclass(frozen=True)
class DagInput:
    """A node of another split of the step whose tensor a node of the graph read."""

    graph: int
    backend: str
    node: int
    op: str
    tensor: str
    into: int
    """The graph's node that read it."""


@dataclass(frozen=True)
class Dag:
    graph: int
    step: int | None
    phase: str | None
    nodes: list[DagNode]
    edges: list[tuple[int, int]]
    """(from node, to node): the node that made a tensor to one that read it."""
    backend: str = "CPU"
    inputs: list[DagInput] = field(default_factory=list)

    @property
    def total_ns(self) -> int:
        return sum(n.dur for n in self.nodes)


_GRAPHS = "SELECT graph, phase, step, COALESCE(n_nodes, 0) FROM profinfer_graph ORDER BY graph"
_NODES = """SELECT node, op, role, tensor, layer, dur, flops, bytes FROM profinfer_node
WHERE graph = {graph} ORDER BY node"""
_EDGES = """WITH ops AS (SELECT slice_id, node FROM profinfer_op_times WHERE graph = {graph})
SELECT DISTINCT a.node, b.node FROM flow f
JOIN ops a ON a.slice_id = f.slice_out JOIN ops b ON b.slice_id = f.slice_in
ORDER BY a.node, b.node"""
_INPUTS = """WITH ins AS (SELECT slice_id, node FROM profinfer_op_times WHERE graph = {graph})
SELECT DISTINCT a.graph, g.backend, a.node, n.op, n.tensor, b.node FROM flow f
JOIN ins b ON b.slice_id = f.slice_in JOIN profinfer_op_times a ON a.slice_id = f.slice_out
JOIN profinfer_graph g ON g.graph = a.graph
JOIN profinfer_node n ON n.graph = a.graph AND n.node = a.node
WHERE a.graph != {graph} ORDER BY a.graph, a.node, b.node"""
_STEP = "SELECT step, phase, backend FROM profinfer_graph WHERE graph = {graph}"


def pick_graph(q: TraceQuery, graph: int | None) -> int:
    """`graph`, if the trace has it; by default the largest graph of its first decode step
    (the steady state; a step cut into splits has a graph per split, the device's the
    largest), else its first graph."""
    rows = q.sql(_GRAPHS).rows
    if not rows:
        raise ProfinferError(f"{q.trace} has no graphs to draw")
    graphs = [int(g) for g, *_ in rows]
    if graph is None:
        step = next((s for _, phase, s, _ in rows if phase == "decode"), None)
        steps = [(-int(n), int(g)) for g, phase, s, n in rows if phase == "decode" and s == step]
        return min(steps)[1] if steps else graphs[0]
    if graph not in set(graphs):
        raise ProfinferError(f"{q.trace} has no graph {graph} (its graphs are {graphs[0]} to "
                             f"{graphs[-1]})")
    return graph


def read_dag(q: TraceQuery, graph: int) -> Dag:
    """The graph's nodes and edges, as the trace has them."""
    nodes = [DagNode(int(n), str(op), str(role), str(tensor or ""),
                     -1 if layer is None else int(layer), int(dur), int(flops or 0),
                     int(nbytes or 0))
             for n, op, role, tensor, layer, dur, flops, nbytes
             in q.sql(_NODES.format(graph=graph)).rows]
    edges = [(int(a), int(b)) for a, b in q.sql(_EDGES.format(graph=graph)).rows]
    inputs = [DagInput(int(g), str(backend), int(n), str(op), str(tensor or ""), int(into))
              for g, backend, n, op, tensor, into in q.sql(_INPUTS.format(graph=graph)).rows]
    step, phase, backend = q.sql(_STEP.format(graph=graph)).rows[0]
    return Dag(graph, None if step is None else int(step), phase, nodes, edges,
               str(backend or "CPU"), inputs)


def fill_colour(level: float) -> str:
    """White (0) to red (1)."""
    fade = round(255 * (1 - min(max(level, 0.0), 1.0)))
    return f"#ff{fade:02x}{fade:02x}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(node: DagNode, dag: Dag, fill: Fill) -> str:
    share = node.dur / dag.total_ns if dag.total_ns else 0.0
    measure = (f"{node.dur / 1e3:.1f} us ({share:.1%})" if fill == Fill.TIME
               else f"{node.value(fill):.2f} GB/s")
    return "\\n".join(_quote(part)[1:-1] for part in (node.op, node.tensor, measure) if part)


def fill_levels(values: list[float]) -> list[float]:
    """Each value's place between the smallest positive value (0) and the largest (1) on a log
    scale: a graph's node times span decades (a large matmul against a 2 us add), which a
    linear scale would draw as one red node among white ones."""
    positive = [v for v in values if v > 0]
    if not positive:
        return [0.0] * len(values)
    lo, hi = min(positive), max(positive)
    if hi == lo:
        return [1.0 if v > 0 else 0.0 for v in values]
    return [math.log(v / lo) / math.log(hi / lo) if v > 0 else 0.0 for v in values]


def to_dot(dag: Dag, fill: Fill = Fill.TIME) -> str:
    """The graph in graphviz's DOT language: node `nN` for graph node N, filled by its place
    among the graph's values (fill_levels), its tooltip saying its role, work and time."""
    levels = dict(zip((n.node for n in dag.nodes), fill_levels([n.value(fill) for n in dag.nodes]),
                      strict=True))
    title = f"graph {dag.graph} ({dag.backend})" + (
        f", {dag.phase} step {dag.step}" if dag.step is not None else "")
    scale = f"nodes by {fill.value}, white to red on a log scale"
    lines = ["digraph dag {", f"  label={_quote(title + ', ' + scale)};",
             "  labelloc=t; rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
    by_layer: dict[int, list[DagNode]] = {}
    for n in dag.nodes:
        by_layer.setdefault(n.layer, []).append(n)
    for layer, nodes in sorted(by_layer.items()):
        indent = "  " if layer < 0 else "    "
        if layer >= 0:
            lines += [f"  subgraph cluster_layer_{layer} {{",
                      f"    label={_quote(f'layer {layer}')}; style=dashed; color=grey;"]
        for n in nodes:
            tip = (f"node {n.node}: {n.op} {n.role}, {n.flops} FLOPs, {n.bytes} bytes, "
                   f"{n.dur} ns")
            colour = fill_colour(levels[n.node])
            lines.append(f"{indent}n{n.node} [label=\"{_label(n, dag, fill)}\", "
                         f"fillcolor=\"{colour}\", tooltip={_quote(tip)}];")
        if layer >= 0:
            lines.append("  }")
    lines += [f"  n{a} -> n{b};" for a, b in dag.edges]
    lines += _input_lines(dag.inputs)
    lines.append("}")
    return "\n".join(lines) + "\n"


INPUT_FILL = "#dbe6f6"
"""The fill of a node of another split: grey-blue, beside the graph's white to red."""


def _input_lines(inputs: list[DagInput]) -> list[str]:
    """The nodes of other splits that fed the graph, `gGnN` for node N of graph G, in a box
    per split named by its backend, and their edges into the graph's nodes."""
    lines: list[str] = []
    for graph in sorted({i.graph for i in inputs}):
        split = [i for i in inputs if i.graph == graph]
        lines += [f"  subgraph cluster_split_{graph} {{",
                  f"    label={_quote(f'graph {graph} ({split[0].backend})')}; style=dashed; "
                  "color=steelblue;"]
        for i in {i.node: i for i in split}.values():
            label = "\\n".join(_quote(part)[1:-1] for part in (i.op, i.tensor) if part)
            lines.append(f'    g{graph}n{i.node} [label="{label}", fillcolor="{INPUT_FILL}", '
                         f"tooltip={_quote(f'{i.backend} graph {graph} node {i.node}')}];")
        lines.append("  }")
    return lines + [f"  g{i.graph}n{i.node} -> n{i.into};" for i in inputs]


def svg(dot_text: str) -> bytes:
    """The DOT text laid out by graphviz."""
    dot = shutil.which("dot")
    if dot is None:
        raise ProfinferError("graphviz's `dot` is not installed (apt-get install graphviz); "
                             "-o NAME.dot writes the graph without it")
    done = subprocess.run([dot, "-Tsvg"], input=dot_text.encode(), capture_output=True,
                          check=False)
    if done.returncode != 0:
        raise ProfinferError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout
