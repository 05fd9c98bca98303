"""A run written after it ended in units by worker processes (encode/units.py) is the same trace
as the run written in one sequence: every metric and every counter sample answers the same, on
both engines; how many workers wrote it does not change a byte."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.events import Kind
from profinfer_perfetto.capture.run import Recording, Records
from profinfer_perfetto.encode import units
from profinfer_perfetto.encode.stream import TraceStream, part_path, write_trace
from profinfer_perfetto.encode.units import UnitsWritten
from profinfer_perfetto.model.chunks import Chunk, Chunker
from profinfer_perfetto.model.trace_model import Continuation
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.metrics import canned
from profinfer_perfetto.query.session import TraceQuery
from tests import synthetic

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ENGINES = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
UNIT_EVENTS = 400
"""Units of a few token steps each: the synthetic run takes ten or so."""
COUNTER_SAMPLES = """
select t.name, c.ts, cast(c.value as int) from counter c join counter_track t on c.track_id = t.id
order by t.name, c.ts"""


def _counting(rec: Recording, seed: int = 7) -> Recording:
    """The run with each thread's context switches counted up as it goes (the synthetic run's
    count none), so that its counter tracks' running totals cross the units."""
    rng = np.random.default_rng(seed)
    events = rec.events.copy()
    for tid in np.unique(events["tid"]).tolist():
        mine = np.flatnonzero(events["tid"] == tid)
        mine = mine[np.argsort(events["ts"][mine], kind="stable")]
        events["counter"][mine, 0] = np.cumsum(rng.integers(0, 3, len(mine)))
    rec.events = events
    return rec


def _write(rec: Recording, out: Path, workers: int) -> TraceStream | UnitsWritten:
    return write_trace(out, synthetic.drains(rec, 40), rec, workers=workers,
                       unit_events=UNIT_EVENTS)


@pytest.fixture(scope="module")
def counting() -> Recording:
    return _counting(synthetic.decode_run(3, steps=30))


@pytest.mark.parametrize("engine", ENGINES)
def test_units_answer_as_one_sequence(tmp_path: Path, engine: str, counting: Recording) -> None:
    """Every canned metric and every sample of the threads' counter tracks (running totals over
    the units before) are the same as the run's written in one sequence."""
    one = _write(counting, tmp_path / "one.pftrace", workers=0)
    units = _write(counting, tmp_path / "units.pftrace", workers=2)
    assert isinstance(one, TraceStream) and isinstance(units, UnitsWritten)
    assert units.totals.events == one.totals.events == len(counting.events)
    choice = EngineChoice(engine)
    with (TraceQuery(one.files[0], choice) as a, TraceQuery(units.files[0], choice) as b):
        for name in canned():
            assert a.metric(name) == b.metric(name), name
        samples = a.sql(COUNTER_SAMPLES)
        assert samples.rows and max(row[2] for row in samples.rows) > 100
        assert samples == b.sql(COUNTER_SAMPLES)


def test_the_workers_do_not_change_a_byte(tmp_path: Path, counting: Recording) -> None:
    """Units are numbered by the parent, not by whichever worker takes them."""
    two = _write(counting, tmp_path / "two.pftrace", workers=2).files[0]
    three = _write(counting, tmp_path / "three.pftrace", workers=3).files[0]
    assert two.read_bytes() == three.read_bytes()


def test_a_run_of_one_unit_is_written_in_one_sequence(tmp_path: Path) -> None:
    """Below two units the workers would only cost their start: the trace is the pipelined
    write's, byte for byte (what a follower writes, encode/follow.py)."""
    rec = synthetic.decode_run(3, steps=3)
    assert len(rec.events) < 2 * UNIT_EVENTS
    written = _write(rec, tmp_path / "short.pftrace", workers=2)
    assert isinstance(written, TraceStream)
    alone = _write(rec, tmp_path / "alone.pftrace", workers=0)
    assert written.files[0].read_bytes() == alone.files[0].read_bytes()


def test_a_worker_that_dies_fails_the_write_whole(
        tmp_path: Path, counting: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that dies (here at once, with status 3) fails the write in one sentence, leaves
    no worker behind and no trace passed off as whole (the records stay for `recover`)."""
    started: list[units._Worker] = []

    def dying(size: int) -> list[units._Worker]:
        context = multiprocessing.get_context("forkserver")
        for _ in range(size):
            ours, theirs = context.Pipe()
            process = context.Process(target=sys.exit, args=(3,), daemon=True)
            process.start()
            theirs.close()
            started.append(units._Worker(process, ours))
        return started

    monkeypatch.setattr(units, "_start", dying)
    out = tmp_path / "died.pftrace"
    with pytest.raises(units.WorkerFailed, match="died"):
        _write(counting, out, workers=2)
    assert started and not any(w.process.is_alive() for w in started)
    assert not out.exists() and not part_path(out).exists()


def test_a_unit_reaches_its_worker_whole_and_writable(counting: Recording) -> None:
    """Its records out of band (send_unit): the same bytes, arrays the model may write into,
    empty ones (a run without routes) too."""
    chunker = Chunker(len(counting.run.counters))
    chunks = [c for d in synthetic.drains(counting, 40) if (c := chunker.add(d)) is not None]
    unit = units.Unit(3, chunks, counting.run, Continuation(first_step=5))
    ours, theirs = multiprocessing.Pipe()
    sender = threading.Thread(target=units.send_unit, args=(ours, unit))
    sender.start()  # the pipe holds less than the unit: read it while it is sent
    got = units.received_unit(theirs)
    sender.join()
    assert got is not None and (got.index, got.run, got.cont) == (3, unit.run, unit.cont)
    assert len(got.chunks) == len(chunks) > 1 and not len(chunks[0].routes)
    for mine, theirs_chunk in zip(chunks, got.chunks, strict=True):
        assert theirs_chunk.end_ns == mine.end_ns
        for name in ("events", "nodes", "routes", "batches", "sched"):
            sent, came = getattr(mine, name), getattr(theirs_chunk, name)
            assert came.dtype == sent.dtype and came.tobytes() == sent.tobytes()
            assert came.flags.writeable
    ours.send(None)
    assert units.received_unit(theirs) is None


def test_the_forkserver_alone_refuses_the_blas_pool() -> None:
    """worker_env, which the forkserver imports first, leaves a process that then imports numpy
    with one thread (no OpenBLAS pool); the recorder, which imports units, keeps its own
    environment (a target it starts inherits it)."""
    code = ("import os, {0}, numpy; print(len(os.listdir('/proc/self/task')), "
            "os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def said(module: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", code.format(module)], env=env, check=True,
                              capture_output=True, text=True).stdout.split()

    units._context()  # the forkserver's preload: worker_env first, before numpy
    preload = multiprocessing.forkserver._forkserver._preload_modules  # type: ignore[attr-defined]
    assert preload[0] == units._WORKER_ENV
    assert said(units._WORKER_ENV) == ["1", "1"]
    assert said(units.__name__)[1] == "None"


@pytest.mark.parametrize("kind", [None, Kind.VK_NODE, Kind.BLAS_NODE, Kind.HOST_CALL_BEGIN])
def test_a_chunk_with_another_backends_records_is_not_countable(kind: Kind | None) -> None:
    """The CPU backend's chunk is; one record of a split's copies anywhere in it is not."""
    rec = synthetic.decode_run(2, steps=2)
    chunk = Chunk(**vars(Records(rec.events.copy(), rec.nodes, rec.routes, rec.batches,
                                 rec.sched)), end_ns=rec.run.end_ns)
    if kind is not None:
        chunk.events["kind"][len(chunk.events) // 2] = kind
    assert units.countable(rec.run, chunk) == (kind is None)
