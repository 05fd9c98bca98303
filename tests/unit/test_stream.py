"""A run written in chunks as it is captured (encode/stream.py) is the same trace as the run
written whole: every metric answers the same, on both engines."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture.events import SCHED, SchedKind
from profinfer_perfetto.capture.run import Recording, Task
from profinfer_perfetto.capture.spill import (
    INDEX_FILE,
    RUN_FILE,
    Spill,
    left_run,
    read_drains,
    spill_path,
)
from profinfer_perfetto.commands.recover import RECOVERED, RecoverCommand
from profinfer_perfetto.encode import stream as stream_module
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.encode.stream import Rotation, TraceStream, part_path, write_trace
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.model import layout
from profinfer_perfetto.model.chunks import Chunker
from profinfer_perfetto.model.layout import Layout, Tables, build_layout
from profinfer_perfetto.model.trace_model import TraceModel, build
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.metrics import canned
from profinfer_perfetto.query.session import TraceQuery
from tests import synthetic

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ENGINES = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
SMALL_TABLE = 40
"""A MAX_TABLE that the synthetic runs pass every few chunks."""



def _streamed(rec: Recording, out: Path, drains: int) -> TraceStream:
    stream = TraceStream(out)
    for drained in synthetic.drains(rec, drains):
        assert stream(drained, replace(rec.run, status="running")) is None
    stream.finish(rec)
    return stream


def _whole(rec: Recording, out: Path) -> Path:
    with out.open("wb") as f:
        write_perfetto(build_layout(build(rec)), f)
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("max_table", [layout.MAX_TABLE, SMALL_TABLE])
def test_every_metric_answers_as_for_the_whole_run(
        tmp_path: Path, engine: str, max_table: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks go on with the sequences of the chunks before, interning only what is new; with
    a small MAX_TABLE the tables start over every few chunks, and every sequence with them."""
    monkeypatch.setattr(layout, "MAX_TABLE", max_table)
    rec = synthetic.decode_run(3, steps=30)
    stream = _streamed(rec, tmp_path / "streamed.pftrace", drains=12)
    assert stream.cont.first_step > 1, "it was written in several chunks"
    assert (stream.tables.generation > 1) == (max_table == SMALL_TABLE)
    whole = _whole(rec, tmp_path / "whole.pftrace")
    choice = EngineChoice(engine)
    with TraceQuery(whole, choice) as a, TraceQuery(tmp_path / "streamed.pftrace", choice) as b:
        for name in canned():
            assert a.metric(name) == b.metric(name), name
    assert not part_path(tmp_path / "streamed.pftrace").exists()


def test_a_chunk_never_splits_a_step(tmp_path: Path) -> None:
    """Each chunk ends just before a token step begins: its steps are whole."""
    rec = synthetic.decode_run(4, steps=20)
    stream = _streamed(rec, tmp_path / "s.pftrace", drains=40)
    totals = stream.totals
    assert sum(totals.steps.values()) == 21 and totals.graphs == 21
    assert totals.ops == len(build(rec).ops)


def test_a_step_longer_than_a_drain_makes_no_empty_chunk() -> None:
    """A step that is still running at several drains is cut before once: the drains that
    follow, until a later step begins, make no chunk of nothing."""
    rec = synthetic.decode_run(4, steps=10)
    chunker = Chunker(1)
    chunks = [c for d in synthetic.drains(rec, 200) if (c := chunker.add(d)) is not None]
    chunks.append(chunker.finish(int(rec.events["ts"].max()) + 1))
    assert all(len(c.events) for c in chunks)
    assert sum(len(c.events) for c in chunks) == len(rec.events)
    assert len(chunks) <= 11, "at most one chunk per step"


def test_the_tables_grow_with_what_nodes_say_not_how_often_they_are_described(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step describes its nodes again (the probes send a descriptor whenever a tensor
    is built anew, as a server's batches do): the tables hold one description per distinct
    content (the prefill's shapes and the decode's: two per node), however many steps, and
    do not fill up with them (984 descriptors here)."""
    monkeypatch.setattr(layout, "MAX_TABLE", 400)
    tables = Tables()
    for steps in (5, 40, 40):
        build_layout(build(synthetic.decode_run(4, steps=steps)), tables)
        assert len(tables.contents) == 2 * 6 * len(synthetic.LAYER_OPS)
    assert tables.generation == 0


def test_the_tables_do_not_grow_with_the_steps() -> None:
    """A step's, a graph's and a sequence slice's numbers are row args (Layout.row_args), not
    arg sets of their own: 40 steps intern what 5 do; the trace still says every number."""
    held = []
    for steps in (5, 40):
        tables = Tables()
        laid = build_layout(build(synthetic.decode_run(4, steps=steps)), tables)
        held.append((len(tables.strings), len(tables.arg_sets)))
        numbers = {a.key: sorted(a.values.tolist()) for a in laid.row_args if a.key == "step"}
        assert numbers == {"step": list(range(steps + 1))}
    assert held[0] == held[1]

def test_a_trace_cut_while_written_reads_up_to_its_last_whole_packet(tmp_path: Path) -> None:
    """A recorder killed mid-write leaves OUTPUT.part ending in a partial packet: queries read
    the whole packets before it, say so, and answer as trace_processor reads the file."""
    rec = synthetic.decode_run(5, steps=20)
    _streamed(rec, tmp_path / "run.pftrace", drains=10)
    data = (tmp_path / "run.pftrace").read_bytes()
    part = tmp_path / "run.pftrace.part"
    part.write_bytes(data[:len(data) - 100])
    answers = []
    for engine in ENGINES:
        with TraceQuery(part, EngineChoice(engine)) as q:
            answers.append(q.metric("token_steps"))
            assert "cut short" in q.how, engine
    assert 0 < len(answers[0].rows) <= 21
    assert all(a == answers[0] for a in answers)
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[:len(data) - 100])
    with pytest.raises(ProfinferError, match="is cut short"):
        TraceQuery(cut, EngineChoice("builtin"))


def _with_sched(rec: Recording) -> Recording:
    """The run recorded with --sched on CPU 0: a switch every 1,000 ns, to a task new every
    ten switches (so later chunks name tasks the earlier ones did not)."""
    ts = np.arange(int(rec.events["ts"].min()), int(rec.events["ts"].max()), 1_000)
    tids = 1_000 + np.arange(len(ts)) // 10
    sched = np.zeros(len(ts), SCHED)
    sched["ts"], sched["kind"], sched["tid"] = ts, SchedKind.SWITCH, tids
    sched["prev_tid"] = np.append(0, tids[:-1])
    sched["comm"] = [b"task-%d" % tid for tid in tids.tolist()]
    tasks = {tid: Task(tid, f"task-{tid}") for tid in tids.tolist()}
    run = replace(rec.run, sched_cpus=[0], kernel=("Linux", "6.18", "#1", "x86_64"),
                  sched_tasks=tasks, sched_programs={tid: "/bin/task" for tid in tasks})
    return replace(rec, sched=sched, run=run)


def _stream_files(rec: Recording, out: Path, rotation: Rotation | None,
                  monkeypatch: pytest.MonkeyPatch, writer_behind: bool) -> list[bytes]:
    """The bytes of the streamed run's files: on one thread, or (`writer_behind`) pipelined
    with each chunk laid out only once the modeller has filled the queue between them (or
    stopped)."""
    streams: list[TraceStream] = []

    def held(model: TraceModel, tables: Tables | None = None) -> Layout:
        stream = streams[0]
        while (writer_behind and stream.models is not None
               and not (stream.models.full() or not stream.modeller.is_alive())):
            time.sleep(0.001)
        return build_layout(model, tables)

    monkeypatch.setattr(stream_module, "build_layout", held)
    streams.append(TraceStream(out, rotation, pipelined=writer_behind))
    for drained in synthetic.drains(rec, 15):
        assert streams[0](drained, replace(rec.run, status="running")) is None
    streams[0].finish(rec)
    assert len(streams[0].tasks) > 10, "later chunks named tasks of their own"
    return [path.read_bytes() for path in streams[0].files]


@pytest.mark.parametrize("rotation", [None, Rotation(max_bytes=4096)])
def test_a_writer_thread_behind_the_modeller_writes_the_bytes_of_one_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rotation: Rotation | None) -> None:
    """Pipelined, the modeller models the chunks after the one the writer writes: held back
    each time until the modeller is QUEUED_MODELS chunks ahead, the writer writes the same
    files as one thread, byte for byte (each file's scheduling naming the tasks known up to
    its first chunk, each rotation's closing chunk going on from the chunk before it)."""
    rec = _with_sched(synthetic.decode_run(6, steps=30))
    (tmp_path / "one").mkdir()
    (tmp_path / "behind").mkdir()
    one = _stream_files(rec, tmp_path / "one/run.pftrace", rotation, monkeypatch, False)
    behind = _stream_files(rec, tmp_path / "behind/run.pftrace", rotation, monkeypatch, True)
    assert behind == one and (len(one) > 2) == (rotation is not None)


def test_rotation_makes_whole_files_and_keeps_the_newest(tmp_path: Path) -> None:
    """With a size limit each file is a whole trace (descriptors, a `record` slice saying where
    the run goes on), together holding every step once; --rotate keeps the newest."""
    rec = synthetic.decode_run(6, steps=30)
    out = tmp_path / "run.pftrace"
    stream = TraceStream(out, Rotation(max_bytes=4096))
    for drained in synthetic.drains(rec, 15):
        stream(drained, replace(rec.run, status="running"))
    stream.finish(rec)
    files = sorted(tmp_path.glob("run.*.pftrace"))
    assert files == stream.files and len(files) > 2
    steps = []
    for i, path in enumerate(files):
        with TraceQuery(path, EngineChoice(ENGINES[-1])) as q:
            steps += [row[0] for row in q.metric("token_steps").rows]
            status = q.recording_args()["status"]
        assert status == ("complete" if i == len(files) - 1
                          else f"continued in {files[i + 1].name}"), path
    assert steps == list(range(31))
    kept = TraceStream(tmp_path / "kept.pftrace", Rotation(max_bytes=4096, keep=2))
    for drained in synthetic.drains(rec, 15):
        kept(drained, replace(rec.run, status="running"))
    kept.finish(rec)
    assert sorted(tmp_path.glob("kept.*.pftrace")) == kept.files and len(kept.files) == 2


def test_the_records_kept_on_disk_come_back_drain_by_drain(tmp_path: Path) -> None:
    """record's default keeps each drain's records in files (capture/spill.py) and reads them
    back once the run ends: the same drains, record for record, and the folder is gone after."""
    rec = synthetic.decode_run(3, steps=10)
    drains = synthetic.drains(rec, 7)
    spill = Spill(spill_path(tmp_path / "run.pftrace"), len(rec.run.counters))
    for drained in drains:
        assert spill(drained, rec.run) is None
    assert spill.finish() is None
    back = list(spill.drains())
    assert len(back) == len(drains)
    for got, sent in zip(back, drains, strict=True):
        for name in spill.dtypes:
            assert getattr(got, name).tobytes() == getattr(sent, name).tobytes(), name
    spill.remove()
    assert not list(tmp_path.iterdir())


def test_a_killed_recorders_records_are_recovered_up_to_the_last_whole_drain(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorder killed while it appends a drain leaves part of it in a kind's file and part of
    its index row: `recover` reads the run as it was known and the drains written whole, writes
    their trace (the same as the run written from those drains) and removes the folder; a new
    record to that output refuses to remove them."""
    rec = synthetic.decode_run(3, steps=10)
    output = tmp_path / "run.pftrace"
    drains = synthetic.drains(rec, 7)
    spill = Spill(spill_path(output), len(rec.run.counters))
    for drained in drains[:5]:
        assert spill(drained, rec.run) is None
    assert spill.finish() is None
    spill.close()  # the kill lets the recorder's lock go
    folder = spill.folder
    with (folder / "events.bin").open("ab") as f:  # the kill, half-way through drain 6
        f.write(drains[5].events.tobytes()[:100])
    with (folder / INDEX_FILE).open("ab") as f:
        f.write(np.int64(len(drains[5].events)).tobytes())

    assert left_run(folder) == rec.run
    back = list(read_drains(folder, spill.dtypes))
    assert [d.events.tobytes() for d in back] == [d.events.tobytes() for d in drains[:5]]
    with pytest.raises(ProfinferError, match=r"recover run\.pftrace"):
        Spill(folder, len(rec.run.counters))

    assert RecoverCommand(output).run() == 0
    assert not folder.exists()
    assert f"recorded {rec.run.process_name} (pid {rec.run.pid}): {RECOVERED}" in (
        capsys.readouterr().out)
    killed = replace(rec, run=replace(rec.run, status=RECOVERED))  # marks the trace cut short
    expected = write_trace(tmp_path / "expected.pftrace", drains[:5], killed)
    for engine in ENGINES:
        choice = EngineChoice(engine)
        with TraceQuery(output, choice) as got, TraceQuery(expected.files[0], choice) as want:
            query = "SELECT name, COUNT(*), SUM(dur) FROM slice WHERE name != 'record' GROUP BY 1"
            assert sorted(got.sql(query).rows) == sorted(want.sql(query).rows), engine


def test_recover_says_what_is_wrong_in_one_sentence(tmp_path: Path) -> None:
    output = tmp_path / "run.pftrace"
    with pytest.raises(ProfinferError, match="does not exist"):
        RecoverCommand(output).run()
    spill_path(output).mkdir()
    with pytest.raises(ProfinferError, match="no drain written whole"):
        RecoverCommand(output).run()
    (spill_path(output) / RUN_FILE).write_text('{"format": 1, "run": {"pid": "x"}}')
    with pytest.raises(ProfinferError, match="is not a run this version"):
        RecoverCommand(output).run()

    rec = synthetic.decode_run(3, steps=4)
    shutil.rmtree(spill_path(output))
    spill = Spill(spill_path(output), len(rec.run.counters))
    for drained in synthetic.drains(rec, 3):
        spill(drained, rec.run)
    spill.finish()
    spill.close()
    os.truncate(spill.folder / "events.bin", 64)
    with pytest.raises(ProfinferError, match="holds fewer records than"):
        RecoverCommand(output).run()
    assert not output.exists() and not part_path(output).exists()
