"""The `profinfer` SQL package and the trace summary spec on Perfetto's stock trace_processor.

The stock trace_processor_shell that PROFINFER_TP_BIN names runs them from its own command line
(`query --add-sql-package`, `summarize --metrics-v2`), not through profinfer-perfetto, on the
golden recording of tests/golden/query: each metric's rows are its golden CSV, and each summary
row is `profinfer-perfetto query`'s row for the same dimensions.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from perfetto.trace_processor.platform import PlatformDelegate
from perfetto.trace_processor.protos import ProtoFactory

from profinfer_perfetto.query.metrics import canned
from profinfer_perfetto.query.package import FOLDER, SUMMARY_SPEC
from tests.conftest import Cli

TP_BIN = os.environ.get("PROFINFER_TP_BIN", "")
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query"
TRACE = GOLDEN / "tiny-qwen3moe.pftrace"

pytestmark = pytest.mark.skipif(not TP_BIN, reason="PROFINFER_TP_BIN is not set: these tests "
                                "run a trace_processor_shell binary (export PROFINFER_TP_BIN=PATH)")


def _tp(*args: str | Path) -> bytes:
    done = subprocess.run([TP_BIN, *map(str, args)], capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def _cell(text: str) -> str | float:
    """A CSV cell as a value: trace_processor writes NULL as [NULL] and reals as %f."""
    if text in ("", "[NULL]"):
        return ""
    try:
        return float(text)
    except ValueError:
        return text


def _rows(text: str) -> list[list[str | float]]:
    return [[_cell(c) for c in row] for row in csv.reader(io.StringIO(text))]


@pytest.mark.parametrize("metric", sorted(canned()))
def test_stock_trace_processor_answers_each_metric_as_its_golden(metric: str,
                                                                 tmp_path: Path) -> None:
    query = tmp_path / "q.sql"
    query.write_text(f"INCLUDE PERFETTO MODULE profinfer.{metric};\n"
                     f"SELECT * FROM profinfer_{metric};\n")
    out = _tp("query", "--add-sql-package", FOLDER, "-f", query, TRACE).decode()
    assert _rows(out) == _rows((GOLDEN / f"{metric}.csv").read_text())


def _by_dimensions(rows: list[dict[str, Any]], dimensions: list[str],
                   values: list[str]) -> dict[tuple[Any, ...], list[float]]:
    return {tuple(r[d] for d in dimensions): [float(r[v]) for v in values] for r in rows}


def test_summary_spec_answers_like_query(cli: Cli) -> None:
    protos = ProtoFactory(PlatformDelegate())
    spec = protos.TraceSummarySpec()
    text_format.Parse(SUMMARY_SPEC.read_text(), spec)
    summary = protos.TraceSummary()
    summary.ParseFromString(_tp("summarize", "--metrics-v2", "all", "--format", "binary",
                                "--add-sql-package", FOLDER, TRACE, SUMMARY_SPEC))
    bundles = {b.bundle_id: b for b in summary.metric_bundles}
    assert set(bundles) == {t.id_prefix for t in spec.metric_template_spec}
    for template in spec.metric_template_spec:
        metric = template.query.table.table_name.removeprefix("profinfer_")
        result = cli("query", TRACE, metric, "--format", "json", "--engine", "builtin")
        assert result.returncode == 0, result.stderr
        dimensions = [d.name for d in template.dimensions_specs]
        values = [v.name for v in template.value_column_specs]
        expected = _by_dimensions(json.loads(result.stdout)["metrics"][metric], dimensions, values)
        got = {tuple(d.string_value for d in row.dimension): [v.double_value for v in row.values]
               for row in bundles[template.id_prefix].row}
        assert got == expected, metric
        assert len(got) > 1
