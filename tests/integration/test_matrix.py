"""`record` on each llama.cpp of the version matrix (scripts/assets.py VERSIONS), from 2024-11
(llama-cpp-python 0.3.2) to 2026-10 (0.3.36): the op events are every entry of the op function
an independent bpftrace counts, the token steps are one prefill and a decode per further token,
and trace_processor (where PROFINFER_TP_BIN names one) loads the trace with no error.

`nox -s tests` records the versions setup.sh builds (0.3.36, 0.3.14); `nox -s matrix` all four
(`pytest --matrix`), skipping the ones not built."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.target import FUSED_SYMBOL, LOCAL_OP_SYMBOL, OP_SYMBOL
from scripts.assets import OLD_VERSION, VERSIONS, model
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.bpftrace_count import BpftraceCount, recorded_pid

pytestmark = pytest.mark.root

PROMPT = "Paris is"
TOKENS = 8
TP_BIN = os.environ.get("PROFINFER_TP_BIN", "")
EVERY_NODE = {"0.3.2", "0.3.14"}
"""Versions whose node loop calls the op function for every node (views and reshapes too)."""


@pytest.mark.parametrize("version", [
    pytest.param(v, marks=() if VERSIONS[v].in_tests else pytest.mark.matrix) for v in VERSIONS
])
def test_record_a_llama_cpp_version(version: str, cli: Cli, tmp_path: Path) -> None:
    v = VERSIONS[version]
    if not v.is_built():
        message = f"llama.cpp of llama-cpp-python {version} is not built"
        if v.in_tests:
            pytest.fail(f"{message}: run scripts/setup.sh (it builds {OLD_VERSION} too)")
        pytest.skip(message)
    cpu = ElfFile(v.cpu_lib_path())
    functions = {"ops": OP_SYMBOL if OP_SYMBOL in cpu.symbols else LOCAL_OP_SYMBOL}
    if FUSED_SYMBOL in cpu.symbols:
        functions["fused"] = FUSED_SYMBOL
    out = tmp_path / "run.pftrace"
    bpftrace = BpftraceCount.entries(cpu.path, functions)
    result = cli("record", "-o", out, "--", v.tool_path(), "-m", model("tiny-llama"),
                 "-p", PROMPT, "-n", str(TOKENS), "-t", "2", *v.tool_flags, "--no-warmup",
                 "-s", "1")
    counts = bpftrace.stop(recorded_pid(result.stdout))
    assert result.returncode == 0, result.stderr

    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == "record"]
    assert rec.args["status"] == "complete" and rec.args["events_lost"] == 0
    assert rec.args["nodes_lost"] == 0 and rec.args["ops_dropped"] == 0

    # Every entry of the op function, and no other: bpftrace's count, on both threads alike.
    ops = [s for s in trace.slices if "node" in s.args]
    assert counts["ops"] > 0 and len(ops) == counts["ops"] + counts.get("fused", 0)
    print(f"llama-cpp-python {version}: {len(ops)} op events, bpftrace counted {counts}")
    per_thread = Counter(trace.tracks[s.track].thread.tid for s in ops)
    assert len(per_thread) == 2 and len(set(per_thread.values())) == 1
    # What llama.cpp computes: each thread enters the op function once per node of a graph
    # (n_nodes, read from the cgraph) up to 0.3.14; later loops skip empty nodes before the call.
    graphs = {s.args["graph"]: s.args["n_nodes"] * s.args["n_threads"]
              for s in trace.slices if s.name == "graph CPU"}
    assert len(graphs) == TOKENS
    if version in EVERY_NODE:
        assert len(ops) == sum(graphs.values())
    else:
        assert len(ops) < sum(graphs.values())
    names = {s.args["op"] for s in ops if "op" in s.args}
    assert {"GET_ROWS", "MUL_MAT", "ROPE"} <= names and "NONE" not in names

    # Token steps: the prompt (BOS and two tokens) in one prefill, then one decode per token.
    steps = [s for s in trace.slices if s.name in ("prefill", "decode")]
    assert [s.name for s in steps] == ["prefill"] + ["decode"] * (TOKENS - 1)
    assert steps[0].args["n_tokens"] == 3 and all(s.args["n_tokens"] == 1 for s in steps[1:])

    if TP_BIN:
        tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=TP_BIN))
        try:
            bad = list(tp.query("select name, value from stats where severity in "
                                "('error', 'data_loss') and value > 0"))
            (n,) = tp.query("select count(*) as n from slice where name in ('prefill', 'decode')")
        finally:
            tp.close()
        assert not bad, [(r.name, r.value) for r in bad]
        assert n.n == TOKENS
