"""Mixture-of-Experts routing: the expert ids a trace holds are the ones llama.cpp computed.

llama.cpp's own eval callback tool (`llama-eval-callback`) prints every tensor it computes while
it processes a prompt, the routers' top-k ids (`ffn_moe_topk-L`) among them; recorded at the
same time, each MUL_MAT_ID op slice of layer L must carry exactly those ids, token by token.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from itertools import accumulate
from pathlib import Path

import pytest

from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests import trace_reader
from tests.conftest import BUILD, Cli

pytestmark = pytest.mark.root

PROMPT = "Paris is the capital of"
TP_BIN = os.environ.get("PROFINFER_TP_BIN", "")
_TOPK = re.compile(r"ffn_moe_topk-(\d+) = \(i32\)")
_ROW = re.compile(r"^(?:\d+\.\d+\.\d+\.\d+ [A-Z] )?\s*\[([-\d., ]+)\],?$")
"""A row of a printed tensor (after the timestamp and level llama.cpp's log may put first)."""


def printed_topk(stdout: str) -> dict[int, str]:
    """Layer -> its top-k ids as the trace writes them (`a,b c,d`: tokens apart by spaces), for
    each tensor printed whole (the log can end inside one, or lose its rows)."""
    found: dict[int, str] = {}
    lines = iter(stdout.splitlines())
    for line in lines:
        m = _TOPK.search(line)
        if m is None:
            continue
        rows: list[str] = []
        for row in lines:
            if "sum =" in row:  # the tensor's last line
                if rows:
                    found[int(m[1])] = " ".join(rows)
                break
            if (r := _ROW.match(row)) is not None:
                rows.append(",".join(str(int(float(v))) for v in r[1].split(",") if v.strip()))
    return found


@pytest.mark.parametrize("model", ["tiny-qwen3moe", "medium-qwen3moe", "tiny-mixtral"])
def test_expert_ids_are_the_ones_llama_cpp_computed(cli: Cli, tmp_path: Path, model: str) -> None:
    """Top-2 of 8 experts, top-4 of 16, and a Mixtral-shaped (llama architecture) top-2 of 4."""
    tool = assets.llama_bin("llama-eval-callback", BUILD)
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run scripts/setup.sh first")
    out = tmp_path / "moe.pftrace"
    result = cli("record", "-o", out, "--", tool, "-m", assets.model(model),
                 "-p", PROMPT, "-t", "2", "-s", "1")
    assert result.returncode == 0, result.stderr
    expected = printed_topk(result.stdout)
    assert expected and all(expected.values()), result.stdout[-4000:]
    trace = trace_reader.read(out)
    # The UI's view: a track per layer, a slice per graph naming each token's experts.
    drawn = {trace.track_name(s.track): s.name for s in trace.slices
             if trace.track_name(s.track).startswith("experts layer ")}
    assert drawn["experts layer 0"] == expected[0]
    routed: dict[int, set[str]] = {}
    for s in trace.slices:
        if s.args.get("op") == "MUL_MAT_ID":
            routed.setdefault(s.args["layer"], set()).add(s.args["experts"])
            assert "routing_cut" not in s.args
    # The tool logs from a thread of its own, which can lose its last lines at exit: every
    # layer it printed is checked, and layer 0 always is.
    assert 0 in expected
    assert {layer: routed[layer] for layer in expected} == {
        layer: {ids} for layer, ids in expected.items()}


def test_moe_metrics_count_what_the_trace_routes(cli: Cli, tmp_path: Path) -> None:
    """moe_experts and moe_cost on both engines against the same numbers computed here from the
    op slices' `experts` args: activations per (phase, layer, expert), tokens since the last
    one, and op instances per distinct experts."""
    out = tmp_path / "moe.pftrace"
    result = cli("record", "-o", out, "--", assets.llama_bin("llama-completion"), "-m",
                 assets.model("tiny-qwen3moe"), "-p", PROMPT, "-n", "12", "-t", "2",
                 "-no-cnv", "--no-warmup", "-s", "1")
    assert result.returncode == 0, result.stderr
    trace = trace_reader.read(out)
    steps = [s for s in trace.slices if s.name in ("prefill", "decode")]
    first = dict(zip((s.args["step"] for s in steps),
                     accumulate((s.args["n_tokens"] for s in steps), initial=0), strict=False))
    seen: set[tuple[int, int]] = set()  # (graph, layer): one expert op of each counts
    activations: Counter[tuple[str, int, int]] = Counter()
    last: dict[tuple[int, int], int] = {}
    dists: dict[tuple[str, int, int], list[int]] = {}
    ops = sorted((s for s in trace.slices if "experts" in s.args), key=lambda s: s.ts)
    for s in ops:
        graph = s.parent.args["graph"] if s.parent is not None else -1
        step = next(t for t in steps if t.ts <= s.ts <= t.end)
        layer, key = s.args["layer"], (graph, s.args["layer"])
        if key in seen:
            continue
        seen.add(key)
        tokens = s.args["experts"].split(" ")
        skip = step.args["n_tokens"] - len(tokens)
        for i, ids in enumerate(tokens):
            at = first[step.args["step"]] + skip + i
            for expert in map(int, ids.split(",")):
                k = (step.name, layer, expert)
                activations[k] += 1
                if (layer, expert) in last:
                    dists.setdefault(k, []).append(at - last[layer, expert])
                last[layer, expert] = at
    assert activations
    # moe_cost: every expert op instance, by the distinct experts its tokens went to.
    instances: Counter[tuple[str, str, str, int]] = Counter()
    for s in ops:
        step = next(t for t in steps if t.ts <= s.ts <= t.end)
        experts = {int(e) for ids in s.args["experts"].split(" ") for e in ids.split(",")}
        instances[step.name, s.args["op"], s.args["role"], len(experts)] += 1
    for engine in ("builtin", "trace_processor") if TP_BIN else ("builtin",):
        with TraceQuery(out, EngineChoice(engine)) as q:
            rows, cost = q.metric("moe_experts"), q.metric("moe_cost")
        got = {(r[0], r[1], r[2]): dict(zip(rows.columns, r, strict=True)) for r in rows.rows}
        assert {k: v["activations"] for k, v in got.items()} == dict(activations)
        for k, d in dists.items():
            assert abs(got[k]["dist_mean"] - sum(d) / len(d)) <= 0.005 + 1e-9
        assert {tuple(r[:4]): r[4] for r in cost.rows} == dict(instances)
