"""The compiled renderer (encode/render.c) writes the same bytes as the numpy one (a piece at a
time, and whole traces: one layout, and a run streamed in chunks whose tables start over), and
the encoder falls back to numpy where the library is absent."""

from __future__ import annotations

import dataclasses
import io
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profinfer_perfetto.encode import native, perfetto
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.encode.stream import TraceStream
from profinfer_perfetto.encode.wire import Pieces
from profinfer_perfetto.model import layout
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from tests import synthetic

SOURCE = Path(native.__file__).with_name("render.c")


@pytest.fixture(scope="module")
def renderer(wheel_library: Callable[[str], Path]) -> native.Renderer:
    """render.c as the package's wheel carries it (built by scripts/hatch_build.py)."""
    loaded = native.load(wheel_library("profinfer_perfetto/encode/_render.so"))
    assert loaded is not None
    return loaded


def _trace() -> bytes:
    out = io.BytesIO()
    write_perfetto(build_layout(build(synthetic.recording())), out)
    return out.getvalue()


def _streamed(path: Path) -> bytes:
    """A run written in chunks as it is captured, its tables starting over every few."""
    rec = synthetic.decode_run(3, steps=30)
    stream = TraceStream(path)
    for drained in synthetic.drains(rec, 12):
        assert stream(drained, dataclasses.replace(rec.run, status="running")) is None
    stream.finish(rec)
    assert stream.tables.generation > 1
    return path.read_bytes()


def _pieces() -> Pieces:
    """Rows with pieces on all of them, on some, of one length for all, and long blobs."""
    rng = np.random.default_rng(1)
    rows = 300
    p = Pieces(rows)
    p.varint(b"\x08", rng.integers(0, 2**40, rows))
    some = np.flatnonzero(rng.random(rows) < 0.4)
    p.varint(b"\x10", rng.integers(-5, 5, len(some)), some)
    p.constant(b"abc", some[::2], front=True)
    blobs = rng.integers(0, 256, 5000).astype(np.uint8)
    size = rng.integers(0, 60, rows)
    p.add(blobs, rng.integers(0, 5000 - 60, rows), size)
    return p


@pytest.mark.parametrize("chunk_rows", [perfetto.CHUNK_ROWS, 3])
def test_both_renderers_write_the_same_trace(renderer: native.Renderer, chunk_rows: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perfetto, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(native, "RENDERER", None)
    by_numpy, pieces_by_numpy = _trace(), _pieces().render()
    monkeypatch.setattr(native, "RENDERER", renderer)
    compiled, pieces_compiled = _trace(), _pieces().render()
    assert compiled == by_numpy
    for a, b in zip(pieces_compiled, pieces_by_numpy, strict=True):
        assert np.array_equal(a, b)


def test_both_renderers_write_the_same_streamed_trace(renderer: native.Renderer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk's packets go on with its sequences' clocks and numbered descriptions."""
    monkeypatch.setattr(layout, "MAX_TABLE", 40)
    monkeypatch.setattr(native, "RENDERER", None)
    by_numpy = _streamed(tmp_path / "numpy.pftrace")
    monkeypatch.setattr(native, "RENDERER", renderer)
    assert _streamed(tmp_path / "compiled.pftrace") == by_numpy


def test_a_missing_or_other_library_leaves_numpy_to_render(tmp_path: Path) -> None:
    assert native.load(tmp_path / "_render.so") is None
    (tmp_path / "not-a-library.so").write_bytes(b"not an ELF file")
    assert native.load(tmp_path / "not-a-library.so") is None
    older = tmp_path / "older.c"  # a render.c of another version, not rebuilt since
    older.write_text(SOURCE.read_text().replace(f"return {native.ABI};", "return 0;"))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "older.so"), str(older)],
                   check=True)
    assert native.load(tmp_path / "older.so") is None


def test_a_piece_past_its_source_is_refused(renderer: native.Renderer) -> None:
    out, free = np.zeros(8, np.uint8), np.zeros(2, np.int64)
    with pytest.raises(AssertionError):
        renderer.piece(out, free, np.arange(4, dtype=np.uint8), None,
                       np.array([0, 2]), np.array([2, 3]))
    with pytest.raises(AssertionError):
        renderer.piece(out, np.array([0, 7]), np.arange(4, dtype=np.uint8), None,
                       np.array([0, 0]), np.array([2, 2]))


def _tables(**changed: Any) -> native.Tables:
    """One row's tables, a slice begin on its sequence's default track, with `changed`."""
    one, zero = np.ones(1, np.int64), np.zeros(1, np.int64)
    empty: native.Strings = (np.zeros(0, np.uint8), zero, zero)
    none = np.zeros((1, 0), np.int64)
    tables = native.Tables(perfetto._TAGS, [], 4, one, zero, zero - 1, zero - 1, one, zero * 1.0,
                           empty, np.zeros((0, 3), np.int64), none, none, none, none.astype(bool),
                           zero, one,
                           np.zeros(1, bool), (np.frombuffer(b"PQ", np.uint8), zero, one + 1),
                           zero, (np.zeros(0, np.uint8), zero[:0], zero[:0]))
    return dataclasses.replace(tables, **changed)


def test_an_entry_past_its_table_is_refused(renderer: native.Renderer) -> None:
    one = np.ones(1, np.int64)
    row = np.zeros(1, np.int64)
    past = (np.zeros(4, np.uint8), one, one + 3)
    event = perfetto._TYPE + b"\x01"
    assert renderer.events(_tables()).render(row) == (
        perfetto._PACKET + b"\x08PQ" + perfetto._TRACK_EVENT + b"\x02" + event
        + perfetto._TIMESTAMP + b"\x01")
    for bad in ({"desc": past}, {"head": past}, {"track": one}, {"args": one}):
        with pytest.raises(AssertionError):
            renderer.events(_tables(**bad)).render(row)
    with pytest.raises(AssertionError):
        renderer.events(_tables()).render(row + 1)
    with pytest.raises(AssertionError):  # rows that one table has and another not
        renderer.events(_tables(ts=np.ones(2, np.int64)))


def test_both_pick_the_same_counter_samples(renderer: native.Renderer) -> None:
    """A sample is written where it is not 0 and its track's sample before (in row order, each
    column apart) differs or there is none."""
    rng = np.random.default_rng(2)
    track = rng.integers(-1, 4, (500, 3))
    value = rng.integers(0, 3, (500, 3))
    assert np.array_equal(renderer.changes(track, value, 4), perfetto._changes(track, value))
    with pytest.raises(AssertionError):
        renderer.changes(track, value, 3)


def test_both_order_the_flows_of_a_row_by_id(renderer: native.Renderer) -> None:
    rng = np.random.default_rng(3)
    ids, at = rng.integers(0, 16, 300), rng.integers(0, 40, 300)
    end, ordered = renderer.flows(ids, at, 50)
    order = np.lexsort((ids, at))
    assert np.array_equal(ordered, ids[order])
    assert np.array_equal(end, np.searchsorted(at[order], np.arange(50), side="right"))
    with pytest.raises(AssertionError):
        renderer.flows(ids, at, 39)
