"""A run cut into self-contained chunks while it is captured (record streams its trace).

A chunk ends just before a token step begins at a moment when no thread is inside a step (or,
for a runtime that computes graphs without token steps, before a graph begins when none is
being computed): everything of the steps before is in it, nothing of the ones after. A cut is
only made at a step begin that came in an earlier drain, by when every record made before it
has been read (the rings hand records over in the order they were made), and never where the
previous chunk ended (the step begin there is the next chunk's first record, not a new cut).
The node descriptors a later op may still need (the probes describe a tensor again only when it
changed) are carried from chunk to chunk, the latest one per tensor.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

import numpy as np

from profinfer_perfetto.capture.events import NODE, Kind
from profinfer_perfetto.capture.run import (
    Drained,
    Recording,
    Records,
    Run,
    drained_dtypes,
    scheduling,
)
from profinfer_perfetto.model.records import concat, take
from profinfer_perfetto.model.trace_model import Continuation, TraceModel, build


@dataclass
class Chunk(Records):
    """The records of a run's stretch up to `end_ns` (excluded); its node descriptors with the
    latest earlier one of each tensor before them."""

    end_ns: int = field(kw_only=True)


class Chunker:
    """Takes drains, gives chunks."""

    def __init__(self, counters: int) -> None:
        """For a run that reads `counters` perf counters."""
        self.pending = {name: np.empty(0, dtype)
                        for name, dtype in drained_dtypes(counters).items()}
        self.carried = np.empty(0, NODE)
        self.steps = False
        """The run has token steps (cuts go before steps, else before graphs)."""

    def add(self, drained: Drained) -> Chunk | None:
        """Take a drain; the chunk it completes, if any (cut among the earlier drains')."""
        cut = self._cut()
        for name in self.pending:
            new = getattr(drained, name)
            if new.size:
                self.pending[name] = concat([self.pending[name], new])
        return None if cut is None else self._take(cut)

    def finish(self, end_ns: int) -> Chunk:
        """Everything still pending: the run's last chunk."""
        return self._take(end_ns)

    def _cut(self) -> int | None:
        """The latest time, among the pending events (all of earlier drains), just before a step
        (or graph) begins with none open, after the first of them."""
        events = self.pending["events"]
        if len(events) == 0:
            return None
        self.steps = self.steps or bool(np.any(events["kind"] == Kind.TOKEN_BEGIN))
        begin, end = ((Kind.TOKEN_BEGIN, Kind.TOKEN_END) if self.steps
                      else (Kind.GRAPH_BEGIN, Kind.GRAPH_END))
        marks = take(events, (events["kind"] == begin) | (events["kind"] == end))
        marks = take(marks, np.argsort(marks["ts"], kind="stable"))
        open_on: set[int] = set()
        cut = None
        for ts, tid, kind in zip(marks["ts"].tolist(), marks["tid"].tolist(),
                                 marks["kind"].tolist(), strict=True):
            if kind == begin:
                if not open_on:
                    cut = ts
                open_on.add(tid)
            else:
                open_on.discard(tid)
        # A cut at the first pending event (the step the last chunk was cut before) makes none.
        return cut if cut is not None and cut > int(events["ts"].min()) else None

    def _take(self, end_ns: int) -> Chunk:
        """Split off the records made before `end_ns`."""
        taken = {}
        for name, records in self.pending.items():
            before = records["ts"] < end_ns
            taken[name] = take(records, before)
            self.pending[name] = take(records, ~before)
        nodes = concat([self.carried, taken["nodes"]])
        self.carried = _latest_per_tensor(nodes)
        return Chunk(**(taken | {"nodes": nodes}), end_ns=end_ns)


def _latest_per_tensor(nodes: np.ndarray) -> np.ndarray:
    """The last descriptor of each tensor (by time, then arrival)."""
    if len(nodes) == 0:
        return nodes
    order = np.lexsort((np.arange(len(nodes)), nodes["ts"], nodes["ptr"]))
    last = np.append(nodes["ptr"][order][1:] != nodes["ptr"][order][:-1], True)
    return take(nodes, order[last])


def model_chunk(chunk: Chunk, run: Run, cont: Continuation, known: Container[int],
                op_stats: list[tuple[int, np.ndarray]] | None = None) -> TraceModel:
    """A chunk's model, its scheduling naming the tasks that are not `known`."""
    sched = None if run.sched_cpus is None else scheduling(chunk.sched, run, known)
    recording = Recording(chunk.events, chunk.nodes, chunk.routes, chunk.batches,
                          chunk.sched, run=run, op_stats=op_stats or [], scheduling=sched)
    return build(recording, cont)
