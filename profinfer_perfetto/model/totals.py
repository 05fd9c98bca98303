"""What `record` says of a run when it ends: counts summed over the chunks it was written in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from profinfer_perfetto.model.records import sorted_unique
from profinfer_perfetto.model.trace_model import TraceModel


@dataclass
class RunTotals:
    steps: Counter[str] = field(default_factory=Counter)
    """Token steps per phase."""
    tokens: int = 0
    graphs: int = 0
    ops: int = 0
    op_threads: set[int] = field(default_factory=set)
    edges: int = 0
    events: int = 0
    dropped_ops: int = 0
    device_ops: int = 0
    """Ops timed on a device (record --gpu-timestamps)."""

    def add(self, model: TraceModel) -> None:
        for batch in model.batches:
            self.steps[batch.phase] += 1
            self.tokens += max(batch.n_tokens, 0)
        self.graphs += len(model.graphs)
        self.ops += len(model.ops)
        self.op_threads |= set(sorted_unique(model.ops.tid).tolist())
        self.edges += len(model.edges)
        self.events += model.event_count
        self.dropped_ops += model.dropped_ops
        self.device_ops += 0 if model.device_ops is None else len(model.device_ops.begin)

    def absorb(self, other: RunTotals) -> None:
        """Add the counts of another part of the run."""
        self.steps += other.steps
        self.tokens += other.tokens
        self.graphs += other.graphs
        self.ops += other.ops
        self.op_threads |= other.op_threads
        self.edges += other.edges
        self.events += other.events
        self.dropped_ops += other.dropped_ops
        self.device_ops += other.device_ops

    @staticmethod
    def of(model: TraceModel) -> RunTotals:
        totals = RunTotals()
        totals.add(model)
        return totals
