"""The graph diff of `check` (check/graph.py): synthetic runs whose graphs differ by one known
change are told apart from the baseline exactly, and each change is named; the same graph, timed
differently, is the same."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np

from profinfer_perfetto.capture.events import Backend, Kind
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.check import report
from profinfer_perfetto.check.graph import (
    CHANGED,
    NOT_COMPARED,
    SAME,
    GraphChange,
    GraphDiff,
)
from profinfer_perfetto.check.runs import read_sides
from profinfer_perfetto.check.verdict import CheckResult
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.errors import ExitCode
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import EngineChoice
from tests import synthetic
from tests.conftest import Cli
from tests.synthetic import ATTN_NORM, EVENT, MAIN, NORM, WORKER, event

B = ("--engine", "builtin")
Q4_0 = synthetic.GGML.types.index("q4_0")


def _graph_diff(base: list[Path], new: list[Path], engine: EngineChoice) -> GraphDiff:
    """What `check` finds of the graphs (check/runs.py reads both sides once)."""
    return read_sides(base, new, engine).graph


def _write(tmp_path: Path, name: str, rec: Recording) -> Path:
    path = tmp_path / f"{name}.pftrace"
    with path.open("wb") as out:
        write_perfetto(build_layout(build(rec)), out)
    return path


def _requantized(seed: int, tensor: bytes = b"ffn_up-3") -> Recording:
    """A decode run whose matmul `tensor` has q4_0 weights (its first source)."""
    rec = synthetic.decode_run(seed)
    rec.nodes["src"]["type"][rec.nodes["name"] == tensor, 0] = Q4_0
    return rec


def _unfused() -> Recording:
    """The synthetic recording with its fused RMS_NORM+MUL pair computed as two nodes."""
    rec = synthetic.recording()
    kept = [tuple(e) for e in rec.events.tolist() if not 8_500 <= e[0] <= 9_900]
    split = [
        event(8_500, Kind.OP_BEGIN, MAIN, arg0=NORM, ith=0, aux=2, counter=12),
        event(8_600, Kind.OP_BEGIN, WORKER, arg0=NORM, ith=1, aux=2, cpu=1, counter=51),
        event(9_000, Kind.BARRIER, MAIN, counter=12),
        event(9_050, Kind.BARRIER, WORKER, cpu=1, counter=51),
        event(9_100, Kind.OP_BEGIN, MAIN, arg0=ATTN_NORM, ith=0, aux=2, counter=12),
        event(9_150, Kind.OP_BEGIN, WORKER, arg0=ATTN_NORM, ith=1, aux=2, cpu=1, counter=51),
        event(9_500, Kind.BARRIER, MAIN, counter=12),
        event(9_900, Kind.BARRIER, WORKER, cpu=1, counter=51),
    ]
    rec.events = np.array(sorted(kept + split, key=lambda e: (e[4], e[0])), EVENT)
    return rec


def test_runs_of_the_same_graph_timed_differently_are_the_same(tmp_path: Path) -> None:
    base = [_write(tmp_path, f"base{i}", synthetic.decode_run(i)) for i in (1, 2)]
    slower = _write(tmp_path, "slower", synthetic.decode_run(3, slow="MUL_MAT/Qcur", speed=1.3))
    diff = _graph_diff(base, [slower], EngineChoice("builtin"))
    assert diff.verdict == SAME and not diff.changes and diff.facts > 0


def test_a_weight_type_changed_is_named_and_exits_4(cli: Cli, tmp_path: Path) -> None:
    for i in (1, 2):
        _write(tmp_path, f"base{i}", synthetic.decode_run(i))
    new = _write(tmp_path, "new", _requantized(3))
    junit = tmp_path / "report.xml"
    result = cli("check", new, "--baseline", f"{tmp_path}/base*.pftrace", "--junit", junit,
                 "--github", *B)
    assert result.returncode == ExitCode.GRAPH_CHANGED, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    start = lines.index(f"the graph changed: {new} differs from the baseline in 3 of its facts")
    # The weights' new type, and the bytes it moves per token of each phase; nothing else.
    assert lines[start + 1] == "  ffn_up-3 MUL_MAT: weights f32 64 -> q4_0 64"
    assert [line.split(":")[0] for line in lines[start + 2:start + 4]] == [
        "  bytes per decode token", "  bytes per prefill token"]
    assert "no regression in" in result.stdout
    assert "::error title=profinfer-perfetto%3A the graph changed::" in result.stdout
    (case,) = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "graph"]
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == CHANGED
    assert (failure.text or "").startswith("ffn_up-3 MUL_MAT: weights f32 64 -> q4_0 64\n")


def test_the_graph_change_in_json(cli: Cli, tmp_path: Path) -> None:
    base = _write(tmp_path, "base", synthetic.decode_run(1))
    new = _write(tmp_path, "new", _requantized(2, b"Qcur-0"))
    result = cli("check", new, "--baseline", base, "--format", "json", *B)
    assert result.returncode == ExitCode.GRAPH_CHANGED, result.stderr
    graph = json.loads(result.stdout)["graph"]
    assert graph["verdict"] == CHANGED and graph["run"] == str(new)
    assert graph["changes"][0] == {"fact": ["weights", "Qcur-0", "MUL_MAT"], "base": "f32 64",
                                   "new": "q4_0 64",
                                   "sentence": "Qcur-0 MUL_MAT: weights f32 64 -> q4_0 64"}


def test_a_regression_is_1_even_where_the_graph_changed(cli: Cli, tmp_path: Path) -> None:
    base = _write(tmp_path, "base", synthetic.decode_run(1))
    rec = synthetic.decode_run(2, slow="MUL_MAT/Qcur", factor=1.3)
    rec.nodes["src"]["type"][rec.nodes["name"] == b"ffn_up-3", 0] = Q4_0
    result = cli("check", _write(tmp_path, "new", rec), "--baseline", base, *B)
    assert result.returncode == ExitCode.REGRESSION, result.stdout + result.stderr
    assert "  ffn_up-3 MUL_MAT: weights f32 64 -> q4_0 64" in result.stdout.splitlines()


def test_a_fusion_removed_is_named(tmp_path: Path) -> None:
    fused = _write(tmp_path, "fused", synthetic.recording())
    diff = _graph_diff([fused], [_write(tmp_path, "unfused", _unfused())],
                      EngineChoice("builtin"))
    assert diff.verdict == CHANGED
    assert [c.sentence() for c in diff.changes] == [
        "attn_norm-0 MUL: new",
        "attn_norm-0: fusion RMS_NORM+MUL gone",
        "norm-0 RMS_NORM: new",
        "MUL attn_norm nodes per decode step: 0 -> 1",
        "RMS_NORM norm nodes per decode step: 0 -> 1",
        "RMS_NORM+MUL attn_norm nodes per decode step: 1 -> 0",
    ]


def test_an_op_moved_to_another_backend_is_named(tmp_path: Path) -> None:
    rec = synthetic.decode_run(2, layers=1)
    first_graph = np.flatnonzero(rec.events["kind"] == Kind.GRAPH_BEGIN)[0]
    rec.events["aux"][first_graph] = Backend.BLAS  # the prefill step's graph
    base = _write(tmp_path, "base", synthetic.decode_run(1, layers=1))
    diff = _graph_diff([base], [_write(tmp_path, "blas", rec)], EngineChoice("builtin"))
    sentences = [c.sentence() for c in diff.changes]
    assert "ffn_up-0 MUL_MAT in prefill steps: op moved CPU -> BLAS" in sentences
    assert "nodes per CPU graph of a prefill step: 64 -> none" in sentences
    assert not any("decode" in s for s in sentences)


def test_baseline_runs_that_differ_among_themselves_are_not_guessed_from(
        cli: Cli, tmp_path: Path) -> None:
    base = [_write(tmp_path, "base0", synthetic.decode_run(1)),
            _write(tmp_path, "base1", _requantized(2))]
    new = _write(tmp_path, "new", synthetic.decode_run(3))
    result = cli("check", new, "--baseline", f"{tmp_path}/base*.pftrace", *B)
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert (f"the graph was not compared: the baseline's runs differ among themselves "
            f"({base[0]} against {base[1]}: ffn_up-3 MUL_MAT: weights f32 64 -> q4_0 64, "
            "and 2 more), so which graph is the baseline's is not known") in result.stdout


def test_a_run_with_lost_events_is_not_compared(tmp_path: Path) -> None:
    lossy = synthetic.decode_run(2)
    lossy.run.lost_events = 7
    base = _write(tmp_path, "base", synthetic.decode_run(1))
    new = _write(tmp_path, "new", lossy)
    diff = _graph_diff([base], [new], EngineChoice("builtin"))
    assert diff.verdict == NOT_COMPARED
    assert diff.sentence() == (f"the graph was not compared: {new} has 7 events lost, so its "
                               "graph may miss nodes")


def test_a_saved_baseline_holds_no_graph(cli: Cli, tmp_path: Path) -> None:
    saved = tmp_path / "baseline.json"
    made = cli("query", _write(tmp_path, "base", synthetic.decode_run(1)),
               "--save-baseline", saved, *B)
    assert made.returncode == 0, made.stderr
    result = cli("check", _write(tmp_path, "new", _requantized(2)), "--baseline", saved, *B)
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    assert (f"the graph was not compared: {saved} is a saved baseline, which holds no graph: "
            "give the baseline's traces to compare graphs") in result.stdout


def test_the_table_lists_the_first_changes_and_counts_the_rest() -> None:
    many = tuple(GraphChange(("node", f"t-{i}", "ADD"), "decode", None) for i in range(25))
    out = StringIO()
    report.table(CheckResult([], graph=GraphDiff(CHANGED, many, "new.pftrace", 30)), out)
    lines = out.getvalue().splitlines()
    start = lines.index("the graph changed: new.pftrace differs from the baseline in 25 of its "
                        "facts")
    assert lines[start + 1:] == [*(f"  t-{i} ADD: gone" for i in range(report.LISTED_CHANGES)),
                                 "  and 5 more (--format json lists them all)"]
