"""The model's compiled passes (model/passes.c) give what their numpy twins give, and the model
falls back to numpy where the library is absent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.events import NODE
from profinfer_perfetto.model import native, trace_model
from profinfer_perfetto.model.trace_model import build
from tests import synthetic


@pytest.fixture(scope="module")
def passes(wheel_library: Callable[[str], Path]) -> native.Passes:
    """passes.c as the package's wheel carries it (built by scripts/hatch_build.py)."""
    loaded = native.load(wheel_library("profinfer_perfetto/model/_passes.so"))
    assert loaded is not None
    return loaded


def _nodes(seed: int, n: int) -> np.ndarray:
    """Nodes whose tensors and sources share a few addresses: views, empty slots, in-place ops
    (a node that reads its own storage), storages written again and again."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(1, 2**47, 12).astype(np.uint64)

    def addresses(shape: tuple[int, ...], empty: float) -> np.ndarray:
        picked = pool[rng.integers(0, len(pool), shape)]
        return np.where(rng.random(shape) < empty, np.uint64(0), picked)

    nodes = np.zeros(n, NODE)
    nodes["ptr"] = addresses((n,), 0.0)
    nodes["view_src"] = addresses((n,), 0.7)
    slots = nodes["src"].shape[1]
    nodes["src"]["ptr"] = addresses((n, slots), 0.5)
    nodes["src"]["view_src"] = addresses((n, slots), 0.7)
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_both_find_the_same_producers(passes: native.Passes, seed: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes(seed, int(np.random.default_rng(seed).integers(0, 300)))
    monkeypatch.setattr(native, "PASSES", None)
    by_numpy = trace_model._producers(nodes)
    compiled = passes.last_writers(nodes)
    for a, b in zip(compiled, by_numpy, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_both_give_the_same_model(passes: native.Passes, monkeypatch: pytest.MonkeyPatch
                                  ) -> None:
    recordings = [synthetic.recording(), synthetic.decode_run(3, steps=12)]
    monkeypatch.setattr(native, "PASSES", None)
    by_numpy = [build(r).edges for r in recordings]
    monkeypatch.setattr(native, "PASSES", passes)
    for recording, edges in zip(recordings, by_numpy, strict=True):
        assert len(edges) and np.array_equal(build(recording).edges, edges)


def test_a_missing_library_leaves_numpy_to_model(tmp_path: Path) -> None:
    assert native.load(tmp_path / "_passes.so") is None
