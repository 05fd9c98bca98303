"""Which op probes `record` attaches: one trap per op (the graph loop's barrier calls whose node
is known) by default, and each op's begin too where --exact, another option or the build asks
for it, with the reason in the run's notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.analysis.loop import LoopBarrier
from profinfer_perfetto.analysis.target import LOOP_ENTRY, Probe, ProbePlan
from profinfer_perfetto.capture.recorder import RecordRequest, _probes, traps_per_op
from profinfer_perfetto.capture.selection import Selection
from tests.synthetic import GGML

INSIDE = LoopBarrier(0x20, "r12", -1, "rax", False)
AFTER = LoopBarrier(0x10, None, 0, None, True)
FNS = ("op_begin", "fused_op_begin", "barrier_enter", AFTER.fn, INSIDE.fn, LOOP_ENTRY,
       "graph_begin", "graph_end", "decode_begin")
PLAN = ProbePlan(tuple(Probe(fn, Path("/lib/libggml-cpu.so"), i, fn) for i, fn in enumerate(FNS)),
                 GGML, (), "x86-64", (AFTER, INSIDE))
ONE_TRAP = {AFTER.fn, INSIDE.fn, LOOP_ENTRY, "graph_begin", "graph_end", "decode_begin"}


def _request(counters: tuple[str, ...] = ("context-switches",), **options: object
             ) -> RecordRequest:
    ops = options.pop("ops", None)
    selection = Selection.parse(None, 1, ops, **options)  # type: ignore[arg-type]
    return RecordRequest(command=["llama"], selection=selection, counters=counters)


def test_by_default_the_loop_s_barriers_and_no_op_begin() -> None:
    request = _request()
    assert {p.fn for p in _probes(request, PLAN)} == ONE_TRAP
    assert traps_per_op(request, PLAN) == (
        "traps per op and thread: 1 (the graph loop's barrier calls; --exact: 2), and 1 per "
        "graph and thread (the loop's entry)")
    # No counter at all is one trap too.
    assert {p.fn for p in _probes(_request(counters=()), PLAN)} == ONE_TRAP


@pytest.mark.parametrize(("options", "because"), [
    ({"exact": True}, "--exact"), ({"aggregate": True}, "--aggregate"),
    ({"inner_waits": True}, "--inner-waits"), ({"ops": "MUL_MAT"}, "--ops"),
    ({"counters": ("instructions",)}, "--counter")])
def test_what_needs_the_op_begin_probes_it(options: dict[str, object], because: str) -> None:
    request = _request(**options)  # type: ignore[arg-type]
    assert {p.fn for p in _probes(request, PLAN)} >= {"op_begin", "fused_op_begin", INSIDE.fn}
    assert traps_per_op(request, PLAN) == (
        f"traps per op and thread: 2 (op begin and barrier: {because})")


def test_no_barriers_probes_the_op_begin_alone() -> None:
    request = _request(barriers=False)
    assert {p.fn for p in _probes(request, PLAN)} == {"op_begin", "fused_op_begin", "graph_begin",
                                                      "graph_end", "decode_begin"}
    assert traps_per_op(request, PLAN) == (
        "traps per op and thread: 1 (op begin only: --no-barriers)")


@pytest.mark.parametrize(("plan", "because"), [
    (ProbePlan(PLAN.probes, GGML, (), "x86-64", (AFTER,)), "no barrier call whose node"),
    (ProbePlan(PLAN.probes, GGML, (), "x86-64", (AFTER, INSIDE), openmp=True), "OpenMP")])
def test_a_build_without_a_known_node_at_its_barriers_is_recorded_exactly(
        plan: ProbePlan, because: str) -> None:
    request = _request()
    assert "op_begin" in {p.fn for p in _probes(request, plan)}
    assert because in traps_per_op(request, plan)
