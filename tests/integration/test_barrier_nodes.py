"""Each barrier of the graph loop names the node its thread has just finished (analysis/loop.py),
and a recording with one trap per op (the default) sees every op through those barriers alone.

The oracle is the op-begin probe, which reads the node from the op function's argument (another
path): with --exact, each op begin's node (the last of a fused pair) is named by exactly one
barrier of its thread before the thread's next op begins, and no barrier names another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.capture.events import Kind
from profinfer_perfetto.capture.recorder import RecordRequest, plan, record, traps_per_op
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.capture.selection import Selection
from tests.integration.bpftrace_count import BpftraceCount
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


def _by_time(rec: Recording) -> list[tuple[int, int, int, int, int]]:
    """(ts, tid, kind, arg0, arg1) of every event, in time order."""
    e = rec.events[np.argsort(rec.events["ts"], kind="stable")]
    return list(zip(e["ts"].tolist(), e["tid"].tolist(), e["kind"].tolist(),
                    e["arg0"].tolist(), e["arg1"].tolist(), strict=True))


@pytest.mark.parametrize(("name", "threads"), [("tiny-llama", 2), ("gemma-3-270m", 1)])
def test_a_loop_barrier_names_the_node_of_its_thread_s_latest_op(
        llama: Callable[..., Path], model: Callable[[str], Path], name: str,
        threads: int) -> None:
    request = RecordRequest(command=completion(llama, model(name), threads, n=8),
                            selection=Selection(exact=True))
    rec = record(request, plan(request))
    unnamed: dict[int, int] = {}
    after = 0
    for _, tid, kind, arg0, arg1 in _by_time(rec):
        if kind == Kind.OP_BEGIN:
            assert tid not in unnamed  # the thread's previous op was named
            unnamed[tid] = arg1 or arg0  # a fused pair: the loop's index is past its last node
        elif kind == Kind.BARRIER and arg0:
            assert unnamed.pop(tid, None) == arg0, (tid, arg0, arg1)
            after += arg1
    assert not unnamed and after
    assert np.count_nonzero(rec.events["kind"] == Kind.OP_BEGIN)


def _named_ops(rec: Recording) -> Counter[int]:
    """The op ids of the nodes the loop's barriers name (a node by its latest descriptor)."""
    described = sorted(zip(rec.nodes["ts"].tolist(), rec.nodes["ptr"].tolist(),
                           rec.nodes["op"].tolist(), strict=True))
    op_of: dict[int, int] = {}
    out: Counter[int] = Counter()
    k = 0
    for ts, _, kind, arg0, _ in _by_time(rec):
        while k < len(described) and described[k][0] <= ts:
            op_of[described[k][1]] = described[k][2]
            k += 1
        if kind == Kind.BARRIER and arg0:
            out[op_of[arg0]] += 1
    return out


def test_one_trap_sees_through_the_barriers_the_ops_of_the_exact_mode(
        llama: Callable[..., Path], model: Callable[[str], Path]) -> None:
    """The same seeded generation: by default no op begin, and the barriers name as many
    nodes of each op type as the barriers of an --exact recording do."""
    cmd = completion(llama, model("tiny-llama"), 2, n=8)
    exact_request = RecordRequest(command=cmd, selection=Selection(exact=True))
    exact = record(exact_request, plan(exact_request))
    request = RecordRequest(command=cmd)
    one_plan = plan(request)
    assert one_plan is not None
    one = record(request, one_plan)
    assert not np.count_nonzero(one.events["kind"] == Kind.OP_BEGIN)
    assert traps_per_op(request, one_plan) in one.run.notes
    assert "traps per op and thread: 2 (op begin and barrier: --exact)" in exact.run.notes
    assert _named_ops(one) == _named_ops(exact) != Counter()


def test_each_thread_enters_the_graph_loop_once_per_graph_as_bpftrace_counts(
        llama: Callable[..., Path], model: Callable[[str], Path]) -> None:
    """By default a thread's first node begins where it enters the graph loop's function, found
    as the function of the barrier calls that name their node: bpftrace, by the function's name,
    counts as many entries, and each thread's barriers that name a node lie between an entry and
    the barrier after the loop."""
    lib = llama("llama-completion").parent / "libggml-cpu.so"
    name = next(n for n in ElfFile(lib).symbols if n.startswith("ggml_graph_compute_thread"))
    bpftrace = BpftraceCount.entries(lib, {"loops": name})
    request = RecordRequest(command=completion(llama, model("tiny-llama"), 2, n=8))
    rec = record(request, plan(request))
    counts = bpftrace.stop(rec.run.pid)
    assert np.count_nonzero(rec.events["kind"] == Kind.LOOP_ENTER) == counts["loops"] > 0
    inside: dict[int, bool] = {}
    for _, tid, kind, arg0, arg1 in _by_time(rec):
        if kind == Kind.LOOP_ENTER:
            assert not inside.get(tid), tid
            inside[tid] = True
        elif kind == Kind.BARRIER and (arg0 or arg1):
            assert inside.get(tid), tid
            inside[tid] = not arg1
    assert inside and not any(inside.values())
