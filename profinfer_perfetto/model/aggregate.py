"""The --aggregate view: per-op statistics summed in BPF, grouped by op and tensor role.

BPF keys its statistics by tensor; each tensor was described once, which names it. A fused pair
is counted under its first node's op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profinfer_perfetto.capture.events import HIST_BUCKETS
from profinfer_perfetto.model.trace_model import TraceModel, tensor_name
from profinfer_perfetto.model.work import role


@dataclass(frozen=True)
class OpStat:
    op: str
    role: str
    count: int
    work_ns: int
    wait_ns: int
    max_work_ns: int
    p90_ns: int
    """Upper bound of the log2 bucket that holds the 90th percentile share."""


def _labels(model: TraceModel) -> dict[int, tuple[str, str]]:
    labels: dict[int, tuple[str, str]] = {}
    ggml = model.run.ggml
    for rec in model.descriptors:
        ptr = int(rec["ptr"])
        if ptr not in labels:
            op = (ggml.subop_name(int(rec["op"]), int(rec["op_param0"]))
                  or ggml.op_name(int(rec["op"])))
            labels[ptr] = (op, role(tensor_name(bytes(rec["name"])), op))
    return labels


def _grouped(model: TraceModel, stats: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    labels = _labels(model)
    groups: dict[tuple[str, str], list[int]] = {}
    for row, ptr in enumerate(stats["node"].tolist()):
        groups.setdefault(labels.get(ptr, ("?", "?")), []).append(row)
    return {k: stats[rows] for k, rows in groups.items()}


def op_stats(model: TraceModel) -> list[OpStat]:
    """The final statistics per (op, role), the most time first."""
    if not model.op_stats:
        return []
    out = []
    for (op, role_name), rows in _grouped(model, model.op_stats[-1][1]).items():
        hist = rows["hist"].sum(axis=0)
        cumulative = np.cumsum(hist)
        bucket = int(np.searchsorted(cumulative, 0.9 * cumulative[-1])) if cumulative[-1] else 0
        out.append(OpStat(op, role_name, int(rows["count"].sum()), int(rows["work_ns"].sum()),
                          int(rows["wait_ns"].sum()), int(rows["max_work_ns"].max()),
                          1 << min(bucket, HIST_BUCKETS - 1)))
    return sorted(out, key=lambda s: (-s.work_ns, s.op, s.role))


def op_type_series(model: TraceModel) -> dict[str, list[tuple[int, int]]]:
    """Per op type, its summed work (ns) at each snapshot time."""
    series: dict[str, list[tuple[int, int]]] = {}
    for ts, stats in model.op_stats:
        totals: dict[str, int] = {}
        for (op, _), rows in _grouped(model, stats).items():
            totals[op] = totals.get(op, 0) + int(rows["work_ns"].sum())
        for op, total in totals.items():
            series.setdefault(op, []).append((ts, total))
    return series
