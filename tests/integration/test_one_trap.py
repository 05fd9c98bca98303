"""Ops derived from one trap per op on a real recording: a run recorded with both traps, its
model built as recorded and from its barriers alone (model/one_trap.py), has the same ops."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.model.one_trap import as_one_trap
from profinfer_perfetto.model.trace_model import build
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


def test_derived_ops_are_the_recorded_ones(llama: Callable[..., Path],
                                           model: Callable[[str], Path]) -> None:
    request = RecordRequest(command=completion(llama, model("tiny-llama"), 2, n=8),
                            selection=Selection(exact=True))
    rec = record(request, plan(request))
    exact, derived = build(rec), build(as_one_trap(rec))
    assert np.array_equal(exact.nodes.ptr, derived.nodes.ptr)
    assert np.array_equal(exact.nodes.graph, derived.nodes.graph)
    e = np.lexsort((exact.ops.node, exact.ops.tid))
    d = np.lexsort((derived.ops.node, derived.ops.tid))
    for column in ("tid", "node", "fused", "ith", "work_end"):
        assert np.array_equal(getattr(exact.ops, column)[e], getattr(derived.ops, column)[d])
    # A thread leaves a barrier after its last arrival (the release), then begins its op.
    assert (derived.ops.begin[d] <= exact.ops.begin[e]).all()
    assert (derived.ops.end[d] <= exact.ops.end[e]).all()
    assert np.count_nonzero(derived.ops.fused >= 0) > 0
