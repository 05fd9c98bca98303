"""`profinfer-perfetto query`: golden metric outputs (Perfetto diff-test style), formats, bad input.

The golden input is a real recording (tiny-llama, 6 tokens, 2 threads) kept in tests/golden/query;
each canned metric's expected CSV sits beside it. The built-in engine always runs them; when
PROFINFER_TP_BIN names a trace_processor_shell, trace_processor must give the same CSV.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.metrics import canned
from tests import synthetic
from tests.conftest import Cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query"
TRACE = GOLDEN / "tiny-llama.pftrace"
UPDATE = os.environ.get("PROFINFER_UPDATE_GOLDEN") == "1"
ENGINES = ["builtin"] + (["trace_processor"] if os.environ.get("PROFINFER_TP_BIN") else [])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("metric", sorted(canned()))
def test_metric_golden(cli: Cli, metric: str, engine: str) -> None:
    result = cli("query", TRACE, metric, "--format", "csv", "--engine", engine)
    assert result.returncode == 0, result.stderr
    golden = GOLDEN / f"{metric}.csv"
    if UPDATE and engine == "builtin":
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()
    assert f"answered by {engine if engine == 'builtin' else 'trace_processor'}" in result.stderr
    assert len(list(csv.reader(io.StringIO(result.stdout)))) > 1


def test_every_metric_says_what_it_answers() -> None:
    for m in canned().values():
        assert m.summary.endswith("."), m.name
        assert any(line.strip().startswith("columns") for line in m.header), m.name


def test_list(cli: Cli) -> None:
    result = cli("query", TRACE)
    assert result.returncode == 0
    for name in canned():
        assert f"  {name}  " in result.stdout


def test_sql_and_json(cli: Cli) -> None:
    result = cli("query", TRACE, "op_summary", "--sql",
                 "select count(*) as ops from profinfer_op", "--format", "json",
                 "--engine", "builtin")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["metrics"]["sql"] == [{"ops": 876}]
    assert doc["metrics"]["op_summary"][0]["phase"] == "prefill"
    assert doc["engines"] == {str(TRACE): "builtin engine (asked for)"}


def test_many_traces_make_one_row_set(cli: Cli, tmp_path: Path) -> None:
    for name in ("a.pftrace", "b.pftrace"):
        shutil.copy(TRACE, tmp_path / name)
    result = cli("query", f"{tmp_path}/*.pftrace", "token_latency", "--format", "csv",
                 "--engine", "builtin")
    assert result.returncode == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0][0] == "trace" and len(rows) == 5
    assert {r[0] for r in rows[1:]} == {str(tmp_path / "a.pftrace"), str(tmp_path / "b.pftrace")}


def test_table_format(cli: Cli) -> None:
    result = cli("query", TRACE, "token_latency", "--engine", "builtin")
    lines = result.stdout.splitlines()
    assert lines[0] == "token_latency (2 rows)" and lines[1].split()[:2] == ["phase", "steps"]


B = ["--engine", "builtin"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([str(TRACE), "op_sumary", *B], "unknown metric 'op_sumary' (known: counters, graph_"),
        (["/nonexistent.pftrace", "op_summary", *B], "no trace at /nonexistent.pftrace"),
        (["/tmp/none-*.pftrace", "op_summary", *B], "no trace matches /tmp/none-*.pftrace"),
        ([str(TRACE), "--sql", "select * from nope", *B], "SQL error: no such table: nope"),
        ([str(TRACE), "op_summary", "--format", "xml", *B], "unknown format 'xml'"),
        ([str(TRACE), "op_summary", "--engine", "duckdb"], "unknown engine 'duckdb'"),
        ([str(TRACE), "op_summary", "--trace-processor", "/nope/tp"],
         "no trace_processor binary at /nope/tp"),
    ],
)
def test_bad_input(cli: Cli, args: list[str], expected: str) -> None:
    result = cli("query", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.parametrize("content", [b"\x00\xff" * 64 + b"garbage", b"just some text\n"])
def test_not_a_trace(cli: Cli, tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(content)
    result = cli("query", bad, "op_summary", "--engine", "builtin")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"profinfer-perfetto: {bad} is not a Perfetto trace (it does not parse as one)"
    ] or result.stderr.strip().splitlines() == [
        f"profinfer-perfetto: {bad} holds no track events: is it a profinfer-perfetto trace?"
    ]


def test_a_truncated_trace_is_refused(cli: Cli, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(TRACE.read_bytes()[: TRACE.stat().st_size // 2 + 1])
    result = cli("query", cut, "op_summary", "--engine", "builtin")
    assert result.returncode == 2
    assert "is not a Perfetto trace" in result.stderr


def test_a_corrupt_compressed_chunk_is_refused(cli: Cli, tmp_path: Path) -> None:
    trace = official.Trace()
    with (tmp_path / "good.pftrace").open("wb") as out:
        write_perfetto(build_layout(build(synthetic.recording())), out)
    trace.ParseFromString((tmp_path / "good.pftrace").read_bytes())
    (chunk,) = [p for p in trace.packet if p.HasField("compressed_packets")]
    chunk.compressed_packets = chunk.compressed_packets[:8] + b"\x00" * 64
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(trace.SerializeToString())
    result = cli("query", bad, "op_summary", "--engine", "builtin")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"profinfer-perfetto: {bad} is corrupt (a compressed chunk does not decompress)"]
