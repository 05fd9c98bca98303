"""A second backend: the BLAS build of llama.cpp (setup.sh's build-blas, OpenBLAS), whose BLAS
backend takes the matmuls of 32 tokens or more (the prompt's) and leaves the rest to the CPU."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.bpftrace_count import BpftraceCount, recorded_pid

pytestmark = pytest.mark.root

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)
"""About 55 tokens: a prompt batch the BLAS backend takes the weight matmuls of."""


def _cblas_library(blas_backend: Path) -> Path:
    """The CBLAS library the BLAS backend is linked with (as the loader resolves it)."""
    out = subprocess.run(["ldd", str(blas_backend)], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(r"libopenblas\S*\s+=>\s+(/\S+)", out)
    assert found, out
    return Path(found[1]).resolve()


def test_a_blas_build_shows_the_ops_blas_runs(cli: Cli, llama: Callable[..., Path],
                                              model: Callable[[str], Path],
                                              tmp_path: Path) -> None:
    completion = llama("llama-completion", "blas")
    out = tmp_path / "blas.pftrace"
    bpftrace = BpftraceCount.entries(_cblas_library(completion.parent / "libggml-blas.so.0"),
                             {"sgemm": "cblas_sgemm"})
    result = cli("record", "-o", out, "--", completion, "-m", model("tiny-llama"), "-p", PROMPT,
                 "-n", "4", "-t", "2", "-no-cnv", "--no-warmup", "-s", "1")
    counts = bpftrace.stop(recorded_pid(result.stdout))
    assert result.returncode == 0, result.stderr
    assert counts["sgemm"] > 0

    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == "record"]
    assert rec.args["ops_dropped"] == 0 and rec.args["events_lost"] == 0
    graphs = {s.name: s for s in trace.slices if s.name.startswith("graph ")}
    assert set(graphs) == {"graph CPU", "graph BLAS"}
    assert graphs["graph BLAS"].args["backend"] == "BLAS"

    for engine in ("builtin", "trace_processor") if TP_BIN else ("builtin",):
        with TraceQuery(out, EngineChoice(engine)) as q:
            # Each of these weight matmuls is one cblas_sgemm call (one plane): as many BLAS
            # ops as bpftrace counted calls, each with its shapes and work.
            nodes = q.sql("SELECT op, phase, src0, flops, dur FROM profinfer_node "
                          "WHERE backend = 'BLAS'").rows
            assert len(nodes) == counts["sgemm"], engine
            assert all(op == "MUL_MAT" and phase == "prefill" and src0 and flops > 0 and dur > 0
                       for op, phase, src0, flops, dur in nodes), engine
            split = q.metric("backend_split")
        rows = [dict(zip(split.columns, r, strict=True)) for r in split.rows]
        blas = [r for r in rows if r["backend"] == "BLAS"]
        assert sum(r["count"] for r in blas) == counts["sgemm"], engine
        # The decode steps' matmuls (one token) stay on the CPU.
        assert {r["backend"] for r in rows if r["phase"] == "decode"} == {"CPU"}, engine
        for key in {(r["phase"], r["op"], r["role"], r["weights"]) for r in rows}:
            assert sum(r["wins"] for r in rows
                       if (r["phase"], r["op"], r["role"], r["weights"]) == key) == 1
