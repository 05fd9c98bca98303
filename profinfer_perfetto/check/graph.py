"""The graph a set of runs computed, and its exact comparison: what does not depend on timing.

A run's facts, each a key and a value compared as text, never with a tolerance:
- `nodes`: per graph kind (the phase of its step, the backend that ran it), its node count
  (views included) over the run's graphs of that kind;
- `ops`: per (phase, op, role), how many of its nodes each step of the phase computes (0 where
  a step has none);
- `node`: per computed node (tensor name, op; a fused pair is one node, its op `A+B`), the
  phases whose steps compute it;
- `weights`: per matmul node, its first source's type and shape (its weights);
- `backend`: per (phase, node), the backends that ran it;
- `flops`, `bytes`: per phase, the work of its nodes per token.
A value lists what the runs' steps hold, distinct values once each, so the facts of two runs of
one command are the same whatever their timing. Any difference between the baseline's facts and
a candidate's is "the graph changed". Where the baseline's own runs differ, or a run lost events
(its graph may be missing nodes), the graphs are not compared, and the diff says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from profinfer_perfetto.query.session import TraceQuery

NODES, OPS, NODE, WEIGHTS, BACKEND, FLOPS, BYTES = (
    "nodes", "ops", "node", "weights", "backend", "flops", "bytes")
KINDS = (NODE, WEIGHTS, BACKEND, OPS, NODES, FLOPS, BYTES)
"""The fact kinds, in the order their changes are listed: the nodes named first."""
MATMULS = ("MUL_MAT", "MUL_MAT_ID")
LOSSES = ("events_lost", "nodes_lost", "ops_dropped")
"""The record slice's args that count what a run's trace misses."""

SAME = "same graph"
CHANGED = "graph changed"
NOT_COMPARED = "not compared"

Facts = dict[tuple[str, ...], str]
"""A run's facts: (kind, what) to a value."""


@dataclass(frozen=True)
class RunGraph:
    name: str
    facts: Facts
    cut: str | None = None
    """Why the trace may miss some of the run's graph (lost events, a run cut short)."""


@dataclass(frozen=True)
class GraphChange:
    fact: tuple[str, ...]
    base: str | None
    """The baseline's value; None: the baseline has no such fact."""
    new: str | None

    def sentence(self) -> str:
        kind, *what = self.fact
        base, new = self.base or "none", self.new or "none"
        if kind == NODE:
            tensor, op = what
            if self.base is None or self.new is None:
                gone = "gone" if self.new is None else "new"
                return f"{tensor}: fusion {op} {gone}" if "+" in op else f"{tensor} {op}: {gone}"
            return f"{tensor} {op}: computed in {base} steps -> in {new} steps"
        if kind == WEIGHTS:
            return f"{what[0]} {what[1]}: weights {base} -> {new}"
        if kind == BACKEND:
            return f"{what[1]} {what[2]} in {what[0]} steps: op moved {base} -> {new}"
        if kind == OPS:
            return (f"{what[1]} {what[2]} nodes per {what[0]} step: {self.base or '0'} -> "
                    f"{self.new or '0'}")
        if kind == NODES:
            return f"nodes per {what[1]} graph of a {what[0]} step: {base} -> {new}"
        return f"{kind} per {what[0]} token: {base} -> {new}"

    def as_dict(self) -> dict[str, object]:
        return {"fact": list(self.fact), "base": self.base, "new": self.new,
                "sentence": self.sentence()}


@dataclass(frozen=True)
class GraphDiff:
    verdict: str
    changes: tuple[GraphChange, ...] = ()
    run: str = ""
    """The candidate run whose graph changed (the first such)."""
    facts: int = 0
    """How many facts of the baseline were compared."""
    note: str = ""
    """Why the graphs were not compared, in one sentence."""

    @property
    def changed(self) -> bool:
        return self.verdict == CHANGED

    def sentence(self) -> str:
        if self.verdict == CHANGED:
            return (f"the graph changed: {self.run} differs from the baseline in "
                    f"{len(self.changes)} of its facts")
        if self.verdict == SAME:
            return f"the graph is the baseline's ({self.facts} facts compared)"
        return f"the graph was not compared: {self.note}"


def _order(value: object) -> tuple[int, int, str]:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _listed(values: Iterable[object]) -> str:
    """Distinct values, sorted (numbers by value), as one text."""
    return ", ".join(str(v) for v in sorted(set(values), key=_order))


def _per_token(total: int, tokens: int) -> str:
    return f"{total / tokens:,.1f} ({total} in {tokens} tokens)" if tokens else f"{total} in all"


def _cut(record: dict[str, str]) -> str | None:
    lost = [f"{record[k]} {k.replace('_', ' ')}" for k in LOSSES if record.get(k, "0") != "0"]
    if lost:
        return f"has {' and '.join(lost)}"
    status = record.get("status", "complete")
    return None if status == "complete" else f"was cut short ({status})"


def _step_facts(q: TraceQuery) -> Facts:
    """NODES, OPS, FLOPS and BYTES facts."""
    sets: dict[tuple[str, ...], set[object]] = {}
    for phase, backend, n_nodes in q.sql("select phase, backend, n_nodes from profinfer_graph "
                                         "where phase is not null").rows:
        sets.setdefault((NODES, str(phase), str(backend)), set()).add(n_nodes)
    steps: dict[str, set[int]] = {}
    tokens: dict[str, int] = {}
    for step, phase, n_tokens in q.sql("select step, phase, n_tokens from profinfer_step").rows:
        steps.setdefault(str(phase), set()).add(step)
        tokens[str(phase)] = tokens.get(str(phase), 0) + int(n_tokens or 0)
    counts: dict[tuple[str, ...], dict[int, int]] = {}
    for step, phase, op, role, n in q.sql(
            "select step, phase, op, role, count(*) from profinfer_node "
            "where phase is not null group by step, op, role").rows:
        counts.setdefault((OPS, str(phase), str(op), str(role)), {})[step] = n
    for key, per_step in counts.items():
        sets[key] = {per_step.get(step, 0) for step in steps.get(key[1], ())}
    facts = {key: _listed(values) for key, values in sets.items()}
    for phase, flops, nbytes in q.sql(
            "select phase, sum(flops), sum(bytes) from profinfer_node "
            "where phase is not null group by phase").rows:
        n_tokens = tokens.get(str(phase), 0)
        facts[(FLOPS, str(phase))] = _per_token(int(flops or 0), n_tokens)
        facts[(BYTES, str(phase))] = _per_token(int(nbytes or 0), n_tokens)
    return facts


def _node_facts(q: TraceQuery) -> Facts:
    """NODE, WEIGHTS and BACKEND facts."""
    sets: dict[tuple[str, ...], set[object]] = {}
    for row in q.sql("select distinct phase, backend, tensor, op, src0 from profinfer_node "
                     "where phase is not null").rows:
        phase, backend, tensor, op, src0 = ("none" if v is None else str(v) for v in row)
        sets.setdefault((NODE, tensor, op), set()).add(phase)
        sets.setdefault((BACKEND, phase, tensor, op), set()).add(backend)
        if op.split("+")[0] in MATMULS:
            sets.setdefault((WEIGHTS, tensor, op), set()).add(src0)
    return {key: _listed(values) for key, values in sets.items()}


def run_graph(q: TraceQuery) -> RunGraph:
    """The facts of the run in a trace."""
    return RunGraph(str(q.trace), _step_facts(q) | _node_facts(q),
                    _cut(q.recording_args()))


def changes(base: Facts, new: Facts) -> list[GraphChange]:
    """Each fact that differs, in KINDS order; a node's weights and backends only where both
    have the node (one gone or new is one change)."""
    found = []
    for fact in sorted(base.keys() | new.keys(), key=lambda f: (KINDS.index(f[0]), f)):
        a, b = base.get(fact), new.get(fact)
        if a != b and (fact[0] not in (WEIGHTS, BACKEND) or (a is not None and b is not None)):
            found.append(GraphChange(fact, a, b))
    return found


def _more(found: list[GraphChange]) -> str:
    return found[0].sentence() + (f", and {len(found) - 1} more" if len(found) > 1 else "")


def compare_graphs(base: list[RunGraph], new: list[RunGraph]) -> GraphDiff:
    """The candidate runs' graphs against the baseline runs' (all the same, else not
    compared)."""
    cut = next((r for r in (*base, *new) if r.cut is not None), None)
    if cut is not None:
        return GraphDiff(NOT_COMPARED, note=f"{cut.name} {cut.cut}, so its graph may miss "
                         "nodes")
    first = base[0]
    for other in base[1:]:
        if other.facts != first.facts:
            return GraphDiff(NOT_COMPARED, note=(
                f"the baseline's runs differ among themselves ({first.name} against "
                f"{other.name}: {_more(changes(first.facts, other.facts))}), so which graph "
                "is the baseline's is not known"))
    for run in new:
        found = changes(first.facts, run.facts)
        if found:
            return GraphDiff(CHANGED, tuple(found), run.name, len(first.facts))
    return GraphDiff(SAME, facts=len(first.facts))
