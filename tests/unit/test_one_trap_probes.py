"""record --one-trap: which probes it attaches, and the options it refuses in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.analysis.loop import LoopBarrier
from profinfer_perfetto.analysis.target import Probe, ProbePlan
from profinfer_perfetto.capture.recorder import _one_trap_possible, _probes
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.errors import ProfinferError
from tests.synthetic import GGML

INSIDE = LoopBarrier(0x20, "r12", -1, "rax", False)
AFTER = LoopBarrier(0x10, None, 0, None, True)
FNS = ("op_begin", "fused_op_begin", "barrier_enter", AFTER.fn, INSIDE.fn, "graph_begin",
       "graph_end", "decode_begin")
PLAN = ProbePlan(tuple(Probe(fn, Path("/lib/libggml-cpu.so"), i, fn) for i, fn in enumerate(FNS)),
                 GGML, (), "x86-64", (AFTER, INSIDE))


def test_one_trap_attaches_the_loop_s_barriers_and_no_op_begin() -> None:
    kept = {p.fn for p in _probes(Selection.parse(None, 1, None, one_trap=True), PLAN)}
    assert kept == {AFTER.fn, INSIDE.fn, "graph_begin", "graph_end", "decode_begin"}
    assert {p.fn for p in _probes(Selection(), PLAN)} == set(FNS)


@pytest.mark.parametrize("options", [{"aggregate": True}, {"inner_waits": True},
                                     {"barriers": False}, {"ops": "MUL_MAT"}])
def test_one_trap_refuses_what_needs_the_op_begin(options: dict[str, object]) -> None:
    ops = options.pop("ops", None)
    with pytest.raises(ProfinferError, match="--one-trap has no op-begin probe"):
        Selection.parse(None, 1, ops, one_trap=True, **options)  # type: ignore[arg-type]


def test_one_trap_is_refused_where_no_barrier_says_its_node() -> None:
    selection = Selection(one_trap=True)
    _one_trap_possible(selection, PLAN)
    with pytest.raises(ProfinferError, match="--one-trap needs a call of ggml_barrier"):
        _one_trap_possible(selection, ProbePlan(PLAN.probes, GGML, (), "x86-64", (AFTER,)))
