"""`profinfer-perfetto dag` and `plot`: pictures of a trace, written whole or not at all."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from profinfer_perfetto.draw.dag import Fill, pick_graph, read_dag, svg, to_dot
from profinfer_perfetto.draw.plot import figure, plot_svg
from profinfer_perfetto.encode.output import atomic_output
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.query.engines import AUTO, EngineChoice
from profinfer_perfetto.query.session import TraceQuery


def _write(output: Path, data: bytes, what: str) -> int:
    with atomic_output(output) as out:
        out.write(data)
    print(f"wrote {output} ({what})", file=sys.stderr)
    return ExitCode.OK


@dataclass
class DagCommand:
    trace: Path
    output: Path
    graph: int | None = None
    fill: str = Fill.TIME.value
    engine: EngineChoice = AUTO

    def run(self) -> int:
        if self.fill not in set(Fill):
            raise ProfinferError(f"unknown --fill {self.fill!r} (known: "
                                 f"{', '.join(f.value for f in Fill)})")
        if self.output.suffix not in (".svg", ".dot"):
            raise ProfinferError(f"{self.output}: give an output ending in .svg (graphviz lays "
                                 "it out) or .dot (the graph in graphviz's language)")
        with TraceQuery(self.trace, self.engine) as q:
            dag = read_dag(q, pick_graph(q, self.graph))
        text = to_dot(dag, Fill(self.fill))
        data = text.encode() if self.output.suffix == ".dot" else svg(text)
        return _write(self.output, data, f"graph {dag.graph}: {len(dag.nodes)} nodes, "
                                         f"{len(dag.edges)} edges")


@dataclass
class PlotCommand:
    trace: Path
    figure: str
    output: Path
    engine: EngineChoice = AUTO

    def run(self) -> int:
        if self.output.suffix != ".svg":
            raise ProfinferError(f"{self.output}: give an output ending in .svg")
        figure(self.figure)
        with TraceQuery(self.trace, self.engine) as q:
            data = plot_svg(q, self.figure)
        return _write(self.output, data, self.figure)
