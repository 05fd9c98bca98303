"""The `profinfer` SQL package (query/profinfer/): its modules, the built-in engine's reading of
them, the trace summary spec, the generated docs/metrics.md and `query --print-*`.

(That stock trace_processor runs the package and the spec, and answers like `query`:
tests/integration/test_sql_package.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from perfetto.trace_processor.platform import PlatformDelegate
from perfetto.trace_processor.protos import ProtoFactory

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import package
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.metrics import canned
from profinfer_perfetto.query.package import FOLDER, SUMMARY_SPEC, Module, in_include_order
from profinfer_perfetto.query.session import TraceQuery
from scripts import metrics_doc
from tests.conftest import Cli

TRACE = Path(__file__).resolve().parents[1] / "golden" / "query" / "tiny-qwen3moe.pftrace"


def test_each_metric_is_a_module_defining_its_view() -> None:
    for name, metric in canned().items():
        module = package.modules()[f"profinfer.{name}"]
        assert module.defines == [f"profinfer_{name}"]
        assert metric.query == f"SELECT * FROM profinfer_{name}"
        assert all(included in package.modules() for included in module.includes), name


def test_each_table_has_one_module() -> None:
    tables = [t for m in package.modules().values() for t in m.defines]
    assert len(tables) == len(set(tables))


def test_the_builtin_engine_reads_a_module_as_plain_sqlite() -> None:
    module = Module("profinfer.x", "-- x: a view.\nINCLUDE PERFETTO MODULE profinfer.y;\n\n"
                    "CREATE PERFETTO VIEW profinfer_x AS\nSELECT 1 AS one;\n")
    assert module.sqlite() == "-- x: a view.\n\n\nCREATE VIEW profinfer_x AS\nSELECT 1 AS one;\n"


def _fake(monkeypatch: pytest.MonkeyPatch, includes: dict[str, list[str]]) -> None:
    fake = {name: Module(name, "".join(f"INCLUDE PERFETTO MODULE {i};\n" for i in inc))
            for name, inc in includes.items()}
    monkeypatch.setattr(package, "modules", lambda: fake)


def test_include_order_puts_includes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, {"p.a": ["p.c", "p.b"], "p.b": ["p.c"], "p.c": [], "p.d": ["p.b"]})
    assert [m.name for m in in_include_order(["p.d", "p.a"])] == ["p.c", "p.b", "p.d", "p.a"]


@pytest.mark.parametrize(("includes", "expected"), [
    ({"p.a": ["p.b"]}, "SQL package: p.a includes p.b, an unknown module"),
    ({"p.a": ["p.b"], "p.b": ["p.a"]}, "SQL package: p.b includes p.a, a cycle"),
])
def test_a_bad_include_is_one_sentence(monkeypatch: pytest.MonkeyPatch,
                                       includes: dict[str, list[str]], expected: str) -> None:
    _fake(monkeypatch, includes)
    with pytest.raises(ProfinferError) as err:
        in_include_order(["p.a"])
    assert str(err.value) == expected


def _built(q: TraceQuery) -> set[str]:
    rows = q.sql("SELECT name FROM sqlite_master WHERE name GLOB 'profinfer?*'").rows
    return {str(name) for (name,) in rows}


def test_a_query_builds_only_the_modules_it_reads() -> None:
    with TraceQuery(TRACE, EngineChoice("builtin")) as q:
        q.metric("token_latency")
        assert "profinfer_step" in _built(q)
        assert "profinfer_node_times" not in _built(q)
        q.sql("SELECT COUNT(*) FROM profinfer_node")
        assert {"profinfer_node_times", "profinfer_wait"} <= _built(q)
        assert "profinfer_node_by_dur" not in _built(q)


def _spec() -> Any:
    spec = ProtoFactory(PlatformDelegate()).TraceSummarySpec()
    text_format.Parse(SUMMARY_SPEC.read_text(), spec)
    return spec


def test_the_summary_spec_reads_the_package_views() -> None:
    templates = _spec().metric_template_spec
    assert templates
    with TraceQuery(TRACE, EngineChoice("builtin")) as q:
        for t in templates:
            name = t.query.table.table_name.removeprefix("profinfer_")
            assert t.query.table.module_name == f"profinfer.{name}"
            assert t.id_prefix == t.query.table.table_name
            columns = q.metric(name).columns
            wanted = [d.name for d in t.dimensions_specs] + [v.name for v in t.value_column_specs]
            assert set(wanted) <= set(columns), name
            assert all(v.polarity and (v.unit or v.custom_unit) for v in t.value_column_specs)


def test_metrics_doc_is_what_the_script_writes() -> None:
    assert metrics_doc.DOC.read_text() == metrics_doc.render(), \
        "docs/metrics.md is stale: run python -m scripts.metrics_doc"


def test_print_paths(cli: Cli) -> None:
    result = cli("query", "--print-sql-package")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == FOLDER
    assert (FOLDER / "op_summary.sql").is_file()
    result = cli("query", "--print-summary-spec")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == SUMMARY_SPEC


def test_a_query_without_a_trace_is_one_sentence(cli: Cli) -> None:
    result = cli("query")
    assert result.returncode == 2
    assert result.stderr.strip() == ("profinfer-perfetto: query needs a trace "
                                     "(or --print-sql-package, --print-summary-spec)")
