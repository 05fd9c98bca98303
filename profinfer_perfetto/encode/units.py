"""The after-run write in worker processes, where the machine has CPUs to spare once the run has
ended: the run's chunks (model/chunks.py) cut into units of about UNIT_EVENTS events, each unit
modelled, laid out and encoded by a worker on packet sequences of its own, and the units' bytes
appended in order.

A unit starts from its Continuation, which the parent counts from the raw records of the chunks
before (token steps, graphs, tokens, events: `counted`); so it interns its names, arg sets and
node descriptions afresh, as a streamed trace does when the layout's tables start over, on
sequence ids from a range of its own (SEQUENCE_STRIDE per unit) and with node description
numbers from one of its own (each unit's above the run's events before it: a unit describes at
most one node per event). Each thread's perf counter tracks hold running totals, which need
every op of the units before: a worker models its unit first and sends the parent its threads'
counts, the parent answers with the totals of the units before (as soon as those have sent
theirs), and the worker lays its unit out from them. The count holds only where a chunk's model
needs nothing else from the chunks before it: a run that records no scheduling (its tasks are
named once per file) and computes its graphs on the CPU backend alone (another backend's split
copies are recognized from the splits before); other runs, and a run shorter than two units,
are written in one sequence (encode/stream.py). A worker checks the count against its model's
own and fails the write where they differ. From the first chunk that is not countable on, and
for the run's last chunk (with the run's summary, which sums the units' dropped ops), the parent
writes the rest itself.

Measured (docs/internals.md, "Units in worker processes"): every canned metric answers the same
as the trace written in one sequence, on trace_processor and on the builtin engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import itertools
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

from profinfer_perfetto.capture.events import Backend, Kind
from profinfer_perfetto.capture.run import Drained, Run
from profinfer_perfetto.encode.perfetto import GLOBAL_SEQUENCE, Written, write_perfetto
from profinfer_perfetto.model.chunks import Chunk, Chunker, model_chunk
from profinfer_perfetto.model.layout import Tables, build_layout
from profinfer_perfetto.model.totals import RunTotals
from profinfer_perfetto.model.trace_model import Continuation, TraceModel

UNIT_EVENTS = 250_000
"""Events a unit holds at least (but the last): at 300 k events/s, most of a second's."""
SEQUENCE_STRIDE = 1 << 16
"""Sequence ids a unit may use (its threads', once per start of its tables)."""
MAX_WORKERS = 16
MIN_CPUS = 2
"""The fewest CPUs on which record writes in units. On two (2026-12-08, in turns against the
pipelined threads): two workers took 0.53-0.94 of the threads' wall time on the `write` bench's
3.04 M events (8 rounds), then 0.76-1.07 (6 rounds: 5 faster), for 1.03-1.18 times their CPU;
0.62-0.88 on a real llama-server's 4.2 M (3 rounds). The threads share one interpreter's lock,
and lose most where the machine is loaded. Each CPU more takes a share of the units' CPU off
the wall time. Where the target goes on computing beside the write, record keeps one sequence
(commands/record.py)."""
_PR_SET_PDEATHSIG = 1
_WORKER_ENV = "profinfer_perfetto.encode.worker_env"
"""The module the forkserver imports first (by name: importing it sets its environment)."""
_SPLIT_KINDS = (Kind.VK_NODE, Kind.BLAS_NODE, Kind.HOST_CALL_BEGIN)
"""Records of another backend's ops, whose split copies are recognized from the chunks
before."""

Totals = dict[tuple[int, int], int]
"""(tid, counter) -> a count (Continuation.counter_totals)."""


@dataclass(frozen=True)
class Unit:
    """Chunks a worker writes: the `index`-th unit of the run, continuing `cont` (counted, its
    counter totals left out)."""

    index: int
    chunks: list[Chunk]
    run: Run
    cont: Continuation


@dataclass
class UnitTrace:
    """A unit's bytes, its packets and what it holds of the run."""

    data: bytes
    packets: int
    totals: RunTotals


@dataclass
class UnitsWritten:
    """The trace written in units: what record and recover say of it."""

    files: list[Path]
    packets: int
    totals: RunTotals
    last: TraceModel | None = None
    """The run's last chunk (its summary)."""
    units: int = 0
    workers: int = 0

    def how(self) -> str:
        return f" in {self.units} units by {self.workers} worker processes"


class WorkerFailed(Exception):
    """A worker could not write its unit (what it says), or died."""


def countable(run: Run, chunk: Chunk) -> bool:
    """Whether the chunk's model needs no more of the chunks before it than `counted` and the
    counter totals say."""
    kind = chunk.events["kind"]
    cpu = chunk.events["aux"][kind == Kind.GRAPH_BEGIN] == Backend.CPU
    # A count of each kind: np.isin took 0.23 ms per 15 k events, this 0.03 (2026-12-08), 0.07 s
    # of the parent's 0.8 s of CPU on a real llama-server's 4.2 M events.
    present = np.bincount(kind, minlength=max(_SPLIT_KINDS) + 1)[list(_SPLIT_KINDS)]
    return run.sched_cpus is None and bool(cpu.all()) and not present.any()


def counted(cont: Continuation, chunk: Chunk) -> Continuation:
    """Where the chunk after `chunk` continues from, counted from its records (its model's
    `then()` but for the dropped ops and the counter totals)."""
    kind = chunk.events["kind"]
    steps = kind == Kind.TOKEN_BEGIN
    tokens = np.maximum(chunk.events["arg0"][steps].astype(np.int64), 0)
    return replace(cont, first_step=cont.first_step + int(np.count_nonzero(steps)),
                   first_graph=cont.first_graph + int(np.count_nonzero(kind == Kind.GRAPH_BEGIN)),
                   tokens_before=cont.tokens_before + int(tokens.sum()),
                   events=cont.events + len(chunk.events))


def plus(a: Totals, b: Totals) -> Totals:
    """Two sets of counts added up."""
    return {key: a.get(key, 0) + b.get(key, 0) for key in a.keys() | b.keys()}


def _uncounted(cont: Continuation) -> Continuation:
    return replace(cont, dropped_ops=0, counter_totals={})


@dataclass
class _UnitWriter:
    """Models and writes the chunks of one unit, from `cont`, each on the sequences of the ones
    before."""

    index: int
    cont: Continuation
    out: io.BytesIO = field(default_factory=io.BytesIO)
    tables: Tables = field(default_factory=Tables)
    totals: RunTotals = field(default_factory=RunTotals)
    packets: int = 0

    def __post_init__(self) -> None:
        self.base = GLOBAL_SEQUENCE + self.index * SEQUENCE_STRIDE
        self.written = Written(next_sequence=self.base, numbered=self.cont.events)

    def model(self, chunk: Chunk, run: Run, op_stats: list[tuple[int, np.ndarray]] | None = None
              ) -> TraceModel:
        """A chunk's model; the next one continues from it."""
        model = model_chunk(chunk, run, self.cont, (), op_stats)
        if not self.cont.final:
            then = model.then()
            if _uncounted(then) != _uncounted(counted(self.cont, chunk)):
                raise WorkerFailed(f"unit {self.index}: a chunk's model continues otherwise "
                                   "than its records count")
            self.cont = then
        return model

    def write(self, model: TraceModel) -> None:
        """Lay a model out and encode it."""
        self.packets += write_perfetto(build_layout(model, self.tables), self.out, self.written)
        if self.written.next_sequence > self.base + SEQUENCE_STRIDE:
            raise WorkerFailed(f"unit {self.index} took more than {SEQUENCE_STRIDE} sequences")
        self.totals.add(model)

    def add(self, chunk: Chunk, run: Run, op_stats: list[tuple[int, np.ndarray]] | None = None
            ) -> TraceModel:
        """Model and write a chunk; its model."""
        model = self.model(chunk, run, op_stats)
        self.write(model)
        return model

    def trace(self) -> UnitTrace:
        return UnitTrace(self.out.getvalue(), self.packets, self.totals)


def _based(model: TraceModel, base: Totals) -> TraceModel:
    """The model with the counter totals of the units before added to its own."""
    return replace(model, cont=replace(model.cont,
                                       counter_totals=plus(base, model.cont.counter_totals)))


def write_unit(unit: Unit, conn: Connection) -> UnitTrace:
    """A worker's job: model the unit, send its threads' counts, lay it out from the totals
    the parent answers; the unit's bytes."""
    writer = _UnitWriter(unit.index, unit.cont)
    models = [writer.model(chunk, replace(unit.run, end_ns=chunk.end_ns))
              for chunk in unit.chunks]
    conn.send(writer.cont.counter_totals)
    base: Totals = conn.recv()
    for model in models:
        writer.write(_based(model, base))
    return writer.trace()


def _serve(conn: Connection) -> None:
    """A worker: it dies with the process that forked it (the forkserver, which ends with the
    recorder), leaves Ctrl-C to the recorder, and writes units until told to stop; a unit it
    cannot write ends it, with the reason sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    while (unit := received_unit(conn)) is not None:
        try:
            conn.send(write_unit(unit, conn))
        except Exception as exc:
            conn.send(WorkerFailed(str(exc) if isinstance(exc, WorkerFailed)
                                   else f"unit {unit.index}: {exc!r}"))
            return


def workers() -> int:
    """Worker processes for the write: the CPUs this process may run on (0 below MIN_CPUS)."""
    cpus = len(os.sched_getaffinity(0))
    return min(cpus, MAX_WORKERS) if cpus >= MIN_CPUS else 0


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    unit: int | None = None
    """The unit it writes (None: idle)."""


def _start(size: int) -> list[_Worker]:
    """`size` workers forked from a server that has this module imported. As multiprocessing's
    children do, each imports the parent's main module first: the console script and `python -m
    profinfer_perfetto` guard their main; a script that does not, or one read from stdin, makes
    the workers die and the write fail (WorkerFailed)."""
    context = _context()
    started = []
    for _ in range(size):
        ours, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs,), daemon=True,
                                  name="trace unit writer")
        process.start()
        theirs.close()
        started.append(_Worker(process, ours))
    return started


def _context() -> multiprocessing.context.ForkServerContext:
    """The forkserver's, which imports worker_env (before numpy) and this module."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([_WORKER_ENV, __name__])
    return context


def prepare() -> None:
    """Start the forkserver the workers come from (about 0.4 s on this VM: it imports numpy and
    this module) in the background, for a write to come. Whatever fails here is left for the
    workers' start, which tries again."""
    _context()

    def start() -> None:
        with contextlib.suppress(Exception):
            multiprocessing.forkserver.ensure_running()

    threading.Thread(target=start, daemon=True, name="forkserver start").start()


@dataclass
class _Sent:
    """A unit a worker has: its threads' counts once modelled, its trace once written."""

    worker: _Worker
    counts: Totals | None = None
    trace: UnitTrace | None = None


@dataclass
class Ahead:
    """The drains read before deciding how to write the run, and, to write it in units, the
    chunks cut from them and the chunker that goes on."""

    drains: list[Drained]
    chunks: list[Chunk]
    chunker: Chunker | None

    def chunked(self, drains: Iterable[Drained], end_ns: int) -> Iterator[tuple[Chunk, bool]]:
        """The run's chunks, these and those of the `drains` after them, each with whether it
        is the last."""
        assert self.chunker is not None
        yield from ((chunk, False) for chunk in self.chunks)
        for drained in drains:
            chunk = self.chunker.add(drained)
            if chunk is not None:
                yield chunk, False
        yield self.chunker.finish(end_ns + 1), True


def look_ahead(drains: Iterator[Drained], run: Run, size: int,
               unit_events: int = UNIT_EVENTS) -> Ahead:
    """Read drains until the run is known to take two units or more (chunker set), or is not to
    be written in units by `size` workers: it ends before, it is not countable, or there are no
    two workers."""
    ahead = Ahead([], [], Chunker(len(run.counters)))
    if size < 2 or run.sched_cpus is not None:
        return replace(ahead, chunker=None)
    events = 0
    for drained in drains:
        ahead.drains.append(drained)
        assert ahead.chunker is not None
        chunk = ahead.chunker.add(drained)
        if chunk is None:
            continue
        if not countable(run, chunk):
            break
        ahead.chunks.append(chunk)
        events += len(chunk.events)
        if events >= 2 * unit_events:
            return ahead
    return replace(ahead, chunker=None)


class UnitsWrite:
    """The parent: cuts the run into units for the workers, answers their counts with the
    totals before them, writes their bytes in order with `write`, then the rest of the run
    itself."""

    def __init__(self, run: Run, size: int, write: Callable[[bytes], None],
                 unit_events: int = UNIT_EVENTS) -> None:
        self.run, self.size, self.write, self.unit_events = run, size, write, unit_events
        self.workers: list[_Worker] = []
        self.sent: dict[int, _Sent] = {}
        """The units sent and not yet written, by index."""
        self.counted_to = 0
        """The units before this one have sent their counts (and been answered)."""
        self.counts: Totals = {}
        """Their counts added up."""
        self.written = 0
        """The units before this one are written."""
        self.unit: list[Chunk] = []
        self.start = self.cont = Continuation(final=False)
        """Where the unit being gathered continues from; where its next chunk does."""
        self.index = 0
        self.done = UnitsWritten([], 0, RunTotals(), workers=size)

    def __call__(self, chunks: Iterable[tuple[Chunk, bool]],
                 op_stats: list[tuple[int, np.ndarray]]) -> UnitsWritten:
        """Write the run's chunks; what was written."""
        try:
            chunks = iter(chunks)
            for chunk, last in chunks:
                if last or not countable(self.run, chunk):
                    self._rest(itertools.chain([(chunk, last)], chunks), op_stats)
                    break
                self._gather(chunk)
        finally:
            self._stop()
        return self.done

    def _gather(self, chunk: Chunk) -> None:
        self.unit.append(chunk)
        self.cont = counted(self.cont, chunk)
        if self.cont.events - self.start.events >= self.unit_events:
            self._send_unit()

    def _send_unit(self) -> None:
        """Send the unit gathered."""
        self._send(Unit(self.index, self.unit, self.run, self.start))
        self.index, self.unit, self.start = self.index + 1, [], self.cont

    def _send(self, unit: Unit) -> None:
        """Give the unit to an idle worker (started with the first), once one is."""
        if not self.workers:
            self.workers = _start(self.size)
        while (idle := next((w for w in self.workers if w.unit is None), None)) is None:
            self._hear()
        _tell(idle, unit)
        idle.unit = unit.index
        self.sent[unit.index] = _Sent(idle)

    def _hear(self) -> None:
        """Take what the busy workers have said; answer and write what can be, in order."""
        busy = {w.conn: w for w in self.workers if w.unit is not None}
        for conn in wait(list(busy)):
            worker = busy[conn]  # type: ignore[index]
            assert worker.unit is not None
            sent = self.sent[worker.unit]
            try:
                said = worker.conn.recv()
            except EOFError:
                said = _died(worker)
            if isinstance(said, WorkerFailed):
                raise said
            if isinstance(said, UnitTrace):
                sent.trace, worker.unit = said, None
            else:
                sent.counts = said
        self._answer()

    def _answer(self) -> None:
        """Send each unit whose units before have counted the totals before it; write each
        unit whose units before are written."""
        while (sent := self.sent.get(self.counted_to)) is not None and sent.counts is not None:
            _tell(sent.worker, self.counts)
            self.counts = plus(self.counts, sent.counts)
            self.counted_to += 1
        while (sent := self.sent.get(self.written)) is not None and sent.trace is not None:
            self._take(sent.trace)
            del self.sent[self.written]
            self.written += 1

    def _take(self, trace: UnitTrace) -> None:
        self.write(trace.data)
        self._count(trace)

    def _count(self, trace: UnitTrace) -> None:
        """What a unit's trace holds, added to the run's."""
        self.done.packets += trace.packets
        self.done.totals.absorb(trace.totals)

    def _rest(self, chunks: Iterable[tuple[Chunk, bool]],
              op_stats: list[tuple[int, np.ndarray]]) -> None:
        """The unit being gathered sent as it is, the rest of the run: the chunks after it and
        the last, with the run's summary."""
        if self.unit:
            self._send_unit()
        while self.written < self.index:
            self._hear()
        self.done.units = self.index
        tail = _UnitWriter(self.index, replace(self.start, counter_totals=self.counts))
        for chunk, last in chunks:
            if last:
                tail.cont = replace(tail.cont, final=True, dropped_ops=(
                    tail.cont.dropped_ops + self.done.totals.dropped_ops))
                self.done.last = tail.add(chunk, self.run, op_stats)
            else:
                tail.add(chunk, replace(self.run, end_ns=chunk.end_ns))
            self.write(tail.out.getvalue())
            tail.out = io.BytesIO()
        self._count(tail.trace())  # its bytes written chunk by chunk above

    def _stop(self) -> None:
        """Tell the workers to stop (after a failure, stop them)."""
        for worker in self.workers:
            if worker.unit is None:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)  # an idle worker stops
                    continue
            worker.process.kill()  # a busy one, or one that died
        for worker in self.workers:
            worker.process.join()
            worker.conn.close()


def _tell(worker: _Worker, what: Unit | Totals) -> None:
    try:
        if isinstance(what, Unit):
            send_unit(worker.conn, what)
        else:
            worker.conn.send(what)
    except OSError:
        raise _died(worker) from None


def send_unit(conn: Connection, unit: Unit) -> None:
    """A unit to a worker: its pickle without its arrays, then each array's bytes as they lie
    (pickle protocol 5's out-of-band buffers). Through a pipe, a pickle of the records
    themselves cost the parent 0.17-0.19 µs of CPU per event and the worker 0.08-0.11 to read,
    this 0.03 and 0.05 (2026-12-07, docs/internals.md)."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(unit, protocol=5, buffer_callback=buffers.append)
    raw = [buffer.raw() for buffer in buffers]
    conn.send((head, [view.nbytes for view in raw]))
    for view in raw:
        conn.send_bytes(view)


def received_unit(conn: Connection) -> Unit | None:
    """The unit send_unit sent (its arrays in buffers of their own, writable), or None: stop."""
    message = conn.recv()
    if message is None:
        return None
    head, sizes = message
    buffers = [bytearray(size) for size in sizes]
    for buffer in buffers:
        conn.recv_bytes_into(buffer)
    unit: Unit = pickle.loads(head, buffers=buffers)
    return unit


def _died(worker: _Worker) -> WorkerFailed:
    worker.process.join(1)
    return WorkerFailed(f"a trace unit writer died (exit status {worker.process.exitcode})")
