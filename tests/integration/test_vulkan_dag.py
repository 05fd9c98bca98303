"""The DAG's flows across a Vulkan run's splits, recorded with real probes on the Vulkan build
(setup.sh's build-vulkan): Gemma-3-270M at -ngl 99, whose scheduler cuts each token step into
a CPU split (the token embeddings' GET_ROWS), the Vulkan split and a CPU split (the output
MUL_MAT), each reading the one before through its copy into its own backend."""

from __future__ import annotations

import os

import pytest

from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests.integration.conftest import VulkanRun
from tests.integration.vulkan_oracle import completion, sched_splits

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (assets.bin_dir("vulkan").parent / ".complete").is_file(),
                       reason="the Vulkan build is not made: scripts/setup.sh makes it"),
]

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ACROSS = """
SELECT step.name AS step, ga.name AS out_graph, a.name AS out_op, gb.name AS in_graph,
  b.name AS in_op FROM flow f
JOIN slice a ON a.id = f.slice_out JOIN slice ga ON ga.id = a.parent_id
JOIN slice b ON b.id = f.slice_in JOIN slice gb ON gb.id = b.parent_id
JOIN slice step ON step.id = ga.parent_id
WHERE ga.id != gb.id AND step.id = gb.parent_id ORDER BY a.ts, b.ts
"""
"""Each flow between op slices of two graph slices of one token step: the step's name, then
the graph and op slice it leaves and those it enters."""



def test_flows_cross_from_the_cpu_split_to_the_vulkan_split_and_back(
        gemma_on_vulkan: VulkanRun) -> None:
    out = gemma_on_vulkan.trace
    assert gemma_on_vulkan.result.returncode == 0, gemma_on_vulkan.result.stderr
    # The scheduler's own account: a CPU split of the embeddings' GET_ROWS, the Vulkan split
    # reading its result, a CPU split of the output MUL_MAT reading the Vulkan split's last.
    graphs = sched_splits(completion("gemma-3-270m", 99, 2), assets.vulkan_env())[1:]
    (graph,) = {g.splits: g for g in graphs}.values()
    first, vulkan, last = graph.splits
    assert (first.backend, vulkan.backend, last.backend) == ("CPU", "Vulkan0", "CPU")
    (embd,), (output,) = first.nodes, last.nodes
    assert embd.op == "GET_ROWS" and output.op == "MUL_MAT"
    expected = [("graph CPU", f"GET_ROWS {embd.name}", "graph Vulkan0", "SCALE inp_scaled"),
                ("graph Vulkan0", f"RMS_NORM+MUL {vulkan.nodes[-1].name}", "graph CPU",
                 f"MUL_MAT {output.name}")]
    engines = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
    for engine in engines:
        with TraceQuery(out, EngineChoice(engine)) as q:
            rows = [tuple(r) for r in q.sql(ACROSS).rows]
        # The prompt's step and each decode step: the two flows across its splits, and no
        # other (the norms' weights, the shape of a token's row too, are no copy).
        assert rows == [(step, *flow) for step in ("prefill", "decode", "decode")
                        for flow in expected], engine
