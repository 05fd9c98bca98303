"""record's Perfetto trace, written while the capture runs.

The run is cut into chunks (model/chunks.py), each modelled, laid out and written as soon as it
is complete, continuing the numbering of the ones before (model Continuation) on packet
sequences of its own (encode/perfetto.Written): the file grows by whole chunks, every one of
them readable with the ones before it, and the recorder holds one chunk's records at a time.
The trace grows as OUTPUT.part, which becomes OUTPUT when the run ends: a recorder that is
killed leaves OUTPUT.part, a trace of the run up to its last chunk or so (a chunk cut short by
the kill is a last packet that queries and trace_processor leave out). A write that fails (a
full disk) ends the capture: the file keeps the chunks written whole.

With a size limit the run goes to a series of files, NAME.000.pftrace, NAME.001.pftrace, ...:
once a file reaches the limit it is closed whole (its own track descriptors, scheduling
preamble and a `record` slice saying where the run continues) and the next one begins; only the
newest `keep` files are kept.
"""

from __future__ import annotations

import io
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from profinfer_perfetto.capture.run import Drained, Recording, Records, Run, Task
from profinfer_perfetto.capture.spill import write_all
from profinfer_perfetto.encode import units
from profinfer_perfetto.encode.output import PART_SUFFIX
from profinfer_perfetto.encode.perfetto import Written, write_perfetto
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.files import create_new
from profinfer_perfetto.model.chunks import Chunk, Chunker, model_chunk
from profinfer_perfetto.model.layout import Tables, build_layout
from profinfer_perfetto.model.totals import RunTotals
from profinfer_perfetto.model.trace_model import Continuation, TraceModel

T = TypeVar("T")

QUEUED_DRAINS = 20
"""Drains (of 100 ms each) that may wait for the modeller."""
QUEUED_MODELS = 2
"""Modelled chunks that may wait for the writer."""


def part_path(output: Path) -> Path:
    """Where a streamed trace grows until it is whole."""
    return output.with_name(output.name + PART_SUFFIX)


class _Part:
    """A trace file growing as PATH.part by whole pieces, which takes PATH's name once whole."""

    def __init__(self, path: Path, fd: int) -> None:
        """`fd`: PATH.part, created new."""
        self.path, self.part, self.fd = path, part_path(path), fd
        self.size = 0

    def append(self, data: memoryview) -> str | None:
        """Append `data` whole, or nothing of it: why not (a full disk), if so."""
        try:
            write_all(self.fd, data)
        except OSError as exc:
            os.ftruncate(self.fd, self.size)  # the pieces written whole stay
            return f"writing {self.part} failed ({exc.strerror})"
        self.size += len(data)
        return None

    def close(self) -> None:
        """It is whole: it takes its name."""
        os.close(self.fd)
        os.replace(self.part, self.path)

    def abandon(self) -> None:
        """Keep what was written (as PATH.part), or nothing."""
        os.close(self.fd)
        if self.size == 0:
            self.part.unlink(missing_ok=True)


@dataclass(frozen=True)
class Rotation:
    """--max-size / --rotate: a series of files of about `max_bytes` each, the newest `keep`
    (0: all) kept."""

    max_bytes: int
    keep: int = 0

    def path(self, output: Path, index: int) -> Path:
        return output.with_name(f"{output.stem}.{index:03d}{output.suffix}")


@dataclass(frozen=True)
class _Modelled:
    """A chunk's model, on its way from the modeller to the writer: with the run as the drain
    that completed it knew it, and the tasks and programs known up to it (what a new file's
    scheduling names)."""

    model: TraceModel
    run: Run
    tasks: dict[int, Task]
    programs: dict[int, str]


class TraceStream:
    """A sink for record(): writes each chunk of the run as it completes.

    The modeller, a thread of its own, cuts the drains into chunks and models each (model/),
    then lays each model out, encodes and appends it (encode/); so the recorder drains the
    rings on time however long a chunk takes. At most QUEUED_DRAINS wait for the modeller (then
    the recorder waits, and a ring that fills meanwhile says what it lost).

    `pipelined`: a second thread, the writer, lays out, encodes and appends while the modeller
    models the next chunks (at most QUEUED_MODELS ahead): for a run that has ended (its cores
    are free), the wall time of one thread's 72-86 %; but the two threads contend for the GIL
    (numpy lets go of it in its loops), which costs CPU: 4-16 % more for tiny-llama's records,
    about half more for Gemma's smaller chunks (2026-11-27), what a capture's target would lose.
    """

    def __init__(self, output: Path, rotation: Rotation | None = None,
                 pipelined: bool = False) -> None:
        self.output, self.rotation = output, rotation
        self.files: list[Path] = []
        """The whole files written so far, oldest first (deleted ones left out)."""
        self.index = 0
        """The number of the file being written."""
        self.chunker: Chunker | None = None
        """Made with the run's first drain (its events' layout depends on its counters)."""
        self.cont = Continuation(final=False)
        """The modeller's: where its next chunk continues from."""
        self.tables = Tables()
        self.tasks: dict[int, Task] = {}
        self.programs: dict[int, str] = {}
        self.totals = RunTotals()
        self.packets = 0
        self.failed: str | None = None
        """Why writing stopped (the disk filled up), if it did."""
        self.error: Exception | None = None
        """What went wrong in the modeller or the writer, if it was not the disk."""
        self.last: TraceModel | None = None
        """The last chunk written (not a file's closing one)."""
        self._open(create_new(part_path(self.path)))
        self.queue: queue.Queue[tuple[Drained, Run] | None] = queue.Queue(QUEUED_DRAINS)
        self.modeller = threading.Thread(target=self._model_drains, name="trace modeller",
                                         daemon=True)
        self.models: queue.Queue[_Modelled | None] | None = None
        """The writer's (pipelined); else the modeller writes each chunk itself."""
        self.writer: threading.Thread | None = None
        if pipelined:
            self.models = queue.Queue(QUEUED_MODELS)
            self.writer = threading.Thread(target=self._serve, args=(self.models, self._put),
                                           name="trace writer", daemon=True)
        self.modeller.start()
        if self.writer is not None:
            self.writer.start()

    @property
    def path(self) -> Path:
        """The file being written (whole once the run, or its part of it, ends)."""
        if self.rotation is None:
            return self.output
        return self.rotation.path(self.output, self.index)

    def _open(self, fd: int) -> None:
        """Go on in the file `fd`, created new as PATH.part."""
        self.file = _Part(self.path, fd)
        self.written = Written()
        self.fresh = True
        """Nothing of the run is in this file yet: its scheduling names every task known."""

    def __call__(self, drained: Drained, run: Run) -> str | None:
        """Take a drain; a reason to stop the capture, if writing failed."""
        if self.failed is None:
            self.queue.put((drained, run))
        return self.failed

    def _serve(self, items: queue.Queue[T | None], handle: Callable[[T], None]) -> None:
        """Handle the queue's items until told to stop; after a failure (a bug: the capture
        stops, record exits with 3), only take them (the capture is told to stop at its next
        drain)."""
        while (item := items.get()) is not None:
            if self.failed is None:
                try:
                    handle(item)
                except Exception as exc:
                    self.error = exc
                    self.failed = f"the trace writer failed ({exc!r})"

    def _model_drains(self) -> None:
        """The modeller: take drains until told to stop, then tell the writer."""
        self._serve(self.queue, lambda item: self._take(*item))
        if self.models is not None:
            self.models.put(None)

    def _chunker(self, run: Run) -> Chunker:
        if self.chunker is None:
            self.chunker = Chunker(len(run.counters))
        return self.chunker

    def _take(self, drained: Drained, run: Run) -> None:
        chunk = self._chunker(run).add(drained)
        if chunk is not None:
            model = self._model(chunk, replace(run, end_ns=chunk.end_ns), self.cont)
            self.cont = model.then()
            modelled = _Modelled(model, run, self.tasks, self.programs)
            if self.models is None:
                self._put(modelled)
            else:
                self.models.put(modelled)

    def _put(self, modelled: _Modelled) -> None:
        """Write a chunk; then, past the size limit, go on in the next file."""
        self._write(modelled)
        if (self.failed is None and self.rotation is not None
                and self.file.size >= self.rotation.max_bytes):
            self._rotate(modelled.run)

    def _stop_workers(self) -> None:
        self.queue.put(None)
        self.modeller.join()
        if self.writer is not None:
            self.writer.join()

    def finish(self, recording: Recording) -> None:
        """Write the rest of the run and how it went; the trace takes its name."""
        self._stop_workers()
        if self.failed is None:
            run = recording.run
            chunk = self._chunker(run).finish(run.end_ns + 1)
            model = self._model(chunk, run, replace(self.cont, final=True), recording.op_stats)
            self._write(_Modelled(model, run, self.tasks, self.programs))
        self._close()
        if self.error is not None:
            raise self.error
        if self.failed is not None:
            raise ProfinferError(f"{self.failed}: {self.files[-1]} holds the run up to there "
                                 "(without its summary)")

    def abandon(self) -> None:
        """The capture failed: keep what was written (as a .part file), or nothing."""
        self._stop_workers()
        self.file.abandon()

    def _close(self) -> None:
        self.file.close()
        self.files.append(self.path)
        if self.rotation is not None and self.rotation.keep:
            for old in self.files[:-self.rotation.keep]:
                old.unlink(missing_ok=True)
            self.files = self.files[-self.rotation.keep:]

    def _rotate(self, run: Run) -> None:
        """Close this file with a `record` slice saying where the run goes on; open the next."""
        assert self.rotation is not None and self.last is not None
        following = self.rotation.path(self.output, self.index + 1)
        closing = replace(run, status=f"continued in {following.name}")
        model = model_chunk(_empty(run), closing, self.last.then(final=True), self.tasks)
        self._write(_Modelled(model, closing, self.tasks, self.programs), closing=True)
        if self.failed is None:
            fd = create_new(part_path(following))  # refused: this file is still closed whole
            self._close()
            self.index += 1
            self._open(fd)

    def _model(self, chunk: Chunk, run: Run, cont: Continuation,
               op_stats: list[tuple[int, np.ndarray]] | None = None) -> TraceModel:
        """A chunk's model; the tasks and programs it names first join the known ones (the
        modeller's, or finish's once the modeller stopped)."""
        model = model_chunk(chunk, run, cont, self.tasks, op_stats)
        if model.sched is not None:
            self.tasks = self.tasks | model.sched.tasks
            self.programs = self.programs | model.sched.programs
        return model

    def _write(self, modelled: _Modelled, closing: bool = False) -> None:
        model = modelled.model
        if self.fresh and model.sched is not None:
            model = replace(model, sched=replace(model.sched, tasks=dict(modelled.tasks),
                                                 programs=dict(modelled.programs)))
        out = io.BytesIO()
        packets = write_perfetto(build_layout(model, self.tables), out, self.written)
        if (failed := self.file.append(out.getbuffer())) is not None:
            self.failed = failed
            return
        self.fresh = False
        self.packets += packets
        if not closing:
            self.totals.add(model)
            self.last = model


def write_trace(output: Path, drains: Iterable[Drained], recording: Recording,
                workers: int | None = None, unit_events: int = units.UNIT_EVENTS
                ) -> TraceStream | units.UnitsWritten:
    """Write a run whose drains were kept (on disk) as the trace `output`, once it has ended
    (`recording`: how): in units of `unit_events` by `workers` processes (default: one per CPU)
    where the run takes two units or more and is countable (encode/units.py), else chunk by
    chunk, as it was captured (pipelined)."""
    drains = iter(drains)
    size = units.workers() if workers is None else workers
    ahead = units.look_ahead(drains, recording.run, size, unit_events)
    if ahead.chunker is not None:
        return _in_units(output, ahead.chunked(drains, recording.run.end_ns), recording, size,
                         unit_events)
    stream = TraceStream(output, pipelined=True)
    try:
        for drained in itertools.chain(ahead.drains, drains):
            stream(drained, recording.run)
    except BaseException:
        stream.abandon()
        raise
    stream.finish(recording)
    return stream


def _in_units(output: Path, chunks: Iterable[tuple[Chunk, bool]], recording: Recording,
              workers: int, unit_events: int) -> units.UnitsWritten:
    """The trace written in units by `workers` processes, as OUTPUT.part until whole; a write
    that fails (a full disk) keeps the units written whole."""
    file = _Part(output, create_new(part_path(output), output))

    def append(data: bytes) -> None:
        if (failed := file.append(memoryview(data))) is not None:
            raise ProfinferError(f"{failed}: it holds the run up to there (without its summary)")

    try:
        write = units.UnitsWrite(recording.run, workers, append, unit_events)
        done = write(chunks, recording.op_stats)
    except BaseException:
        file.abandon()
        raise
    file.close()
    done.files.append(output)
    return done


def _empty(run: Run) -> Chunk:
    """No records, up to the run's end so far."""
    return Chunk(**vars(Records.empty(len(run.counters))), end_ns=run.end_ns)

