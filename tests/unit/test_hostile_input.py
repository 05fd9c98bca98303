"""Hostile input: files made to hurt (a decompression bomb, malformed packets, baselines, rules
and peaks of the wrong shape, SQL and annotations with special characters) end in a result or
one sentence (exit 2), never a traceback; a Ctrl-C leaves no trace_processor behind; record says
where it looked for the roofs it did not find."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import time
import zlib
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.capture.watch import process_state
from profinfer_perfetto.check import report
from profinfer_perfetto.check.baseline import FORMAT, Baseline
from profinfer_perfetto.check.rules import DEFAULT_RULES, Rule, Settings
from profinfer_perfetto.check.verdict import CheckResult, Verdict, compare
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.machine import peaks
from profinfer_perfetto.query import engines
from profinfer_perfetto.query.engines import BuiltinEngine, TraceProcessorEngine, statements
from tests.conftest import SESSION_DIR, Cli
from tests.waiting import wait_until

B = ("--engine", "builtin")
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query" / "tiny-qwen3moe.pftrace"


def _zeros_deflated(blocks: int) -> bytes:
    """A zlib stream of `blocks` times 16 MiB of zeros, made at once: after a full flush,
    deflate's output for a block does not depend on what came before, so one is repeated."""
    zeros = bytes(16 << 20)
    deflate = zlib.compressobj(9)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush()  # the last block, then the checksum (of two blocks: replaced)
    check = 1
    for _ in range(blocks):
        check = zlib.adler32(zeros, check)
    return first + again * (blocks - 1) + end[:-4] + check.to_bytes(4, "big")


def _compressed(packets: bytes) -> bytes:
    trace = official.Trace()
    trace.packet.add().compressed_packets = packets
    data: bytes = trace.SerializeToString()
    return data


_PEAK_OF_CHILD = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""
"""Runs a command; prints its exit code and its peak memory (KiB)."""


def test_a_decompression_bomb_is_refused_before_it_fills_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pftrace"
    bomb.write_bytes(_compressed(_zeros_deflated(64)))  # 1 MiB: 1 GiB of zeros
    # The peak is taken by a small parent: a child's ru_maxrss counts what its parent held when
    # it forked (pytest's own, by now), and exec keeps that.
    result = subprocess.run([sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-m",
                             "profinfer_perfetto", "query", bomb, "op_summary", *B],
                            capture_output=True, text=True, check=False)
    (line,) = result.stderr.splitlines()
    code, peak_kib = map(int, result.stdout.split())
    assert code == 2, line
    assert re.fullmatch(f"profinfer-perfetto: {re.escape(str(bomb))} expands past 6[34] MiB of "
                        r"packets \(64 times its size, 4 GiB at most, are read\): it is no trace "
                        r"we wrote \(a decompression bomb\?\)", line), line
    assert peak_kib < 512 << 10  # the 1 GiB was never held


def test_a_decompression_bomb_is_refused_before_trace_processor_loads_it(
        cli: Cli, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pftrace"
    bomb.write_bytes(_compressed(_zeros_deflated(8)))  # 128 MiB of zeros
    result = cli("query", bomb, "op_summary", "--engine", "trace_processor",
                 "--trace-processor", "/bin/true")  # refused before it would start
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"profinfer-perfetto: {bomb} expands past "), line


def test_nested_compressed_chunks_are_refused_not_recursed_into(cli: Cli,
                                                                tmp_path: Path) -> None:
    nested = tmp_path / "nested.pftrace"
    data = b""
    for _ in range(1500):
        data = _compressed(zlib.compress(data))
    nested.write_bytes(data)
    result = cli("query", nested, "op_summary", *B)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"profinfer-perfetto: {nested} nests compressed chunks more than 4 levels deep: it is "
        "no trace we wrote"]


def _one_slice(name: str, annotation: str = "ok") -> official.Trace:
    """A track, and one slice on it named `name` (none: the bulk path reads it) with an
    annotation named `annotation`."""
    trace = official.Trace()
    track = trace.packet.add(trusted_packet_sequence_id=1).track_descriptor
    track.uuid, track.name = 7, "track"
    for ts, kind in ((1000, official.TrackEvent.TYPE_SLICE_BEGIN),
                     (2000, official.TrackEvent.TYPE_SLICE_END)):
        event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=ts).track_event
        event.type, event.track_uuid = kind, 7
        if name:
            event.name = name
        if kind == official.TrackEvent.TYPE_SLICE_BEGIN:
            event.debug_annotations.add(name=annotation, string_value=annotation)
    return trace


def _written(path: Path, trace: official.Trace, swaps: dict[bytes, bytes]) -> Path:
    """The trace written with byte strings swapped for others of the same length (what
    protobuf's API refuses to write: text that is not UTF-8, a message that does not parse)."""
    data = trace.SerializeToString()
    for old, new in swaps.items():
        assert len(old) == len(new) and old in data
        data = data.replace(old, new)
    path.write_bytes(data)
    return path


def test_text_that_is_not_utf8_reads_with_replacement_characters(tmp_path: Path) -> None:
    trace = _written(tmp_path / "t.pftrace", _one_slice("NAME", "ARG1"),
                     {b"NAME": b"N\xffME", b"ARG1": b"A\xfe1\xff"})
    engine = BuiltinEngine(trace, trace.read_bytes())
    rows = engine.query("select s.name, a.key, a.string_value from slice s "
                        "join args a using (arg_set_id)").rows
    assert rows == [("N\ufffdME", "debug.A\ufffd1\ufffd", "A\ufffd1\ufffd")]


def test_an_annotation_that_does_not_parse_is_one_sentence(cli: Cli, tmp_path: Path) -> None:
    trace = _written(tmp_path / "t.pftrace", _one_slice("", "BAD!"),
                     {b"R\x04BAD!": b"\xff" * 6})  # name (field 10), 4 bytes: an endless tag
    result = cli("query", trace, "--sql", "select count(*) from slice", *B)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"profinfer-perfetto: {trace} is not a Perfetto trace (it does not parse as one)"]


@pytest.mark.parametrize("iid", [5, 1 << 40, (1 << 64) - 1])
def test_an_interned_name_of_any_iid_imports(tmp_path: Path, iid: int) -> None:
    """Event names interned at iids no table can be as long as (bulk-path events)."""
    trace = official.Trace()
    trace.packet.add(trusted_packet_sequence_id=1).track_descriptor.uuid = 7
    names = trace.packet.add(trusted_packet_sequence_id=1).interned_data.event_names
    names.add(iid=iid, name="x")
    for ts, kind in ((1000, official.TrackEvent.TYPE_SLICE_BEGIN),
                     (2000, official.TrackEvent.TYPE_SLICE_END)):
        event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=ts).track_event
        event.type, event.track_uuid, event.name_iid = kind, 7, iid
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    assert BuiltinEngine(path, path.read_bytes()).query("select name from slice").rows == [
        ("x",)]


@pytest.mark.parametrize("parents", [{7: 7}, {7: 8, 8: 7}, {7 + i: 8 + i for i in range(5000)}])
def test_tracks_whose_parents_loop_or_run_deep_import(tmp_path: Path,
                                                      parents: dict[int, int]) -> None:
    trace = official.Trace()
    for uuid, parent in parents.items():
        d = trace.packet.add(trusted_packet_sequence_id=1).track_descriptor
        d.uuid, d.parent_uuid = uuid, parent
    event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=5).track_event
    event.type, event.track_uuid, event.name = official.TrackEvent.TYPE_INSTANT, 7, "n"
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    engine = BuiltinEngine(path, path.read_bytes())
    assert engine.query("select name from slice").rows == [("n",)]
    assert engine.query("select count(*) from track").rows == [(len(parents),)]


def test_flow_ids_keep_all_64_bits(tmp_path: Path) -> None:
    """Events read one by one: flow ids 0 and 2**64 - 1 beside each other once became floats,
    and 2**64 - 1 the same flow as 2**64 - 2."""
    trace = official.Trace()
    trace.packet.add(trusted_packet_sequence_id=1).track_descriptor.uuid = 7
    for ts, flows in ((5, [0, (1 << 64) - 1]), (6, [(1 << 64) - 2])):
        event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=ts).track_event
        event.type, event.track_uuid, event.name = official.TrackEvent.TYPE_INSTANT, 7, "n"
        event.flow_ids.extend(flows)
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    engine = BuiltinEngine(path, path.read_bytes())
    assert engine.query("select count(*) from slice").rows == [(2,)]
    assert engine.query("select count(*) from flow").rows == [(0,)]


def test_slices_of_a_trace_that_names_none_import(tmp_path: Path) -> None:
    trace = official.Trace()
    trace.packet.add(trusted_packet_sequence_id=1).track_descriptor.uuid = 7
    event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=5).track_event
    event.type, event.track_uuid = official.TrackEvent.TYPE_INSTANT, 7
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    engine = BuiltinEngine(path, path.read_bytes())
    assert engine.query("select ts, name from slice").rows == [(5, None)]


def test_times_past_64_bits_wrap_as_on_the_bulk_path(tmp_path: Path) -> None:
    """An incremental clock whose sums pass 2**64 (events read one by one)."""
    top = (1 << 64) - 1
    trace = official.Trace()
    trace.packet.add(trusted_packet_sequence_id=1).track_descriptor.uuid = 7
    clocks = trace.packet.add(trusted_packet_sequence_id=1).clock_snapshot.clocks
    clocks.add(clock_id=6, timestamp=top)  # BOOTTIME
    clocks.add(clock_id=64, timestamp=0, is_incremental=True)
    event = trace.packet.add(trusted_packet_sequence_id=1, timestamp=top,
                             timestamp_clock_id=64).track_event
    event.type, event.track_uuid, event.name = official.TrackEvent.TYPE_INSTANT, 7, "n"
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    assert BuiltinEngine(path, path.read_bytes()).query("select ts from slice").rows == [(-2,)]


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("switch_prev_state", [0], "a compact sched bundle's columns differ in length"),
    ("switch_next_comm_index", [0, 5], "a compact sched event names a comm its bundle does "
                                       "not hold"),
])
def test_a_malformed_sched_bundle_is_one_sentence(cli: Cli, tmp_path: Path, field: str,
                                                  value: list[int], expected: str) -> None:
    trace = _one_slice("n")
    bundle = trace.packet.add(trusted_packet_sequence_id=2).ftrace_events
    bundle.cpu = 0
    sched = bundle.compact_sched
    sched.intern_table.append("task")
    columns = {"switch_timestamp": [1, 1], "switch_prev_state": [0, 0],
               "switch_next_pid": [5, 6], "switch_next_prio": [120, 120],
               "switch_next_comm_index": [0, 0], field: value}
    for name, values in columns.items():
        getattr(sched, name).extend(values)
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    result = cli("query", path, "--sql", "select count(*) from sched", *B)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"profinfer-perfetto: {path} is not a well-formed trace: {expected}"]


def _baseline(samples: dict[str, list[list[int]]]) -> Baseline:
    return Baseline({"model": "m"}, samples)


def test_a_check_that_can_judge_no_key_says_so(cli: Cli, tmp_path: Path) -> None:
    few = _baseline({"step/decode": [[100, 101, 102]]})
    with pytest.raises(ProfinferError, match=r"^no key could be judged: of the 1 keys the rules "
                                             r"watch, 0 are missing from the candidate and 1 "
                                             r"have fewer than 5 samples on a side"):
        compare(few, _baseline({"step/decode": [list(range(100, 200))]}), DEFAULT_RULES,
                Settings())
    baseline = tmp_path / "baseline.json"
    few.save(baseline)
    result = cli("check", GOLDEN, "--baseline", baseline, *B)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("profinfer-perfetto: no key could be judged: ")


def test_a_check_whose_rules_match_no_key_says_so() -> None:
    base = _baseline({"step/decode": [list(range(100, 200))]})
    with pytest.raises(ProfinferError, match="no rule matches a key of the baseline"):
        compare(base, base, (Rule("x", "op/*", 0.1),), Settings())


@pytest.mark.parametrize("doc", [
    {"made_from": {}, "samples": {"step/decode": [["1", "2", "3", "4", "5"]]}},
    {"made_from": {}, "samples": {"step/decode": []}},
    {"made_from": {}, "samples": {"step/decode": [[]]}},
    {"made_from": ["model"], "samples": {"step/decode": [[1, 2, 3, 4, 5]]}},
    {"made_from": {"model": 3}, "samples": {"step/decode": [[1, 2, 3, 4, 5]]}},
    {"made_from": {}, "samples": {"step/decode": [[1, 2, 3, 4, 10**400]]}},
    {"made_from": {}, "samples": {"step/decode": [[1, 2, 3, 4, True]]}},
    {"made_from": {}, "samples": [1], "shares": {}},
    {"made_from": {}, "samples": {}, "shares": {"op/x": "big"}},
    [1, 2],
])
def test_a_baseline_of_the_wrong_shape_is_one_sentence(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format": FORMAT, **doc} if isinstance(doc, dict) else doc))
    with pytest.raises(ProfinferError, match=f"^{path} is not a profinfer-perfetto baseline"):
        Baseline.saved([path])


@pytest.mark.parametrize(("toml", "expected"), [
    ('settings = 3\n', "not a table"),
    ('rule = 3\n', "rule is not an array of tables"),
    ('[[rule]]\nname = "x"\nkeys = "*"\nmax_change = "big"\n', "max_change = 'big' is not a"),
    ('[[rule]]\nname = "x"\nkeys = 1\nmax_change = 0.1\n', "keys = 1 is not a str"),
    ('[[rule]]\nname = "x"\nkeys = "*"\nmax_change = nan\n', "max_change = nan is not within"),
    ('[settings]\nresamples = 0\n', "resamples = 0 is not within"),
    ('[settings]\nconfidence = 1.0\n', "confidence = 1.0 is not within"),
    ('[settings]\nmin_samples = true\n', "min_samples = True is not a int"),
])
def test_rules_of_the_wrong_shape_are_one_sentence(tmp_path: Path, toml: str,
                                                    expected: str) -> None:
    from profinfer_perfetto.check.rules import load_rules

    path = tmp_path / "rules.toml"
    path.write_text(toml)
    with pytest.raises(ProfinferError, match=expected):
        load_rules(path)


@pytest.mark.parametrize("doc", [
    [1, 2],
    {"format": 1, "peaks": {"kind": "memory"}},
    {"format": 1, "peaks": [3]},
    {"format": 1, "peaks": [{"kind": "memory", "threads": 2.5, "value": 1}]},
    {"format": 1, "peaks": [{"kind": "memory", "threads": 2, "value": "fast"}]},
    {"format": 1, "peaks": [{"kind": "memory", "threads": 2, "value": 1, "how": 3}]},
])
def test_peaks_of_the_wrong_shape_are_one_sentence(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "peaks.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfinferError, match=f"^{path} holds no peaks of"):
        peaks.load(path)


def test_sql_is_split_at_statement_ends_only(cli: Cli) -> None:
    assert statements("select 'a;b'; select \"c;d\" -- e;f\n; /* g;h */ select 1") == [
        "select 'a;b'", "select \"c;d\" -- e;f", "/* g;h */ select 1"]
    result = cli("query", GOLDEN, "--sql", "select 'a;b' as x", "--format", "csv", *B)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["x", "a;b"]


def test_github_annotations_are_escaped() -> None:
    rule = Rule("r", "*", 0.05)
    verdict = Verdict(rule, "op/a:b,c", "too few samples", 1, 1)
    out = StringIO()
    report.github(CheckResult([verdict], ["100% off\r\nnext line"]), out)
    assert out.getvalue().splitlines() == [
        "::warning title=profinfer-perfetto%3A op/a%3Ab%2Cc::op/a:b,c: too few samples "
        "(baseline 1 samples, candidate 1)",
        "::warning title=profinfer-perfetto::100%25 off%0D%0Anext line"]


def _end(pid: int) -> None:
    """End the shell stand-in a failed test left running."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


_SHELL = """import http.server, os, sys
open(os.environ["PROFINFER_TEST_PID_FILE"], "w").write(str(os.getpid()))
class Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
port = int(sys.argv[sys.argv.index("--http-port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Status).serve_forever()
"""
"""A stand-in trace_processor_shell: it serves /status, and writes its pid down."""


@pytest.mark.parametrize("phase", ["start", "load"])
def test_a_ctrl_c_while_trace_processor_loads_ends_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      phase: str) -> None:
    shell, pid_file = tmp_path / "trace_processor_shell", tmp_path / "pid"
    shell.write_text(f"#!{sys.executable}\n{_SHELL}")
    shell.chmod(0o755)
    monkeypatch.setenv("PROFINFER_TEST_PID_FILE", str(pid_file))

    def interrupted(*args: object, **kwargs: object) -> None:
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.01)  # the shell starts: then the Ctrl-C
        raise KeyboardInterrupt

    if phase == "start":
        monkeypatch.setattr(engines._Shell, "_listening", interrupted)
    else:
        import perfetto.trace_processor

        monkeypatch.setattr(perfetto.trace_processor, "TraceProcessor", interrupted)
    with pytest.raises(KeyboardInterrupt):
        TraceProcessorEngine(GOLDEN, GOLDEN.read_bytes(), str(shell))
    pid = int(pid_file.read_text())
    try:
        assert not Path(f"/proc/{pid}").exists()
    finally:
        _end(pid)


_KILLED_WHILE_LOADING = """import sys, time
import perfetto.trace_processor
from pathlib import Path
from profinfer_perfetto.query.engines import TraceProcessorEngine
perfetto.trace_processor.TraceProcessor = lambda **kwargs: time.sleep(3600)
TraceProcessorEngine(Path(sys.argv[1]), b"", sys.argv[2])
"""
"""A query that loads a trace into trace_processor (the shell stand-in) until killed."""


def test_trace_processor_ends_when_the_query_is_killed(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    shell, pid_file = tmp_path / "trace_processor_shell", tmp_path / "pid"
    shell.write_text(f"#!{sys.executable}\n{_SHELL}")
    shell.chmod(0o755)
    monkeypatch.setenv("PROFINFER_TEST_PID_FILE", str(pid_file))
    query = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_LOADING, GOLDEN, shell])
    while not pid_file.exists() or not pid_file.read_text():
        assert query.poll() is None
        time.sleep(0.01)
    query.kill()  # SIGKILL: no cleanup of ours runs
    query.wait()
    pid = int(pid_file.read_text())
    try:  # the kernel sends SIGKILL as the query ends: gone, or a zombie nobody reaps
        wait_until(lambda: process_state(pid) in ("Z", None),
                   "trace_processor outlived the killed query")
    finally:
        _end(pid)


def test_the_suite_has_its_own_roofs_and_cache() -> None:
    assert Path(os.environ["PROFINFER_PEAKS"]).parent == SESSION_DIR
    assert Path(os.environ["XDG_CACHE_HOME"]).parent == SESSION_DIR
    assert not peaks.default_path().exists()


def test_record_says_where_it_looked_for_the_roofs() -> None:
    """No roofs found: a note of the run (in the trace and record's summary) says where."""
    assert peaks.for_record(None) == ((), (
        "no roofs in the trace: no `calibrate` peaks at "
        f"{os.environ['PROFINFER_PEAKS']} (give --peaks FILE or set $PROFINFER_PEAKS)"))


def test_under_sudo_the_invoking_users_roofs_are_found(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """sudo resets HOME and $PROFINFER_PEAKS: the peaks the user's calibrate stored in their
    cache are looked for there too."""
    monkeypatch.delenv("PROFINFER_PEAKS")
    monkeypatch.setenv("SUDO_USER", "someone")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwnam", lambda user: SimpleNamespace(pw_dir=tmp_path))
    theirs = tmp_path / ".cache" / "profinfer-perfetto" / "peaks.json"
    assert peaks.search_paths() == [peaks.default_path(), theirs]
    found, note = peaks.stored()
    assert not found.peaks and note is not None and f" or {theirs} " in note
    peaks.Peaks([peaks.Peak(peaks.PeakKind.MEMORY, 1, 10.0)]).save(theirs)
    found, note = peaks.stored()
    assert [p.value for p in found.peaks] == [10.0] and note is None
