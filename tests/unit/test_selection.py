"""What record's options select, and the combinations refused in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.analysis.target import Probe, ProbePlan
from profinfer_perfetto.capture.recorder import _probes
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
    assert {p.fn for p in _probes(Selection.parse(None, 1, None, **options), PLAN)} == kept


@pytest.mark.parametrize("options", [{"aggregate": True}, {"barriers": False}])
def test_inner_waits_need_the_barrier_events(options: dict[str, bool]) -> None:
    with pytest.raises(ProfinferError, match="--inner-waits draws waits between barrier events"):
        Selection.parse(None, 1, None, inner_waits=True, **options)
