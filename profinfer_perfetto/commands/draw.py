"""`profinfer-perfetto dag` and `plot`: pictures of a trace, written whole or not at all."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.commands.options import EngineOption, TraceProcessorOption
from profinfer_perfetto.draw.dag import Fill, pick_graph, read_dag, svg, to_dot
from profinfer_perfetto.draw.plot import FIGURES, figure, plot_svg
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
    """Draw one graph of a run as its DAG (graphviz): nodes by layer, filled by their time."""

    trace: Path
    output: Path
    graph: int | None = None
    fill: str = Fill.TIME.value
    engine: EngineChoice = AUTO

    @staticmethod
    def cli(
        trace: Annotated[Path, typer.Argument(help="The trace.")],
        output: Annotated[Path, typer.Option("-o", "--output", help="NAME.svg, or NAME.dot.")],
        graph: Annotated[
            int | None, typer.Option(help="The graph to draw, a split where a GPU backend cut "
                                     "the step (default: the first decode step's largest).")
        ] = None,
        fill: Annotated[
            str, typer.Option(help="What a node's colour says: "
                              + ", ".join(f"{f.value}" for f in Fill) + ".")
        ] = Fill.TIME.value,
        engine: EngineOption = "auto",
        trace_processor: TraceProcessorOption = None,
    ) -> int:
        """The options, checked: the command to run."""
        return DagCommand(trace, output, graph, fill, EngineChoice(engine, trace_processor)).run()

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
        fed = f", {len(dag.inputs)} edges in from other splits" if dag.inputs else ""
        return _write(self.output, data, f"graph {dag.graph} ({dag.backend}): "
                                         f"{len(dag.nodes)} nodes, {len(dag.edges)} edges{fed}")


@dataclass
class PlotCommand:
    """Draw a ProfStat figure of a trace (a metric's points) as SVG."""

    trace: Path
    figure: str
    output: Path
    engine: EngineChoice = AUTO

    @staticmethod
    def cli(
        trace: Annotated[Path, typer.Argument(help="The trace.")],
        figure: Annotated[str, typer.Argument(help="The figure: " + ", ".join(FIGURES) + ".")],
        output: Annotated[Path, typer.Option("-o", "--output", help="NAME.svg.")],
        engine: EngineOption = "auto",
        trace_processor: TraceProcessorOption = None,
    ) -> int:
        """The options, checked: the command to run."""
        return PlotCommand(trace, figure, output, EngineChoice(engine, trace_processor)).run()

    def run(self) -> int:
        if self.output.suffix != ".svg":
            raise ProfinferError(f"{self.output}: give an output ending in .svg")
        figure(self.figure)
        with TraceQuery(self.trace, self.engine) as q:
            data = plot_svg(q, self.figure)
        return _write(self.output, data, self.figure)
