"""The model's compiled passes (model/passes.c) and their numpy twins make the same trace of a
real run, recorded with one trap per op and with both: its graphs, threads, fused pairs and loop
entries are a real build's, which the unit tests' synthetic runs only sketch."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model import native
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


@pytest.mark.parametrize("exact", [False, True])
def test_both_write_the_same_trace_of_a_real_run(llama: Callable[..., Path],
                                                 model: Callable[[str], Path], exact: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    request = RecordRequest(command=completion(llama, model("tiny-llama"), 2, n=16),
                            selection=Selection(exact=exact))
    rec = record(request, plan(request))
    compiled = native.PASSES
    assert compiled is not None, "the install builds passes.c (scripts/hatch_build.py)"
    traces = []
    for passes in (compiled, None):
        monkeypatch.setattr(native, "PASSES", passes)
        modelled = build(rec)
        out = io.BytesIO()
        write_perfetto(build_layout(modelled), out)
        traces.append(out.getvalue())
    assert np.count_nonzero(modelled.ops.fused >= 0) > 0 and len(modelled.edges)
    assert traces[0] == traces[1]
