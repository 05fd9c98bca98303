"""The SQL package on a Vulkan split (tests/unit/test_vulkan_model's step: a to-device copy of
256 bytes for 400 ns, MUL_MAT ffn_up-0 recorded for 400 ns, the host's wait for the device
4_400 ns), with and without the device times of record --gpu-timestamps: backend_split takes a
GPU op's time from the device where the trace has it, says so, charges the step's copy to the
GPU backend, and never lets the host's recording win; op_summary, graph_summary and roofline
know the backend. Both engines answer the same (trace_processor where PROFINFER_TP_BIN names
one)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.backends import VULKAN_NAME
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests import synthetic

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ENGINES = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
METRICS = ("backend_split", "op_summary", "graph_summary", "roofline")


def _answers(rec: Recording, tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """Each metric's rows on the trace of `rec`, as dicts; the same from each engine."""
    out = tmp_path / "vk.pftrace"
    with out.open("wb") as f:
        write_perfetto(build_layout(build(rec)), f)
    answers = []
    for engine in ENGINES:
        with TraceQuery(out, EngineChoice(engine)) as q:
            results = {m: q.metric(m) for m in METRICS}
        answers.append({m: [dict(zip(r.columns, row, strict=True)) for row in r.rows]
                        for m, r in results.items()})
    assert all(a == answers[0] for a in answers), "the engines disagree"
    return answers[0]


def _matmul(rows: list[dict[str, Any]]) -> dict[str, Any]:
    (row,) = [r for r in rows if r["op"] == "MUL_MAT"]
    return row


def test_a_timed_gpu_op_has_its_device_time_and_the_step_s_copies(tmp_path: Path) -> None:
    split = _answers(synthetic.timed_step(), tmp_path)["backend_split"]
    assert {r["backend"] for r in split} == {VULKAN_NAME}
    up = _matmul(split)
    # Its device slice (300 ns), not its host recording (400 ns).
    assert (up["time_from"], up["count"], up["total_ns"]) == ("device", 1, 300)
    assert up["wins"] == 1
    # The step's one copy (256 bytes, 400 ns), shared over the backend's rows by their time.
    total = sum(r["total_ns"] for r in split)
    assert up["copy_ns"] == round(400 * 300 / total)
    assert up["copy_bytes"] == round(256 * 300 / total)
    assert sum(r["copy_bytes"] for r in split) == 256


def test_an_untimed_gpu_op_says_its_time_is_the_host_s_recording(tmp_path: Path) -> None:
    split = _answers(synthetic.vulkan_step(), tmp_path)["backend_split"]
    up = _matmul(split)
    assert (up["time_from"], up["total_ns"]) == ("host recording", 400)
    # Not comparable with a backend's compute time: it wins nothing.
    assert all(r["wins"] == 0 for r in split)


def test_the_other_metrics_know_the_gpu_backend(tmp_path: Path) -> None:
    answers = _answers(synthetic.vulkan_step(), tmp_path)
    assert {r["backend"] for r in answers["op_summary"]} == {VULKAN_NAME}
    (graph,) = answers["graph_summary"]
    # The host recorded for 400 + 400 + 300 ns and waited for the device 4_400 ns.
    assert graph["backend"] == VULKAN_NAME
    assert graph["wait_share"] == pytest.approx(4_400 / 5_500, abs=1e-4)
    assert graph["op_share"] == pytest.approx(1_100 / 5_500, abs=1e-4)
    # No CPU roof for a GPU's nodes (and this trace holds no roofs at all).
    assert answers["roofline"] == []
