"""`profinfer-perfetto check`: fail CI when a trace's metrics regress against a baseline."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from profinfer_perfetto.check import report
from profinfer_perfetto.check.baseline import Baseline, from_traces
from profinfer_perfetto.check.rules import load_rules
from profinfer_perfetto.check.verdict import compare
from profinfer_perfetto.commands.query import expand
from profinfer_perfetto.errors import ExitCode, ProfinferError


@dataclass
class CheckCommand:
    trace: str
    baseline: str
    rules: Path | None = None
    output_format: str = "table"
    junit: Path | None = None
    github: bool = False
    engine: str = "auto"
    tp_bin: str | None = None

    def run(self) -> int:
        if self.output_format not in ("table", "json"):
            raise ProfinferError(f"unknown format {self.output_format!r} (known: table, json)")
        rules, settings = load_rules(self.rules)
        base = Baseline.load(expand(self.baseline), self.engine, self.tp_bin)
        traces = expand(self.trace)
        for trace in traces:
            if not trace.is_file():
                raise ProfinferError(f"no trace at {trace}")
        new = from_traces(traces, self.engine, self.tp_bin)
        if not set(base.samples) & set(new.samples):
            raise ProfinferError(
                f"{self.trace} and the baseline share no metric: they are not comparable")
        result = compare(base, new, rules, settings)
        (report.as_json if self.output_format == "json" else report.table)(result, sys.stdout)
        if self.junit is not None:
            report.junit(result, self.junit)
        if self.github:
            report.github(result, sys.stdout)
        return ExitCode.REGRESSION if result.failed else ExitCode.OK
