"""The two sides a check compares, each trace read once for both things judged on it: its
samples (baseline.run_baseline) and its graph (graph.run_graph)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from profinfer_perfetto.check.baseline import Baseline, merged, run_baseline
from profinfer_perfetto.check.graph import (
    NOT_COMPARED,
    GraphDiff,
    RunGraph,
    compare_graphs,
    run_graph,
)
from profinfer_perfetto.check.paired import lined_up, pairable
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery, over_traces


@dataclass(frozen=True)
class Sides:
    base: Baseline
    new: Baseline
    """With `paired`, their runs line up pair by pair (paired.lined_up)."""
    graph: GraphDiff
    """The candidate's graphs against the baseline's."""


def _both(q: TraceQuery) -> tuple[Baseline, RunGraph]:
    return run_baseline(q), run_graph(q)


def read_sides(baseline: list[Path], traces: list[Path], engine: EngineChoice,
               paired: bool = False) -> Sides:
    """The baseline (a saved baseline file, or traces) and the candidate's traces (each there),
    all traces read at once, one engine each. A saved baseline holds no graph, and no pairs."""
    if paired:
        pairable(baseline, traces)
    saved = Baseline.saved(baseline)
    runs = over_traces([*([] if saved else baseline), *traces], _both, engine)
    base_runs, new_runs = runs[: len(runs) - len(traces)], runs[len(runs) - len(traces):]
    new = [b for b, _ in new_runs]
    if saved is not None:
        return Sides(saved, merged(new), GraphDiff(
            NOT_COMPARED, note=f"{baseline[0]} is a saved baseline, which holds no graph: give "
            "the baseline's traces to compare graphs"))
    graph = compare_graphs([g for _, g in base_runs], [g for _, g in new_runs])
    base = [b for b, _ in base_runs]
    if paired:
        return Sides(lined_up(baseline, base, "baseline"), lined_up(traces, new, "candidate"),
                     graph)
    return Sides(merged(base), merged(new), graph)
