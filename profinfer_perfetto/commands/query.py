"""`profinfer-perfetto query`: canned ProfStat metrics and ad-hoc SQL on one or many traces."""

from __future__ import annotations

import glob
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.check.baseline import from_traces
from profinfer_perfetto.commands.options import TraceProcessorOption
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.query.engines import AUTO, EngineChoice, Result
from profinfer_perfetto.query.metrics import canned, metric
from profinfer_perfetto.query.package import FOLDER, SUMMARY_SPEC
from profinfer_perfetto.query.render import RENDERERS, Report
from profinfer_perfetto.query.session import TraceQuery, over_traces

SQL_TABLE = "sql"


def expand(pattern: str) -> list[Path]:
    """A trace path, or a glob of them (quoted so that the shell leaves it to us)."""
    if glob.has_magic(pattern):
        found = sorted(Path(p) for p in glob.glob(pattern))
        if not found:
            raise ProfinferError(f"no trace matches {pattern}")
        return found
    return [Path(pattern)]


def print_paths(sql_package: bool, summary_spec: bool) -> int:
    """`--print-sql-package`, `--print-summary-spec`: where the files are, for trace_processor's
    `--add-sql-package` and `summarize`."""
    for wanted, path in ((sql_package, FOLDER), (summary_spec, SUMMARY_SPEC)):
        if wanted:
            print(path)
    return ExitCode.OK


@dataclass
class QueryCommand:
    """Run canned ProfStat metrics (or --sql) on traces; with no metric, list them."""

    trace: str
    metrics: list[str] = field(default_factory=list)
    sql: str | None = None
    format: str = "table"
    engine: EngineChoice = AUTO

    @staticmethod
    def cli(
        trace: Annotated[
            str | None, typer.Argument(help="A trace, or a quoted glob of traces.")
        ] = None,
        metrics: Annotated[
            list[str] | None, typer.Argument(help="Canned metrics to run; none lists them.")
        ] = None,
        sql: Annotated[
            str | None, typer.Option("--sql", help="Ad-hoc SQL on the same tables.")
        ] = None,
        output_format: Annotated[
            str, typer.Option("--format", help="table, csv or json.")
        ] = "table",
        engine: Annotated[
            str, typer.Option(help="auto (trace_processor if it can be had), trace_processor, "
                              "builtin.")
        ] = "auto",
        trace_processor: TraceProcessorOption = None,
        save_baseline: Annotated[
            Path | None,
            typer.Option(help="Also save the traces' samples (each trace a run) as a baseline."),
        ] = None,
        print_sql_package: Annotated[bool, typer.Option(
            "--print-sql-package", help="Print the profinfer SQL package's folder.")] = False,
        print_summary_spec: Annotated[bool, typer.Option(
            "--print-summary-spec", help="Print the trace summary spec's path.")] = False,
    ) -> int:
        """The options, checked: the command to run (after saving the baseline asked for)."""
        if print_sql_package or print_summary_spec:
            return print_paths(print_sql_package, print_summary_spec)
        if trace is None:
            raise ProfinferError("query needs a trace (or --print-sql-package, "
                                 "--print-summary-spec)")
        choice = EngineChoice(engine, trace_processor)
        if save_baseline is not None:
            from_traces(expand(trace), choice).save(save_baseline)
            print(f"saved baseline {save_baseline}", file=sys.stderr)
            if not metrics and sql is None:
                return ExitCode.OK
        return QueryCommand(trace, list(metrics or []), sql, output_format, choice).run()

    def run(self) -> int:
        if self.format not in RENDERERS:
            raise ProfinferError(f"unknown format {self.format!r} (known: {', '.join(RENDERERS)})")
        if not self.metrics and self.sql is None:
            self._list()
            return ExitCode.OK
        for name in self.metrics:
            metric(name)
        report = self.report(expand(self.trace))
        RENDERERS[self.format].render(report, sys.stdout)
        if self.format != "json":
            for trace, how in report.engines.items():
                print(f"profinfer-perfetto: {trace}: answered by {how}", file=sys.stderr)
        for name in self.metrics:
            note = metric(name).when_empty
            if note is not None and not report.tables[name].rows:
                print(f"profinfer-perfetto: {name}: {note}", file=sys.stderr)
        return ExitCode.OK

    def report(self, traces: list[Path]) -> Report:
        names = [*self.metrics, *([SQL_TABLE] if self.sql is not None else [])]

        def answer(q: TraceQuery) -> tuple[str, list[Result]]:
            return q.how, [q.sql(self.sql or "") if name == SQL_TABLE else q.metric(name)
                           for name in names]

        report = Report()
        answers = over_traces(traces, answer, self.engine)
        for trace, (how, results) in zip(traces, answers, strict=True):
            report.engines[str(trace)] = how
            for name, result in zip(names, results, strict=True):
                if len(traces) > 1:
                    result = Result(["trace", *result.columns],
                                    [(str(trace), *row) for row in result.rows])
                if name in report.tables:
                    report.tables[name].rows.extend(result.rows)
                else:
                    report.tables[name] = result
        return report

    @staticmethod
    def _list() -> None:
        metrics = canned()
        width = max(map(len, metrics))
        print("canned metrics (profinfer-perfetto query TRACE NAME...):")
        for m in metrics.values():
            print(f"  {m.name.ljust(width)}  {m.summary}")
