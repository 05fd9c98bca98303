"""Where each watched key has been going: its median run by run over a history of runs (the
baseline's, oldest first) and the candidate, with a fitted drift, so that a slow creep shows
before any one change crosses the limit."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from profinfer_perfetto.check.baseline import Baseline
from profinfer_perfetto.check.rules import percent
from profinfer_perfetto.check.verdict import REGRESSION, CheckResult
from profinfer_perfetto.files import write_whole


@dataclass(frozen=True)
class Trend:
    key: str
    medians: list[float]
    """The median of each baseline run, oldest first, then the candidate's."""
    per_run: float
    """The fitted relative change per run (least squares on the log-medians)."""
    drift: float
    """The fitted change from the first run to the candidate."""
    limit: float
    direction: str

    @property
    def drifting(self) -> bool:
        """The fitted drift is past the rule's limit, the worse way."""
        worse = self.drift if self.direction == "increase" else -self.drift
        return worse > self.limit


MIN_HISTORY = 5
"""Baseline runs a drift is told from: with fewer, the trend is mostly the candidate's own
change (three pooled runs and a candidate 25 % off read as a drift of 30 %)."""


def trends(result: CheckResult, base: Baseline) -> list[Trend]:
    """A trend for each decided key of the check judged by its median (two points at least;
    a mean of stalls is mostly none, whose logarithm has no trend)."""
    out = []
    for v in result.verdicts:
        if v.change is None or v.rule.by_mean:
            continue
        medians = [float(np.median(r)) for r in base.samples[v.key] if r]
        medians.append(v.change.new)
        logs = np.log(np.maximum(medians, 1e-9))
        slope = float(np.polyfit(np.arange(len(logs)), logs, 1)[0])
        out.append(Trend(v.key, medians, math.expm1(slope),
                         math.expm1(slope * (len(logs) - 1)), v.rule.max_change,
                         v.rule.direction))
    return out


def drift_warnings(found: list[Trend], result: CheckResult) -> list[str]:
    """A sentence for each key drifting past its limit that is no regression (yet), over a
    history of MIN_HISTORY runs or more."""
    failed = {v.key for v in result.verdicts if v.verdict == REGRESSION}
    return [f"{t.key} drifts {t.drift:+.1%} over the last {len(t.medians) - 1} runs and the "
            f"candidate ({t.per_run:+.1%} a run; limit {percent(t.limit)}): no single change "
            "crossed it" for t in found
            if t.drifting and t.key not in failed and len(t.medians) > MIN_HISTORY]


def write_json(found: list[Trend], path: Path) -> None:
    doc = [{**asdict(t), "drifting": t.drifting} for t in found]
    write_whole(path, json.dumps(doc, indent=1) + "\n")
