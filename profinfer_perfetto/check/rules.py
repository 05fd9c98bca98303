"""What `check` watches: rules over the baseline's sample keys, from TOML or the defaults.

    [settings]
    confidence = 0.95     # of the interval on the change of the median
    min_samples = 5       # fewer on either side: too small to decide
    resamples = 2000      # bootstrap resamples
    prior_dof = 8         # what the run-to-run spread common to the keys judged is worth beside
                          # a key's own, in degrees of freedom (0: each key's runs alone)
    per_check = true      # the runs' noise band holds at `confidence` for the whole check, all
                          # keys together (false: for each key alone)

    [[rule]]
    name = "decode step latency"
    keys = "step/decode"  # a pattern (fnmatch) over keys: step/PHASE, window/PHASE (the wall
                          # time of each 8 consecutive steps over 8), op/PHASE/OP/ROLE,
                          # share/PHASE/OP/ROLE (the op's share of each step),
                          # rel/PHASE/OP/ROLE (per step, the op's time over that of its
                          # op's other nodes),
                          # interference/PHASE (time stalled per step; traces made with --sched)
    max_change = 0.05     # relative change of the median that fails, once the interval clears it
    min_abs_ns = 0        # changes of the median smaller than this never fail
    top = 0               # keep only the N keys with the largest share of the phase's time
    direction = "increase"  # which way is worse: "increase" or "decrease"
    statistic = "median"  # or "mean", for keys of rare large values (interference/PHASE):
                          # the change of the mean as a part of the phase's mean step time
                          # (max_change 0.02: a fiftieth of a step more), no interval,
                          # judged against the band of one more run's mean
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from profinfer_perfetto.errors import ProfinferError


@dataclass(frozen=True)
class Rule:
    name: str
    keys: str
    max_change: float
    min_abs_ns: float = 0
    top: int = 0
    direction: str = "increase"
    statistic: str = "median"

    @property
    def by_mean(self) -> bool:
        """Judged by the change of its mean as a part of a step (stats.mean_change), with no
        interval; else by the change of its median (stats.median_change)."""
        return self.statistic == MEAN


def percent(limit: float) -> str:
    """A rule's limit as a signed percentage, as precise as it was set (+5%, +2.25%)."""
    return f"{limit * 100:+g}%"


MEAN = "mean"
STATISTICS = ("median", MEAN)


@dataclass(frozen=True)
class Settings:
    confidence: float = 0.95
    min_samples: int = 5
    resamples: int = 2000
    prior_dof: float = 8
    """Degrees of freedom the run-to-run spread common to the keys a check judges is worth
    beside a key's own (stats.run_noise; with --paired, the pairs' spread common to the keys of
    the key's rule, paired.pair_change); 0: each key's own runs alone. 8 from bench gate: the
    fewest false alarms with the most caught of the settings tried (docs/check.md, docs/ab.md)."""
    per_check: bool = True
    """The noise band's confidence holds for a check as a whole (Bonferroni over its keys):
    about one false alarm in 1 / (1 - confidence) checks, however many keys each judges."""


DEFAULT_RULES = (
    Rule("decode step latency", "step/decode", 0.05),
    # What a run sustains: a CPU shared with another task stretches a few steps in each
    # scheduler slice, or the time between them, which moves the wall time of 8 steps and not
    # the median step (bench gate, docs/check.md).
    Rule("decode time per step over 8 steps", "window/decode", 0.10),
    Rule("prefill latency", "step/prefill", 0.10),
    # Ops by their time against the other nodes of their op in the same step, not their
    # absolute time: a slower or busier machine slows every op alike (runs of one command here
    # differ by 5-30 % as a whole), which moves no op's rel; a change to one op's kernel or
    # tensor moves its rel in full (a share moves by less, the smaller the op). Chosen on
    # bench gate's recordings with one op class slowed by 10 and 5 % (docs/check.md): +2.25 %,
    # under the +3.7 % that 5 % slower matmuls move their nodes at tiny-llama t2 (their barrier
    # waits do not slow) by about the half-width of 3 pairs' interval; at +3 % the slowed nodes
    # were caught in 7 of 20 checks there, at +2 % the same build was flagged in 2 (docs/ab.md).
    Rule("top decode ops against their op's other nodes", "rel/decode/*", 0.0225, top=10),
    Rule("top prefill ops against their op's other nodes", "rel/prefill/*", 0.10, top=5),
    # Traces recorded with --sched: time a decode thread waited for a CPU, per step. Nearly
    # always none, and a task on the target's CPU takes a few whole scheduler slices a run,
    # which a median never sees: the mean, as a part of the mean step (bench gate, docs/check.md).
    Rule("decode time stalled waiting for a CPU", "interference/decode", 0.02,
         statistic=MEAN),
)


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "float": (int, float), "int": (int,),
                                       "bool": (bool,)}
"""The TOML values each field's type takes (a bool is no number here)."""
_RANGES: dict[str, tuple[float, float]] = {
    "confidence": (0.5, 0.999), "min_samples": (1, 1e9), "resamples": (1, 1e6),
    "prior_dof": (0, 1e9), "max_change": (-1e9, 1e9), "min_abs_ns": (0, 1e18), "top": (0, 1e9)}
"""The values a numeric setting may take (a confidence short of 1, which no interval has)."""


def _build(cls: Any, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise ProfinferError(f"{where}: not a table")
    known = {f.name: f for f in fields(cls)}
    unknown = set(table) - set(known)
    if unknown:
        raise ProfinferError(f"{where}: unknown setting {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
    for name, value in table.items():
        kinds = _TYPES[str(known[name].type)]
        low, high = _RANGES.get(name, (-math.inf, math.inf))
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise ProfinferError(f"{where}: {name} = {value!r:.40} is not a {known[name].type}")
        if isinstance(value, int | float) and not low <= value <= high:
            raise ProfinferError(f"{where}: {name} = {value!r} is not within {low}..{high}")
    try:
        return cls(**table)
    except TypeError as exc:
        raise ProfinferError(f"{where}: {exc}") from None


def load_rules(path: Path | None) -> tuple[tuple[Rule, ...], Settings]:
    if path is None:
        return DEFAULT_RULES, Settings()
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ProfinferError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfinferError(f"{path} is not valid TOML: {exc}") from None
    settings = _build(Settings, doc.get("settings", {}), f"{path} [settings]")
    listed = doc.get("rule", [])
    if not isinstance(listed, list):
        raise ProfinferError(f"{path}: rule is not an array of tables ([[rule]])")
    rules = tuple(_build(Rule, r, f"{path} rule {i + 1}") for i, r in enumerate(listed))
    for r in rules:
        if r.direction not in ("increase", "decrease"):
            raise ProfinferError(f"{path}: rule {r.name!r} has direction {r.direction!r}, "
                                 "not increase or decrease")
        if r.statistic not in STATISTICS:
            raise ProfinferError(f"{path}: rule {r.name!r} has statistic {r.statistic!r}, "
                                 "not median or mean")
    return rules or DEFAULT_RULES, settings
