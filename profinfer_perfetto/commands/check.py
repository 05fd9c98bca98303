"""`profinfer-perfetto check`: fail CI when a trace's metrics regress against a baseline."""

from __future__ import annotations

import sys
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.check import report
from profinfer_perfetto.check.rules import Rule, Settings, load_rules
from profinfer_perfetto.check.runs import read_sides
from profinfer_perfetto.check.trend import drift_warnings, trends, write_json
from profinfer_perfetto.check.verdict import compare
from profinfer_perfetto.commands.options import (
    EngineOption,
    FormatOption,
    GithubOption,
    JunitOption,
    RulesOption,
    TraceProcessorOption,
)
from profinfer_perfetto.commands.query import expand
from profinfer_perfetto.draw.plot import trend_svg
from profinfer_perfetto.encode.output import atomic_output
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.query.engines import AUTO, EngineChoice


@dataclass
class CheckCommand:
    """Compare a trace with a baseline: exit 0 pass, 1 regression, 2 bad input, 3 internal error,
    4 the graph changed (docs/graph-diff.md)."""

    trace: str
    baseline: str
    _: KW_ONLY
    rules: Path | None = None
    output_format: str = "table"
    junit: Path | None = None
    github: bool = False
    engine: EngineChoice = AUTO
    last: int = 0
    """Keep only the newest N baseline runs (by modification time); 0: all."""
    trend: Path | None = None
    trend_plot: Path | None = None
    paired: bool = False
    """The i-th baseline run and the i-th candidate run (by name) were recorded one right after
    the other: judge the candidate on the pairs (check/paired.py)."""

    @staticmethod
    def cli(
        trace: Annotated[
            str, typer.Argument(help="The candidate trace, or a quoted glob of runs.")
        ],
        baseline: Annotated[
            str, typer.Option(help="A baseline (query --save-baseline), or traces to compare "
                              "with: a quoted glob, or a folder of past runs.")
        ],
        rules: RulesOption = None,
        output_format: FormatOption = "table",
        junit: JunitOption = None,
        github: GithubOption = False,
        engine: EngineOption = "auto",
        trace_processor: TraceProcessorOption = None,
        last: Annotated[
            int, typer.Option(help="Keep only the newest N baseline runs (a folder or glob of "
                              "runs, by modification time); 0: all.")
        ] = 0,
        trend: Annotated[
            Path | None, typer.Option(help="Also write each key's median run by run (JSON).")
        ] = None,
        trend_plot: Annotated[
            Path | None, typer.Option(help="Also draw each key's trend (SVG).")
        ] = None,
        paired: Annotated[
            bool, typer.Option("--paired", help="The i-th baseline run and the i-th candidate "
                               "run (by name) were recorded one right after the other: judge "
                               "each key on the pairs' ratios (docs/ab.md).")
        ] = False,
    ) -> int:
        """The options, checked: the command to run."""
        return CheckCommand(trace, baseline, rules=rules, output_format=output_format,
                            junit=junit, github=github,
                            engine=EngineChoice(engine, trace_processor), last=last,
                            trend=trend, trend_plot=trend_plot, paired=paired).run()

    def run(self) -> int:
        rules, settings = self.options()
        baseline, traces = self._baseline_paths(), self._traces()
        sides = read_sides(baseline, traces, self.engine, self.paired)
        base, new = sides.base, sides.new
        if not set(base.samples) & set(new.samples):
            raise ProfinferError(
                f"{self.trace} and the baseline share no metric: they are not comparable")
        result = compare(base, new, rules, settings, self.paired)
        result.graph = graph = sides.graph
        found = trends(result, base)
        result.warnings += drift_warnings(found, result)
        if self.trend is not None:
            write_json(found, self.trend)
        if self.trend_plot is not None:
            with atomic_output(self.trend_plot) as out:
                out.write(trend_svg(found))
        (report.as_json if self.output_format == "json" else report.table)(result, sys.stdout)
        if self.junit is not None:
            report.junit(result, self.junit)
        if self.github:
            report.github(result, sys.stdout)
        return (ExitCode.REGRESSION if result.failed else
                ExitCode.GRAPH_CHANGED if graph.changed else ExitCode.OK)

    def options(self) -> tuple[tuple[Rule, ...], Settings]:
        """The rules and settings, once the options are known to be good (`ab` asks before it
        records)."""
        if self.output_format not in ("table", "json"):
            raise ProfinferError(f"unknown format {self.output_format!r} (known: table, json)")
        return load_rules(self.rules)

    def _traces(self) -> list[Path]:
        """The candidate's traces, each there."""
        traces = expand(self.trace)
        for trace in traces:
            if not trace.is_file():
                raise ProfinferError(f"no trace at {trace}")
        return traces

    def _baseline_paths(self) -> list[Path]:
        """The baseline: a file, a glob, or a folder of runs (its traces), the newest `last`."""
        folder = Path(self.baseline)
        paths = (sorted(folder.glob("*.pftrace")) if folder.is_dir()
                 else expand(self.baseline))
        if folder.is_dir() and not paths:
            raise ProfinferError(f"{folder} holds no .pftrace runs")
        if self.last < 0:
            raise ProfinferError(f"--last {self.last}: give how many runs to keep")
        if self.last:
            paths = sorted(paths, key=lambda p: (p.stat().st_mtime, p.name)
                           if p.exists() else (0.0, p.name))[-self.last:]
        return paths
