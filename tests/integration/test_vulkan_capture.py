"""The Vulkan build (setup.sh's build-vulkan) recorded with real probes, run on this machine's
Vulkan device (Mesa's lavapipe where there is no GPU): its splits, node recordings, submits,
waits for the device and copies in the trace, held against bpftrace's counts of the same
functions in the same process and against the scheduler's own account of its splits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from profinfer_perfetto.capture.events import HostCall
from profinfer_perfetto.model.names import (
    COPY_ARGS,
    COPY_DIRECTIONS,
    HOST_CALL_SLICES,
    RECORD_SLICE,
    WAIT_SLICE,
    graph_slice,
)
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.bpftrace_count import BpftraceCount, recorded_pid
from tests.integration.vulkan_oracle import VULKAN_COUNTED, completion, sched_splits

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (assets.bin_dir("vulkan").parent / ".complete").is_file(),
                       reason="the Vulkan build is not made: scripts/setup.sh makes it"),
]

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
VULKAN_GRAPH = graph_slice("Vulkan0")
CALLS_OF = {VULKAN_GRAPH: ("graph_compute",),
            HOST_CALL_SLICES[HostCall.SUBMIT]: ("submit",),
            HOST_CALL_SLICES[HostCall.WAIT]: ("wait_for_fence",),
            HOST_CALL_SLICES[HostCall.TO_DEVICE]: ("buffer_set_tensor", "set_tensor_async"),
            HOST_CALL_SLICES[HostCall.FROM_DEVICE]: ("buffer_get_tensor", "get_tensor_async"),
            HOST_CALL_SLICES[HostCall.COPY_ASYNC]: ("cpy_tensor_async",),
            "ops": ("build_graph",)}
"""What each slice (and the Vulkan splits' ops) is made of: the calls of the functions of
libggml-vulkan that vulkan_oracle counts, by its names for them."""
NOT_OPS = ", ".join(f"'{name}'" for name in (WAIT_SLICE, *HOST_CALL_SLICES.values()))
"""A graph's children that are no op: barrier waits, and submits from the backend's loop."""

PER_STEP = f"""
WITH steps AS (SELECT id, ts, dur, track_id FROM slice WHERE name = 'decode'),
graphs AS (SELECT g.id, g.name, s.id AS step FROM slice g JOIN steps s ON g.parent_id = s.id
           WHERE g.name LIKE 'graph %'),
ops AS (SELECT o.id, g.name AS graph, g.step FROM slice o JOIN graphs g ON o.parent_id = g.id
        WHERE o.name NOT IN ({NOT_OPS}))
SELECT s.id AS step,
  (SELECT COUNT(*) FROM graphs g WHERE g.step = s.id AND g.name = '{VULKAN_GRAPH}') AS graphs,
  (SELECT COUNT(*) FROM ops o WHERE o.step = s.id AND o.graph = '{VULKAN_GRAPH}') AS vulkan_ops,
  (SELECT COUNT(*) FROM ops o WHERE o.step = s.id AND o.graph = 'graph CPU') AS cpu_ops,
  {", ".join(
    f"(SELECT COUNT(*) FROM slice c WHERE c.track_id = s.track_id AND c.ts >= s.ts "
    f"AND c.ts < s.ts + s.dur AND c.name = '{HOST_CALL_SLICES[call]}') AS {call.name.lower()}"
    for call in HostCall)}
FROM steps s ORDER BY s.ts
"""
"""Per decode step: its Vulkan splits, the ops in them, the ops of its CPU splits (on the
calling thread) and each host call's slices."""

TOTALS = f"""
SELECT s.name, COUNT(*) FROM slice s WHERE s.name IN ({", ".join(
    f"'{name}'" for name in CALLS_OF if name != "ops")}) GROUP BY s.name
UNION ALL
SELECT 'ops', COUNT(*) FROM slice o JOIN slice g ON o.parent_id = g.id
WHERE g.name = '{VULKAN_GRAPH}' AND o.name NOT IN ({NOT_OPS})
"""
"""Over the whole run: each counted function's slices, and the ops of the Vulkan splits."""



@pytest.mark.parametrize("model", ["gemma-3-270m", "tiny-qwen3moe"])
def test_the_trace_holds_the_device_s_splits_ops_submits_waits_and_copies(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    for name, value in assets.vulkan_env().items():
        monkeypatch.setenv(name, value)
    command = completion(model, 99, 5)
    lib = (Path(command[0]).parent / "libggml-vulkan.so.0").resolve()
    bpftrace = BpftraceCount.entries(lib, {f: VULKAN_COUNTED[f] for fs in CALLS_OF.values()
                                           for f in fs})
    out = tmp_path / "vulkan.pftrace"
    result = cli("record", "-o", out, "--", *command)
    counts = bpftrace.stop(recorded_pid(result.stdout))
    assert result.returncode == 0, result.stderr
    graphs = sched_splits(completion(model, 99, 2), assets.vulkan_env())[1:]
    (graph,) = {g.splits: g for g in graphs}.values()
    cpu_nodes = sum(len(s.nodes) for s in graph.splits if s.backend == "CPU")

    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == RECORD_SLICE]
    assert rec.args["events_lost"] == rec.args["ops_dropped"] == 0
    # Every copy says its bytes and which way it went.
    way = {HOST_CALL_SLICES[call]: direction for call, direction in COPY_DIRECTIONS.items()}
    bytes_arg, direction_arg = COPY_ARGS
    copies = [s for s in trace.slices if s.name in way]
    assert copies and all(s.args[bytes_arg] > 0 and s.args[direction_arg] == way[s.name]
                          for s in copies)
    engines = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
    for engine in engines:
        with TraceQuery(out, EngineChoice(engine)) as q:
            totals = dict(q.sql(TOTALS).rows)
            steps = q.sql(PER_STEP)
        # The same process, counted by bpftrace: a slice per call, an op per node recording.
        assert {name: totals.get(name, 0) for name in CALLS_OF} == {
            name: sum(counts.get(f, 0) for f in fs) for name, fs in CALLS_OF.items()}, engine
        rows = [dict(zip(steps.columns, r, strict=True)) for r in steps.rows]
        assert len(rows) == 4, engine  # 5 tokens: the prompt's step, then 4 decode steps
        # Each decode step computes the same graph: one Vulkan split with the same recordings
        # in it, the host's wait for the device, and the CPU splits with all their nodes.
        assert {(r["graphs"], r["vulkan_ops"], r["cpu_ops"]) for r in rows} == {
            (1, rows[0]["vulkan_ops"], cpu_nodes)}, engine
        assert rows[0]["vulkan_ops"] > 0 and all(r["submit"] > 0 for r in rows), engine
        # Gemma's last split is the CPU's (the tied output matmul), which waits for the device
        # within the step; where the device computes the output (tiny-qwen3moe), the host waits
        # when it reads the logits, which may fall after the step: the totals above count it.
        assert model != "gemma-3-270m" or all(r["wait"] >= 1 for r in rows), engine
