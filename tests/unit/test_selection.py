"""What record's options select, and the combinations refused in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.analysis.target import Probe, ProbePlan
from profinfer_perfetto.capture.recorder import RecordRequest, _probes
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.errors import ProfinferError
from tests.synthetic import GGML

FNS = ("op_begin", "barrier_enter", "inner_wait_begin", "inner_wait_end", "graph_begin")
PLAN = ProbePlan(tuple(Probe(fn, Path("/lib/libggml-cpu.so"), i, fn) for i, fn in enumerate(FNS)),
                 GGML, ())


@pytest.mark.parametrize(("options", "kept"), [
    ({}, {"op_begin", "barrier_enter", "graph_begin"}),
    ({"inner_waits": True}, {"op_begin", "barrier_enter", "inner_wait_begin", "inner_wait_end",
                             "graph_begin"}),
    ({"barriers": False}, {"op_begin", "graph_begin"}),
])
def test_the_barrier_probes_each_selection_attaches(options: dict[str, bool],
                                                     kept: set[str]) -> None:
    request = RecordRequest(command=["llama"], selection=Selection.parse(None, 1, None, **options))
    assert {p.fn for p in _probes(request, PLAN)} == kept


@pytest.mark.parametrize("options", [{"aggregate": True}, {"barriers": False}])
def test_inner_waits_need_the_barrier_events(options: dict[str, bool]) -> None:
    with pytest.raises(ProfinferError, match="--inner-waits draws waits between barrier events"):
        Selection.parse(None, 1, None, inner_waits=True, **options)


@pytest.mark.parametrize(("tokens", "sample", "steps"), [
    (None, 1, range(12)),
    ("2:11", 3, [2, 5, 8]),
    (":4", 1, [0, 1, 2, 3]),
    ("9:", 2, [9, 11]),
    (None, 5, [0, 5, 10]),
])
def test_the_steps_a_selection_traces(tokens: str | None, sample: int,
                                      steps: list[int]) -> None:
    """--tokens FIRST:LAST (either may be left out) and --sample N, over steps 0 to 11: each
    chosen step is the first chosen at or after any step up to it."""
    s = Selection.parse(tokens, sample, None)
    assert [step for step in range(12) if s.selected(step)] == list(steps)
    for step in range(12):
        later = [chosen for chosen in steps if chosen >= step]
        expected = later[0] if later else None
        if expected is None and s.last == 0:  # no end: the next period's step
            expected = steps[-1] + sample
        assert s.next_selected(step) == expected, step
    assert s.gated == (tokens is not None or sample > 1)


def test_ops_and_a_tensor_name_prefix() -> None:
    s = Selection.parse(None, 1, " MUL_MAT, ROPE ,ffn_*,")
    assert (s.ops, s.name_prefix, s.filtered) == (("MUL_MAT", "ROPE"), "ffn_", True)
    assert not Selection.parse(None, 1, None).filtered
    assert Selection.parse(None, 1, "attn_*").ops == ()


@pytest.mark.parametrize(("args", "options", "said"), [
    (("a:b", 1, None), {}, "--tokens takes FIRST:LAST step numbers, not 'a:b'"),
    (("1:2:3", 1, None), {}, "--tokens takes FIRST:LAST step numbers"),
    (("5:3", 1, None), {}, "--tokens 5:3 selects no token step"),
    (("4:4", 1, None), {}, "--tokens 4:4 selects no token step"),
    (("-1:", 1, None), {}, "--tokens -1: selects no token step"),
    ((None, 0, None), {}, "--sample takes a number of steps >= 1, not 0"),
    ((None, 1, "ffn_*,attn_*"), {}, "--ops takes op names and at most one tensor-name prefix"),
    ((None, 1, "*"), {}, "--ops takes op names and at most one tensor-name prefix"),
    ((None, 1, None), {"detach": True}, "--detach goes with --tokens or --sample"),
    ((None, 1, "MUL_MAT"), {"aggregate": True}, "--aggregate counts every op"),
    ((None, 1, None), {"floor": True, "aggregate": True}, "--floor sends no op events"),
    ((None, 1, "ffn_*"), {"floor": True}, "--floor sends no op events"),
])
def test_a_selection_refused_in_one_sentence(args: tuple[str | None, int, str | None],
                                             options: dict[str, bool], said: str) -> None:
    tokens, sample, ops = args
    with pytest.raises(ProfinferError) as refused:
        Selection.parse(tokens, sample, ops, **options)
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_detach_goes_with_a_chosen_stretch_of_steps() -> None:
    assert Selection.parse("1:3", 1, None, detach=True).detach
    assert Selection.parse(None, 4, None, detach=True).detach
