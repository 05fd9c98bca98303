"""How ops derived from one trap per op (model/one_trap.py) agree with the exact ones.

Both models are of the same run: the exact one as recorded (op begins and barriers), the
derived one from its barriers alone. Per op key (phase, op, role), what op_summary and
thread_balance read (query/profinfer/): node times (the first thread's begin to the last
thread's end of work), each thread's work and barrier wait, the slowest and fastest shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from profinfer_perfetto.model.trace_model import TraceModel
from profinfer_perfetto.model.work import role

OpKey = tuple[str, str, str]
"""phase, op (model.op_label's), role."""


@dataclass(frozen=True)
class NodeTimes:
    """Per graph node that ran (ascending node index), its times over its threads' ops."""

    node: np.ndarray
    begin: np.ndarray
    """The first thread's begin."""
    work_end: np.ndarray
    """The last thread's end of work."""
    end: np.ndarray
    """The last thread's end (its barrier wait included)."""
    work: np.ndarray
    wait: np.ndarray
    slowest: np.ndarray
    fastest: np.ndarray
    threads: np.ndarray


def node_times(model: TraceModel) -> NodeTimes:
    ops = model.ops
    node, which = np.unique(ops.node, return_inverse=True)
    which = which.reshape(-1)
    begin, work_end, end = (x.astype(np.int64) for x in (ops.begin, ops.work_end, ops.end))
    share = work_end - begin

    def per_node(values: np.ndarray, how: np.ufunc, start: int) -> np.ndarray:
        out = np.full(len(node), start, np.int64)
        how.at(out, which, values)
        return out

    big = np.iinfo(np.int64).max
    return NodeTimes(node=node, begin=per_node(begin, np.minimum, big),
                     work_end=per_node(work_end, np.maximum, 0),
                     end=per_node(end, np.maximum, 0), work=per_node(share, np.add, 0),
                     wait=per_node(end - work_end, np.add, 0),
                     slowest=per_node(share, np.maximum, 0),
                     fastest=per_node(share, np.minimum, big),
                     threads=np.bincount(which, minlength=len(node)))


def node_keys(model: TraceModel, nodes: np.ndarray) -> list[OpKey]:
    """The op key of each node (of a fused pair: its first)."""
    steps = model.batches
    step = model.tokens.containing(model.graphs.begin)
    fused = np.full(len(model.nodes), -1, np.int64)
    fused[model.ops.node] = model.ops.fused
    keys = []
    for n in nodes.tolist():
        s = int(step[model.nodes.graph[n]])
        op, tensor = model.op_label(n, int(fused[n]))
        keys.append((steps[s].phase if s >= 0 else "none", op, role(tensor, op)))
    return keys


@dataclass(frozen=True)
class KeyTimes:
    """One op key's times over its nodes."""

    count: int
    total_ns: int
    """Summed node times."""
    work_ns: int
    """Summed work of the threads' shares."""
    wait_ns: int
    """Summed barrier waits."""
    shares: int
    slowest_ns: int
    """Summed slowest shares (thread_balance's imbalance: these over the fastest)."""
    fastest_ns: int
    p50_ns: float
    """The median node time."""

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count

    @property
    def mean_work_ns(self) -> float:
        return self.work_ns / self.shares

    @property
    def wait_share(self) -> float:
        return self.wait_ns / max(self.work_ns + self.wait_ns, 1)

    @property
    def imbalance(self) -> float:
        return self.slowest_ns / max(self.fastest_ns, 1)


def key_times(model: TraceModel) -> dict[OpKey, KeyTimes]:
    t = node_times(model)
    found: dict[OpKey, list[int]] = {}
    durations: dict[OpKey, list[int]] = {}
    rows = zip(node_keys(model, t.node), (t.work_end - t.begin).tolist(), t.work.tolist(),
               t.wait.tolist(), t.threads.tolist(), t.slowest.tolist(), t.fastest.tolist(),
               strict=True)
    for key, *values in rows:
        sums = found.setdefault(key, [0] * 7)
        durations.setdefault(key, []).append(values[0])
        for i, v in enumerate([1, *values]):
            sums[i] += v
    return {key: KeyTimes(count, total, work, wait, shares, slowest, fastest,
                          float(np.median(durations[key])))
            for key, (count, total, work, wait, shares, slowest, fastest) in found.items()}


def _spread(values: np.ndarray, digits: int = 4) -> dict[str, float]:
    """Median and worst (largest in size) of `values`, rounded."""
    if len(values) == 0:
        return {"median": 0.0, "worst": 0.0}
    worst = values[np.argmax(np.abs(values))]
    return {"median": round(float(np.median(values)), digits), "worst": round(float(worst), digits)}


def _shifts(exact: TraceModel, derived: TraceModel) -> dict[str, dict[str, float]]:
    """Derived minus exact, in µs: each node's begin and end (of its last wait), each op
    begin; on the (thread, node)s both have."""
    e, d = node_times(exact), node_times(derived)
    same_e, same_d = np.isin(e.node, d.node), np.isin(d.node, e.node)

    def op_begins(m: TraceModel) -> dict[tuple[int, int], int]:
        return dict(zip(zip(m.ops.tid.tolist(), m.ops.node.tolist(), strict=True),
                        m.ops.begin.tolist(), strict=True))

    ops_e, ops_d = op_begins(exact), op_begins(derived)
    op_shift = np.array([ops_d[k] - b for k, b in ops_e.items() if k in ops_d], np.int64)
    return {
        "node_begin_us": _spread((d.begin[same_d] - e.begin[same_e]) / 1e3, 2),
        "node_end_us": _spread((d.end[same_d] - e.end[same_e]) / 1e3, 2),
        "op_begin_us": _spread(op_shift / 1e3, 2),
    }


def _key_row(e: KeyTimes, d: KeyTimes) -> dict[str, Any]:
    def error(exact: float, derived: float) -> float:
        return round(derived / max(exact, 1) - 1, 4)

    return {"mean_us": round(e.mean_ns / 1e3, 2), "mean_error": error(e.mean_ns, d.mean_ns),
            "p50_error": error(e.p50_ns, d.p50_ns),
            "work_error": error(e.mean_work_ns, d.mean_work_ns),
            "wait_share": (round(e.wait_share, 4), round(d.wait_share, 4)),
            "imbalance": (round(e.imbalance, 3), round(d.imbalance, 3))}


def agreement(exact: TraceModel, derived: TraceModel) -> dict[str, object]:
    """Per op key of the exact model: the derived mean and median node time and mean work per
    share as a relative error, the wait share and imbalance as derived minus exact; their
    median and worst over the keys; the shifts of node and op begins (_shifts); whether both
    have the same (thread, node)s. Nodes are matched by index (both models have the same nodes
    where the barriers name every node that ran)."""
    ke, kd = key_times(exact), key_times(derived)
    both = [k for k in ke if k in kd]
    rows = {k: _key_row(ke[k], kd[k]) for k in both}

    def column(name: str, i: int | None = None) -> np.ndarray:
        values = [r[name] if i is None else r[name][1] - r[name][0] for r in rows.values()]
        return np.array(values, float)

    total = sum(kd[k].total_ns for k in both) / max(sum(ke[k].total_ns for k in both), 1) - 1
    pairs = (set(zip(exact.ops.tid.tolist(), exact.ops.node.tolist(), strict=True))
             == set(zip(derived.ops.tid.tolist(), derived.ops.node.tolist(), strict=True)))
    return {"same_ops": pairs, "keys": len(ke), "keys_derived": len(kd),
            "total_error": round(total, 4), "mean_error": _spread(column("mean_error")),
            "p50_error": _spread(column("p50_error")), "work_error": _spread(column("work_error")),
            "wait_share_diff": _spread(column("wait_share", 1)),
            "imbalance_diff": _spread(column("imbalance", 1), 3), **_shifts(exact, derived),
            "by_key": {" ".join(k): r for k, r in sorted(rows.items(),
                                                           key=lambda kv: -ke[kv[0]].total_ns)}}
