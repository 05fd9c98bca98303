"""`profinfer-perfetto query`: golden metric outputs (Perfetto diff-test style), formats, bad input.

The golden input is a real recording (tiny-qwen3moe, 6 tokens, 2 threads, counters context-switches
and task-clock) kept in tests/golden/query; each canned metric's expected CSV sits beside it,
written from trace_processor (PROFINFER_UPDATE_GOLDEN=1 with PROFINFER_TP_BIN set). Both engines
must give exactly that CSV; the built-in engine always runs, trace_processor wherever
PROFINFER_TP_BIN names one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.encode import perfetto
from profinfer_perfetto.encode.perfetto import Written, write_perfetto
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.model.layout import Layout, build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import AUTO, EngineChoice, open_engine
from profinfer_perfetto.query.metrics import canned
from profinfer_perfetto.query.session import TraceQuery
from tests import synthetic
from tests.conftest import Cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query"
TRACE = GOLDEN / "tiny-qwen3moe.pftrace"
UPDATE = os.environ.get("PROFINFER_UPDATE_GOLDEN") == "1"
HAS_TP = bool(os.environ.get("PROFINFER_TP_BIN"))
ENGINES = (["trace_processor"] if HAS_TP else []) + ["builtin"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("metric", sorted(canned()))
def test_metric_golden(cli: Cli, metric: str, engine: str) -> None:
    if UPDATE and not HAS_TP:
        pytest.fail("goldens are written from trace_processor: set PROFINFER_TP_BIN")
    result = cli("query", TRACE, metric, "--format", "csv", "--engine", engine)
    assert result.returncode == 0, result.stderr
    golden = GOLDEN / f"{metric}.csv"
    if UPDATE and engine == "trace_processor":
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()
    assert f"answered by {engine if engine == 'builtin' else 'trace_processor'}" in result.stderr
    assert len(list(csv.reader(io.StringIO(result.stdout)))) > 1


def _written_out(layout: Layout, written: Written) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every op slice's node description in full, without a number (as traces were written
    before descriptions were numbered)."""
    source, blob_start, blob_size = written.interned.table
    rows = np.flatnonzero(layout.desc >= 0)
    start, length = np.zeros(len(layout), np.int64), np.zeros(len(layout), np.int64)
    start[rows] = blob_start[layout.desc[rows]]
    length[rows] = blob_size[layout.desc[rows]]
    return source, start, length


@pytest.mark.parametrize("engine", ENGINES)
def test_numbered_descriptions_answer_as_written_out_ones(tmp_path: Path, engine: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A node description written once, then named by number, gives every metric the answer
    the same run gives with the description on each op slice it describes (the older traces,
    which the SQL still reads)."""
    layout = build_layout(build(synthetic.decode_run(3, steps=6)))
    paths = {"numbered": tmp_path / "numbered.pftrace", "written out": tmp_path / "out.pftrace"}
    with paths["numbered"].open("wb") as out:
        write_perfetto(layout, out)
    monkeypatch.setattr(perfetto, "_descriptions", _written_out)
    with paths["written out"].open("wb") as out:
        write_perfetto(layout, out)
    answers = {}
    for kind, path in paths.items():
        with TraceQuery(path, EngineChoice(engine)) as q:
            answers[kind] = {name: q.metric(name).rows for name in sorted(canned())}
    assert answers["numbered"] == answers["written out"]
    assert answers["numbered"]["op_summary"]


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
    assert doc["metrics"]["sql"] == [{"ops": 732}]
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
        ([str(TRACE), "op_sumary", *B], "unknown metric 'op_sumary' (known: backend_split, "),
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
    (line,) = result.stderr.strip().splitlines()
    assert re.fullmatch(f"profinfer-perfetto: {re.escape(str(cut))} is cut short: its last "
                        r"packet needs \d+ more bytes", line)


def test_a_corrupt_compressed_chunk_is_refused(cli: Cli, tmp_path: Path) -> None:
    trace = official.Trace()
    with (tmp_path / "good.pftrace").open("wb") as out:
        write_perfetto(build_layout(build(synthetic.recording())), out)
    trace.ParseFromString((tmp_path / "good.pftrace").read_bytes())
    chunk = [p for p in trace.packet if p.HasField("compressed_packets")][-1]  # the events
    chunk.compressed_packets = chunk.compressed_packets[:8] + b"\x00" * 64
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(trace.SerializeToString())
    result = cli("query", bad, "op_summary", "--engine", "builtin")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"profinfer-perfetto: {bad} is corrupt (a compressed chunk does not decompress)"]


def _flagged_trace(path: Path) -> Path:
    """A trace trace_processor loads but flags in `stats`: a packet that clears incremental
    state without naming its sequence (an error there), after one whole slice."""
    trace = official.Trace()
    packet = trace.packet.add(trusted_packet_sequence_id=7, first_packet_on_sequence=True)
    packet.track_descriptor.uuid, packet.track_descriptor.name = 5, "t"
    for ts, kind in ((1000, official.TrackEvent.TYPE_SLICE_BEGIN),
                     (2000, official.TrackEvent.TYPE_SLICE_END)):
        event = trace.packet.add(trusted_packet_sequence_id=7, timestamp=ts).track_event
        event.type, event.track_uuid, event.name = kind, 5, "s"
    trace.packet.add(sequence_flags=official.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED)
    path.write_bytes(trace.SerializeToString())
    return path


@pytest.mark.skipif(not HAS_TP, reason="needs PROFINFER_TP_BIN")
def test_what_trace_processor_flags_is_an_error_not_a_fallback(cli: Cli, tmp_path: Path) -> None:
    trace = _flagged_trace(tmp_path / "flagged.pftrace")
    for engine in ("auto", "trace_processor"):
        result = cli("query", trace, "token_latency", "--engine", engine)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"profinfer-perfetto: trace_processor read {trace} only in part: its stats say "
            "incremental_state_cleared_missing_sequence_id = 1 (error)"]


def test_no_binary_falls_back_to_builtin_only_when_asked_for_auto(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from perfetto.trace_processor.platform import PlatformDelegate

    def offline(self: PlatformDelegate, bin_path: str | None, fetch_latest: bool = False) -> str:
        raise OSError("no network")

    monkeypatch.delenv("PROFINFER_TP_BIN", raising=False)
    monkeypatch.setattr(PlatformDelegate, "get_shell_path", offline)
    engine, how = open_engine(TRACE, AUTO)
    engine.close()
    assert engine.name == "builtin"
    assert how == "builtin engine (no trace_processor binary: the perfetto API could not get " \
                  "one: no network)"
    with pytest.raises(ProfinferError) as raised:
        open_engine(TRACE, EngineChoice("trace_processor"))
    assert str(raised.value) == ("no trace_processor binary: the perfetto API could not get one: "
                                 "no network; give --trace-processor PATH or set PROFINFER_TP_BIN")


def test_a_json_trace_is_refused_with_a_reason(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "run.json"
    trace.write_text('{"traceEvents": []}')
    result = cli("query", trace, "op_summary", "--engine", "builtin")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"profinfer-perfetto: {trace} is a JSON trace: queries read the protobuf traces that "
        "`record` writes by default (JSON traces are for viewers)"]
