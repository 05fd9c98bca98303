"""Every canned metric agrees with a recomputation in numpy from the events of a real run.

One real recording (tiny-llama, 16 tokens, 2 threads, --sched, a busy loop on CPU 1 beside it)
is modelled, written as a trace and queried; the same numbers are then derived here straight
from the model's columns and the raw scheduling records. What the code under test decides about
them (a step's phase, an op's role, FLOPs and bytes, a task's state) comes here from the run's
known facts and from ggml's and the kernel's own definitions, not from that code.
"""

from __future__ import annotations

import itertools
import math
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from profinfer_perfetto.capture.events import SchedKind
from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.machine.peaks import Peak, PeakKind
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import TraceModel, build
from profinfer_perfetto.query.engines import EngineChoice, Result
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets

pytestmark = pytest.mark.root

PEAKS = (Peak(PeakKind.MEMORY, 1, 10.0), Peak(PeakKind.MEMORY, 2, 20.0),
         Peak(PeakKind.COMPUTE, 2, 100.0, "f16"), Peak(PeakKind.COMPUTE, 2, 400.0, "q4_K"))
"""Roofs for the run: its f16 matmuls have their own compute roof, its f32 ops the highest."""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceModel, TraceQuery]:
    cmd = [str(assets.llama_bin("llama-completion")), "-m", str(assets.model("tiny-llama")),
           "-p", "Paris is the capital of", "-n", "16", "-t", "2", "-no-cnv", "--no-warmup"]
    request = RecordRequest(command=cmd, counters=("context-switches", "task-clock"), sched=True,
                            peaks=PEAKS)
    hog = subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do :; done"])
    try:
        model = build(record(request, plan(request)))
    finally:
        hog.kill()
        hog.wait()
    path = tmp_path_factory.mktemp("metrics") / "run.pftrace"
    with path.open("wb") as out:
        write_perfetto(build_layout(model), out)
    return model, TraceQuery(Path(path), EngineChoice("builtin"))


LAYERS = 4
"""tiny-llama's (scripts/make_models.py)."""
ROLES = {f"{name}-{layer}": name for layer in range(LAYERS) for name in (
    "attn_norm", "Qcur", "Kcur", "Vcur", "attn_out", "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up",
    "ffn_swiglu", "ffn_out", "l_out")}
ROLES |= {f"cache_{kv}_l{layer} (view)": f"cache_{kv}" for kv in "kv" for layer in range(LAYERS)}
ROLES |= {name: name for name in ("embd", "result_norm", "result_output")}
"""The tensor names llama.cpp gives tiny-llama's nodes, and each one's role: the name without
its layer (the same tensor in every layer)."""


def role_of(tensor: str, op: str) -> str:
    """A named node's role from ROLES; a node ggml named itself (node_N) by its op."""
    if tensor.startswith("node_"):
        return op.lower()
    assert tensor in ROLES, f"{tensor} is not one of tiny-llama's node names"
    return ROLES[tensor]


def nbytes(dtype: int, elements: int) -> int:
    """What `elements` values of a ggml type take: whole blocks, as gguf lists their sizes."""
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(dtype)]
    return elements // block * size


def work(op: str, node: np.void) -> tuple[int, int]:
    """FLOPs and bytes of one node, as the metrics count them: 2*K*M*N for a matrix
    product, 4*D*n_kv*n_q*heads for flash attention, one per output element otherwise; bytes of
    the sources read and the output written (only the rows GET_ROWS reads and SET_ROWS
    writes)."""
    srcs = [src for src in node["src"] if src["ptr"]]
    out = math.prod(node["ne"].tolist())
    sizes = [nbytes(int(src["type"]), math.prod(src["ne"].tolist())) for src in srcs]
    total = nbytes(int(node["type"]), out) + sum(sizes)
    assert op != "MUL_MAT_ID", "tiny-llama has no experts"
    if op == "MUL_MAT":
        k, m = srcs[0]["ne"][:2].tolist()
        return 2 * k * m * math.prod(srcs[1]["ne"][1:].tolist()), total
    if op == "FLASH_ATTN_EXT":
        d, n_q, heads, seqs = srcs[0]["ne"].tolist()
        return 4 * d * int(srcs[1]["ne"][1]) * n_q * heads * seqs, total
    if op == "GET_ROWS":
        rows, looked_up = int(srcs[0]["ne"][1]), math.prod(srcs[1]["ne"].tolist())
        return out, total - sizes[0] + sizes[0] * min(looked_up, rows) // rows
    if op == "SET_ROWS":
        written = math.prod(srcs[0]["ne"].tolist())
        return written, total - nbytes(int(node["type"]), out) + nbytes(int(node["type"]),
                                                                         written)
    return out, total


def preempted(prev_state: int) -> bool:
    """Whether sched_switch says the task left its CPU still runnable: TASK_RUNNING (0), with
    at most the preemption flag above the task state bits (the kernel's TASK_REPORT_MAX)."""
    return prev_state >= 0 and prev_state & 0xFF == 0


def nearest_rank(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[max(math.ceil(p * len(ordered)), 1) - 1]


Rows = list[dict[str, Any]]


def group(rows: Iterable[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], Rows]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def by_key(result: Result, *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    return {tuple(r[k] for k in keys): r for r in rows}


def steps(model: TraceModel) -> list[dict[str, Any]]:
    tok = model.tokens
    n = tok.arg0.astype(np.int64)
    pos = np.cumsum(np.maximum(n, 0)) - np.maximum(n, 0)
    assert n[0] > 1 and (n[1:] == 1).all(), "llama-completion: the prompt, then one token a step"
    return [{"step": i, "phase": "decode" if i else "prefill", "n_tokens": int(n[i]),
             "pos": int(pos[i]), "dur": max(int(tok.end[i]) - int(tok.begin[i]), 1)}
            for i in range(len(tok))]


def op_slices(model: TraceModel) -> list[dict[str, Any]]:
    ops, nodes, ggml = model.ops, model.nodes, model.run.ggml
    step_of_graph = model.tokens.containing(model.graphs.begin)
    phase = {s["step"]: s["phase"] for s in steps(model)}
    out = []
    for i in range(len(ops)):
        node, fused = int(ops.node[i]), int(ops.fused[i])
        label, tensor = model.op_label(node, fused)
        last = fused if fused >= 0 else node
        op = label if fused >= 0 else ggml.op_name(int(nodes.record(node)["op"]))
        flops, moved = (sum(w) for w in zip(*(work(ggml.op_name(int(nodes.record(n)["op"])),
                                                   nodes.record(n)) for n in {node, last}),
                                             strict=True))
        begin, work_end, end = int(ops.begin[i]), int(ops.work_end[i]), int(ops.end[i])
        step = int(step_of_graph[ops.graph[i]])
        out.append({
            "graph": int(ops.graph[i]), "node": int(nodes.index[node]), "tid": int(ops.tid[i]),
            "op": op, "role": role_of(tensor, op), "layer": int(nodes.layer[last]),
            "dtype": ggml.type_name(int(nodes.record(node)["src"][0]["type"])), "flops": flops,
            "bytes": moved, "threads": int(model.graphs.arg1[ops.graph[i]] >> 32),
            "begin": begin, "dur": max(work_end - begin, 1), "wait": max(end - work_end, 0),
            "step": step, "phase": phase.get(step),
            "delta": [int(d) for d in ops.counter_delta[i]],
        })
    return out


def node_instances(model: TraceModel) -> list[dict[str, Any]]:
    out = []
    for (graph, node), shares in group(op_slices(model), "graph", "node").items():
        first = shares[0]
        begin = min(s["begin"] for s in shares)
        durs = [s["dur"] for s in shares]
        out.append({**first, "graph": graph, "node": node, "shares": len(shares),
                    "dur": max(s["begin"] + s["dur"] for s in shares) - begin,
                    "work": sum(durs), "slowest": max(durs), "fastest": min(durs),
                    "wait": sum(s["wait"] for s in shares)})
    return out


def fit(points: list[tuple[float, float]]) -> tuple[float, float, float | None]:
    """Least squares; work that does not vary gets a flat line at the mean and no r2."""
    x, y = np.array(points, dtype=np.float64).T
    if x.var() <= 1e-9 * x.mean() ** 2 or x.var() == 0:
        return 0.0, float(y.mean()), None
    slope, intercept = np.polyfit(x, y, 1)
    r2 = np.corrcoef(x, y)[0, 1] ** 2 if y.std() > 0 else None
    return float(slope), float(intercept), None if r2 is None else float(r2)


def half_up(x: float) -> int:
    """SQLite's ROUND: halves away from zero (Python's round() goes to even)."""
    return math.floor(x + 0.5)


def close(a: float | None, b: float | None, rel: float = 1e-3, abs_: float = 0.01) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def test_token_latency_and_steps(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    expected = steps(model)
    got = by_key(q.metric("token_steps"), "step")
    assert len(got) == len(expected) == 16
    for s in expected:
        row = got[(s["step"],)]
        assert (row["phase"], row["n_tokens"], row["pos"], row["dur_ns"]) == (
            s["phase"], s["n_tokens"], s["pos"], s["dur"])
    latency = by_key(q.metric("token_latency"), "phase")
    for (phase,), rows in group(expected, "phase").items():
        durs = [r["dur"] for r in rows]
        row = latency[(phase,)]
        assert row["steps"] == len(rows) and row["total_ns"] == sum(durs)
        assert row["first_ns"] == rows[0]["dur"] and row["max_ns"] == max(durs)
        assert row["p50_ns"] == nearest_rank(durs, 0.5)
        assert row["p90_ns"] == nearest_rank(durs, 0.9)
        assert close(row["tokens_per_s"], sum(r["n_tokens"] for r in rows) * 1e9 / sum(durs))


def test_op_summary(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    phase_time = {p: sum(r["dur"] for r in rows)
                  for (p,), rows in group(steps(model), "phase").items()}
    got = by_key(q.metric("op_summary"), "phase", "op", "role")
    expected = group(node_instances(model), "phase", "op", "role")
    assert set(got) == set(expected)
    for key, rows in expected.items():
        durs = [r["dur"] for r in rows]
        row = got[key]
        assert (row["count"], row["total_ns"], row["max_ns"]) == (len(rows), sum(durs), max(durs))
        assert row["mean_ns"] == half_up(sum(durs) / len(durs))
        assert row["p50_ns"] == nearest_rank(durs, 0.5)
        assert row["p90_ns"] == nearest_rank(durs, 0.9)
        assert close(row["share"], sum(durs) / phase_time[key[0]], abs_=1e-4)


def test_thread_balance(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    got = by_key(q.metric("thread_balance"), "op", "role")
    expected = group([n for n in node_instances(model) if n["shares"] > 1], "op", "role")
    assert set(got) == set(expected)
    for key, rows in expected.items():
        row = got[key]
        spread = [r["slowest"] - r["fastest"] for r in rows]
        assert row["instances"] == len(rows)
        assert row["mean_spread_ns"] == half_up(sum(spread) / len(spread))
        assert row["worst_spread_ns"] == max(spread)
        assert close(row["imbalance"], sum(r["slowest"] for r in rows)
                     / sum(r["fastest"] for r in rows))
        work, wait = sum(r["work"] for r in rows), sum(r["wait"] for r in rows)
        assert close(row["wait_share"], wait / (work + wait), abs_=1e-4)


def test_graph_summary(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    got = by_key(q.metric("graph_summary"), "phase")
    slices = op_slices(model)
    gr = model.graphs
    phase = {s["step"]: s["phase"] for s in steps(model)}
    graph_phase = [phase[int(s)] for s in model.tokens.containing(gr.begin)]
    for p in set(graph_phase):
        graphs = [g for g in range(len(gr)) if graph_phase[g] == p]
        durs = [int(gr.end[g] - gr.begin[g]) for g in graphs]
        mine = [s for s in slices if s["phase"] == p]
        work, wait = sum(s["dur"] for s in mine), sum(s["wait"] for s in mine)
        row = got[(p,)]
        assert row["graphs"] == len(graphs) and row["total_ns"] == sum(durs)
        assert row["p50_ns"] == nearest_rank(durs, 0.5)
        assert close(row["op_share"], work / (work + wait), abs_=1e-4)
        assert close(row["ops"], len({(s["graph"], s["node"]) for s in mine}) / len(graphs))


def test_kv_growth(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    kv = {s["step"]: s["pos"] + s["n_tokens"] for s in steps(model)}
    attention = [n for n in node_instances(model) if n["phase"] == "decode"
                 and (n["op"] in ("FLASH_ATTN_EXT", "SOFT_MAX")
                      or n["role"] in ("kq", "kqv", "kq_soft_max", "kq_mask"))]
    assert attention, "tiny-llama decodes with attention ops"
    got = by_key(q.metric("kv_growth"), "op", "role", "layer")
    expected = {(*k, None): v for k, v in group(attention, "op", "role").items()}
    expected |= group(attention, "op", "role", "layer")
    assert set(got) == set(expected)
    for key, rows in expected.items():
        slope, intercept, r2 = fit([(kv[r["step"]], r["dur"]) for r in rows])
        row = got[key]
        assert row["points"] == len(rows)
        assert close(row["slope_ns_per_token"], slope, abs_=0.01)
        assert close(row["intercept_ns"], intercept, abs_=0.2)
        assert close(row["r2"], r2, abs_=1e-4)


def test_op_cost(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    instances = [n for n in node_instances(model) if n["flops"] > 0]
    got = by_key(q.metric("op_cost"), "op", "role", "dtype")
    for rows in group(instances, "op").values():
        if len(rows) < 2:
            continue
        slope, intercept, r2 = fit([(r["flops"] / 1e6, r["dur"]) for r in rows])
        for key, members in group(rows, "op", "role", "dtype").items():
            row = got[key]
            mean = sum(r["dur"] for r in members) / len(members)
            assert row["count"] == len(members) and row["mean_ns"] == half_up(mean)
            mflop = sum(r["flops"] for r in members) / len(members) / 1e6
            predicted = intercept + slope * mflop
            assert abs(row["fit_ns"] - predicted) <= max(1.0, 1e-6 * abs(predicted))
            assert close(row["r2"], r2, abs_=1e-4)


def test_roofline(run: tuple[TraceModel, TraceQuery]) -> None:
    """Each group's rates, roofs and verdict as the rule computes them from the run's nodes and
    the roofs it was recorded with (the roof at the graph's thread count; the op's weight type's
    compute roof, else the highest). Which verdicts a real run gets depends on how busy the
    machine was (a loaded one makes every op overhead-bound): the golden run's
    (tests/golden/query/roofline.csv) has each of them."""
    model, q = run
    got = by_key(q.metric("roofline"), "phase", "op", "role", "dtype", "threads")
    instances = [n for n in node_instances(model) if n["flops"] > 0 and n["bytes"] > 0]
    groups = group(instances, "phase", "op", "role", "dtype", "threads")
    assert set(got) == set(groups)
    for key, members in groups.items():
        row, threads, dtype = got[key], key[4], key[3]
        flops, nbytes = sum(m["flops"] for m in members), sum(m["bytes"] for m in members)
        dur = sum(m["dur"] for m in members)
        peak_gb = max(p.value for p in PEAKS if p.kind == "memory" and p.threads <= threads)
        own = [p.value for p in PEAKS if p.kind == "compute" and p.dtype == dtype]
        peak_gflop = own[0] if own else max(p.value for p in PEAKS if p.kind == "compute")
        ai, achieved = flops / nbytes, flops / dur
        roof = min(peak_gflop, ai * peak_gb)
        verdict = ("overhead-bound" if achieved < 0.1 * roof else "memory-bound"
                   if ai < peak_gflop / peak_gb else "compute-bound")
        assert row["instances"] == len(members)
        assert (row["peak_gbyte_per_s"], row["peak_gflop_per_s"]) == (peak_gb, peak_gflop)
        assert close(row["intensity"], ai) and close(row["gflop_per_s"], achieved)
        assert close(row["roof_gflop_per_s"], roof) and row["verdict"] == verdict, key


def test_counters(run: tuple[TraceModel, TraceQuery]) -> None:
    model, q = run
    got = by_key(q.metric("counters"), "counter", "op", "role")
    slices = op_slices(model)
    assert any(counter == "task-clock" for counter, _, _ in got)
    for c, counter in enumerate(model.run.counters):
        for (op, role_), rows in group(slices, "op", "role").items():
            total = sum(max(r["delta"][c], 0) for r in rows)  # -1: not counted
            row = got.pop((counter, op, role_), None)
            assert (row is None) == (total == 0)
            if row is not None:
                assert row["slices"] == len(rows) and row["total"] == total
    assert not got


def test_sequences(run: tuple[TraceModel, TraceQuery]) -> None:
    """llama-completion decodes one sequence: one request, its prompt the first step."""
    model, q = run
    s = steps(model)
    decode = [x["dur"] for x in s[1:]]
    (row,) = by_key(q.metric("sequences"), "seq", "request").values()
    assert (row["seq"], row["first_step"], row["last_step"], row["prompt_tokens"],
            row["prompt_steps"], row["decode_steps"], row["ttft_ns"], row["decode_max_ns"]) == (
        0, 0, len(s) - 1, s[0]["n_tokens"], 1, len(s) - 1, s[0]["dur"], max(decode))
    assert row["decode_mean_ns"] == half_up(sum(decode) / len(decode))
    assert close(row["tokens_per_s"], len(decode) * 1e9 / sum(decode))


Interval = tuple[int, int]


Run = tuple[int, int, int, int, bool]
"""tid, cpu, begin, end, and whether trace_processor sees it begin."""


def _sched_slices(model: TraceModel) -> list[Run]:
    """Each time a task ran: between a CPU's consecutive switches (the last one, still open,
    left out). A CPU's first switch only says who runs there (in compact sched data the switch
    before names the task switched out): trace_processor does not see that run begin."""
    assert model.sched is not None
    out = []
    for cpu in sorted(set(model.sched.records["cpu"].tolist())):
        sw = model.sched.records[(model.sched.records["cpu"] == cpu)
                                 & (model.sched.records["kind"] == SchedKind.SWITCH)].tolist()
        for i, (a, b) in enumerate(itertools.pairwise(sw)):
            out.append((int(a[4]), cpu, int(a[0]), int(b[0]), i > 0))
    return out


def _waits(model: TraceModel, slices: list[Run]) -> dict[int, list[tuple[int, int, bool]]]:
    """Per inference thread, each time it waited for a CPU, between two of its runs: all of the
    gap when it was switched out runnable (a preemption), else from its first wakeup in the gap;
    and before its first run, from its first wakeup. A wait ended by a run trace_processor does
    not see begin stays open there, and is left out; so is a wakeup on a CPU that has had no
    switch yet, which trace_processor drops (query/sched_import.py): the launched target's
    first, by the recorder that resumes it at the capture's start, often is one."""
    assert model.sched is not None
    rec = model.sched.records
    switches = rec[rec["kind"] == SchedKind.SWITCH]
    first_switch = {cpu: int(switches["ts"][switches["cpu"] == cpu].min())
                    for cpu in set(switches["cpu"].tolist())}
    wakings: dict[int, list[int]] = defaultdict(list)
    for r in rec[rec["kind"] == SchedKind.WAKING]:
        if int(r["ts"]) >= first_switch.get(int(r["cpu"]), 1 << 64):
            wakings[int(r["tid"])].append(int(r["ts"]))
    out_state = {(int(r[2]), int(r[0])): int(r[1]) for r in switches.tolist()}
    waits: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for tid in model.thread_ids():
        runs = sorted((b, e, seen) for t, _, b, e, seen in slices if t == tid)
        gaps: list[tuple[int | None, int, bool]] = [(None, runs[0][0], runs[0][2])] if runs else []
        gaps += [(e, b, seen) for (_, e, _), (b, _, seen) in itertools.pairwise(runs)]
        for end, begin, seen in gaps:
            if not seen:
                continue
            if end is not None and preempted(out_state.get((tid, end), -1)):
                waits[tid].append((end, begin, True))
                continue
            woken = [w for w in wakings[tid] if (end is None or w >= end) and w < begin]
            if woken:
                waits[tid].append((woken[0], begin, False))
    return {t: [w for w in ws if w[1] > w[0]] for t, ws in waits.items()}


def _clip(a: int, b: int, window: Interval) -> int:
    return max(min(b, window[1]) - max(a, window[0]), 0)


def _union(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def test_interference(run: tuple[TraceModel, TraceQuery]) -> None:
    """interference, interference_tasks and interference_ops from the raw switch and wakeup
    records: runs per CPU, the inference threads' waits between their runs."""
    model, q = run
    slices = _sched_slices(model)
    waits = _waits(model, slices)
    inference = set(model.thread_ids())
    others = [(t, cpu, b, e) for t, cpu, b, e, seen in slices
              if seen and t not in inference and t != 0]
    windows = [(int(b), int(e)) for b, e in zip(model.tokens.begin.tolist(),
                                                  model.tokens.end.tolist(), strict=True)]
    all_waits = [(a, b) for ws in waits.values() for a, b, _ in ws]
    got = by_key(q.metric("interference"), "step")
    for i, w in enumerate(windows):
        row = got[(i,)]
        assert row["waiting_ns"] == sum(_clip(a, b, w) for a, b in all_waits)
        assert row["preempted_ns"] == sum(_clip(a, b, w) for ws in waits.values()
                                          for a, b, pre in ws if pre)
        assert row["stalled_ns"] == sum(_clip(a, b, w) for a, b in _union(all_waits))
        assert row["others_ns"] == sum(_clip(b, e, w) for _, _, b, e in others)
    contended = _union(windows + all_waits)
    tasks = by_key(q.metric("interference_tasks"), "tid")
    taken: dict[int, int] = defaultdict(int)
    for t, _, b, e in others:
        taken[t] += sum(_clip(b, e, c) for c in contended)
    assert {t: r["taken_ns"] for (t,), r in tasks.items()} == {t: n for t, n in taken.items()
                                                               if n > 0}
    assert sum(r["taken_ns"] for r in tasks.values()) > 0  # the busy loop, at least
    ops = by_key(q.metric("interference_ops"), "phase", "op")
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for o in op_slices(model):
        if o["phase"] is not None:
            span = (o["begin"], o["begin"] + o["dur"])
            expected[o["phase"], o["op"]] += sum(_clip(a, b, span)
                                                 for a, b, _ in waits.get(o["tid"], []))
    assert {k: r["waiting_ns"] for k, r in ops.items()} == dict(expected)


def test_every_metric_is_checked() -> None:
    from profinfer_perfetto.query.metrics import canned

    tested = {"token_latency", "token_steps", "op_summary", "thread_balance", "graph_summary",
              "kv_growth", "op_cost", "counters", "sequences", "interference",
              "interference_tasks", "interference_ops", "roofline",
              "moe_experts", "moe_cost",  # in test_routing.py, on a Mixture-of-Experts model
              "backend_split"}  # in test_backends.py, on a BLAS build
    assert tested == set(canned())

