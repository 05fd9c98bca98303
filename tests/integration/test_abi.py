"""A C struct that drifts from its numpy dtype fails BCC's compile, naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from profinfer_perfetto.capture import abi
from profinfer_perfetto.capture.events import event_dtype
from profinfer_perfetto.capture.program import RingSizes, program_text
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.session import ProbeSession
from profinfer_perfetto.errors import ProfinferError
from tests.synthetic import GGML

pytestmark = pytest.mark.root

RINGS = RingSizes(event_pages=1, node_pages=1, route_pages=1)


def _text(selection: Selection) -> str:
    return program_text(GGML, [], RINGS, selection, graph_builds=True)


def test_the_program_compiles_with_its_own_abi() -> None:
    with ProbeSession(_text(Selection(aggregate=True)), [], RINGS) as session:
        assert set(session.lost().values()) == {0}


def _swapped(dtype: np.dtype, a: str, b: str) -> np.dtype:
    """The dtype with fields a and b in each other's place."""
    names = list(dtype.names or ())
    i, j = names.index(a), names.index(b)
    names[i], names[j] = names[j], names[i]
    return np.dtype([(name, dtype[name]) for name in names])


def test_a_moved_field_fails_the_compile(capfd: pytest.CaptureFixture[str]) -> None:
    drifted = _swapped(event_dtype(0), "pid", "tid")
    text = _text(Selection()) + abi.layout_checks({"event": drifted})
    with pytest.raises(ProfinferError, match="the BPF program did not load"):
        ProbeSession(text, [], RINGS)
    err = capfd.readouterr().err
    assert "probe ABI: capture/events.py has struct event field pid at byte 28" in err
    assert "probe ABI: capture/events.py has struct event field tid at byte 24" in err
