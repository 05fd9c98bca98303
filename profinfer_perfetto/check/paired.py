"""Paired runs: the i-th baseline run and the i-th candidate run (by name) were recorded one right
after the other (`ab` records them so), so that what slows the machine for a while (a speed mode
of a shared runner, another job beside it) slows both runs of a pair alike. A key is judged on
its pairs' ratios, candidate over baseline: what moves both runs of a pair drops out of them,
what the candidate changed stays, and how the ratios spread from pair to pair is the interval."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from profinfer_perfetto.check.baseline import REL, Baseline, describe, merged, runs_of
from profinfer_perfetto.check.stats import (
    Change,
    Spread,
    mean_change,
    median_change,
    moderate,
    t_quantile,
)
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.engines import AUTO, EngineChoice

MIN_PAIRS = 2
"""One pair shows no spread to judge a change by."""
AGREEING_PAIRS = 3
"""Pairs that must all move a mean past its limit for the move to stand without the band
(pairs_agree_past): at 2 threads here the same command's candidate run stalls more than its
baseline run by over +2 % of a step in one pair of four (tiny-llama, 15 of 60 pairs), so two
pairs would agree by chance in about 1 check of 16, three in 1 of 64."""
ROBUST_PAIRS = 4
"""From this many pairs a key is judged on its pairs' median log ratio and their median absolute
deviation, not their mean and standard deviation: at 2 threads here a process now and then runs
in a mode of its own (tiny-llama pinned: 55 pairs of 300 odd, the small matmuls' rel 15-40 % off,
the step mostly 20-80 %), and that one odd pair moves a mean and widens its interval past what
the other pairs show (docs/ab.md, "Odd pairs"). Three pairs hold too little to tell an odd one
by one key's ratios; by all the ops' together they do (odd_pair)."""
MAD_SD = 1.4826
"""A normal distribution's standard deviation over its median absolute deviation."""
ODD_PAIR = 0.02
"""How far a pair's ops' times against each other (their `rel` keys' log ratios, the median
over the keys) may lie from the other pairs' before the pair is taken to straddle a change of
the machine's speed mode (odd_pair). A change of the candidate's moves its keys alike in every
pair, which no pair's distance shows. Here (bench gate, 2026-12-07, the 1200 pairs of its 400
3-pair checks) half the pairs lie within 0.004, nine in ten within 0.018, 100 past 0.02 and the
farthest, split by a mode, 0.03-0.08 (docs/ab.md, "One odd pair of three")."""
ODD_PAIR_KEYS = 3
"""Fewer keys of `rel` kind than this show no pattern of the machine's to tell an odd pair by."""


def pair_up(base: list[Path], new: list[Path], engine: EngineChoice = AUTO
            ) -> tuple[Baseline, Baseline]:
    """The baseline's and the candidate's traces, in name order, as two baselines whose runs
    line up pair by pair (pairable, then lined_up of each side)."""
    pairable(base, new)
    return (lined_up(base, runs_of(base, engine), "baseline"),
            lined_up(new, runs_of(new, engine), "candidate"))


def pairable(base: list[Path], new: list[Path]) -> None:
    """Bad input, before any trace is read: a missing baseline trace, a saved baseline (its runs
    are not pairs), counts that differ, fewer than MIN_PAIRS pairs."""
    if missing := [p for p in base if not p.is_file()]:
        raise ProfinferError(f"no baseline at {missing[0]}")
    if saved := [p for p in base if p.suffix == ".json"]:
        raise ProfinferError(f"--paired pairs runs, and {saved[0]} is a saved baseline: give "
                             "the baseline's traces")
    if len(base) != len(new):
        raise ProfinferError(f"--paired pairs the i-th baseline run with the i-th candidate "
                             f"run, but there are {len(base)} baseline runs and {len(new)} "
                             "candidate runs")
    if len(base) < MIN_PAIRS:
        raise ProfinferError(f"--paired needs {MIN_PAIRS} pairs of runs at least: one pair "
                             "shows no spread to judge a change by")


def lined_up(paths: list[Path], runs: list[Baseline], side: str) -> Baseline:
    """The runs of one side (of the traces `paths`) as one baseline whose runs line up with the
    other side's (a run without a key holds no samples of it). Bad input: runs made from
    different things (models, builds, threads, counters: the tool's version aside, on which a
    run's samples do not depend); the two sides may differ, which is what a paired check
    compares."""
    first = runs[0].made_from
    for path, run in zip(paths[1:], runs[1:], strict=True):
        if differ := [k for k in {**first, **run.made_from} if k != "tool" and
                      first.get(k) != run.made_from.get(k)]:
            raise ProfinferError(
                f"the {side} runs of a paired check must be of one setup, and {path} "
                f"({describe({k: run.made_from.get(k, '') for k in differ})}) is not "
                f"that of {paths[0]} ({describe({k: first.get(k, '') for k in differ})})")
    return _lined_up(runs)


def _lined_up(runs: list[Baseline]) -> Baseline:
    """Runs of one trace each as one baseline, each key with a list per run, empty where the
    run has none of it (baseline.merged leaves such a run out, which would shift the pairs)."""
    keys = sorted({k for run in runs for k in run.samples})
    samples = {k: [run.samples[k][0] if k in run.samples else [] for run in runs] for k in keys}
    return replace(merged(runs), samples=samples)


def _pair_logs(base: list[list[int]], new: list[list[int]]) -> np.ndarray:
    """Each pair's log ratio of medians, candidate over baseline, of the pairs with samples on
    both sides."""
    return np.array([math.log(max(float(np.median(n)), 1e-9) / max(float(np.median(b)), 1e-9))
                     for b, n in zip(base, new, strict=True) if b and n])


def odd_pair(base: Baseline, new: Baseline) -> tuple[int, float] | None:
    """The pair (its index, and how far it lies) whose runs straddle a change of the machine's
    speed mode, if one does: of three pairs, the only one whose decode ops' times against their
    op's other nodes (`rel/decode/...`) lie, as the median over those keys, more than ODD_PAIR
    from the middle pair's. A mode moves many ops' `rel` at once (the small matmuls' by 15-40 %
    here), so the pair it splits lies far on most keys, where a change of the candidate's moves
    every pair alike and a key's own noise lies far on a few. None with two pairs (neither is
    the odd one), from ROBUST_PAIRS (their median needs no help), or where two pairs lie far."""
    keys = [k for k in base.samples if k.startswith(f"{REL}/decode/") and
            all(base.samples[k]) and all(new.samples.get(k, []))]
    if not MIN_PAIRS < base.runs < ROBUST_PAIRS or len(keys) < ODD_PAIR_KEYS:
        return None
    logs = np.array([_pair_logs(base.samples[k], new.samples[k]) for k in keys])
    off = np.median(np.abs(logs - np.median(logs, axis=1, keepdims=True)), axis=0)
    far = np.flatnonzero(off > ODD_PAIR)
    return (int(far[0]), float(off[far[0]])) if len(far) == 1 else None


def without_pair(side: Baseline, pair: int) -> Baseline:
    """One side's runs less the `pair`-th."""
    return replace(side, samples={k: runs[:pair] + runs[pair + 1:]
                                  for k, runs in side.samples.items()})


def pairs_agree_past(base: list[list[int]], new: list[list[int]], scale: float,
                     limit: float) -> bool:
    """Whether a key judged by its mean (stats.mean_change) moved past `limit` in every pair,
    the same way: each candidate run's mean against its own baseline run's, over `scale`. One
    baseline run that stalled (a task beside it) widens the band of the runs' means
    (stats.mean_noise) past the candidate's stalls; it cannot hide a move that every pair
    shows. Fewer than AGREEING_PAIRS pairs with samples on both sides: no."""
    moves = _mean_moves(base, new, scale)
    return len(moves) >= AGREEING_PAIRS and bool(np.all(moves > limit) or np.all(moves < -limit))


def _mean_moves(base: list[list[int]], new: list[list[int]], scale: float) -> np.ndarray:
    """Each pair's move of a key's mean: its candidate run's mean less its baseline run's, over
    `scale`, of the pairs with samples on both sides."""
    return np.array([(float(np.mean(n)) - float(np.mean(b))) / max(scale, 1e-9)
                     for b, n in zip(base, new, strict=True) if b and n])


def pair_mean_change(base: list[list[int]], new: list[list[int]], scale: float) -> Change:
    """The change of a key judged by its mean (stats.mean_change) on pairs of runs: the median
    of its pairs' moves (_mean_moves). One run that stalled for a while (a task beside it) moves
    one pair, which the median of three or more leaves out, where it moved the pooled mean by a
    share of its whole stall (at 2 threads here one candidate run of the same command stalled
    20-43 % of a step in 3 checks of 20, flagging them: docs/ab.md); a busy machine for the whole
    candidate side moves every pair, and so the median. No interval, as unpaired; Change.base
    and .new are each side's pooled mean. Fewer than MIN_PAIRS pairs: as unpaired."""
    pooled = mean_change(base, new, scale)
    moves = _mean_moves(base, new, scale)
    if len(moves) < MIN_PAIRS:
        return pooled
    change = float(np.median(moves))
    return replace(pooled, change=change, low=change, high=change)


def pair_spread(base: list[list[int]], new: list[list[int]]) -> Spread | None:
    """How the pairs' log ratios of a key spread (None from fewer than MIN_PAIRS pairs): what
    stats.common_spread pools over the keys of a rule. Their variance; from ROBUST_PAIRS
    pairs, the square of their median absolute deviation made a standard deviation (MAD_SD)."""
    return _spread(_pair_logs(base, new))


def _spread(logs: np.ndarray) -> Spread | None:
    """pair_spread of these log ratios."""
    if len(logs) < MIN_PAIRS:
        return None
    if len(logs) < ROBUST_PAIRS:
        return Spread(float(np.var(logs, ddof=1)), len(logs) - 1)
    deviation = MAD_SD * float(np.median(np.abs(logs - np.median(logs))))
    return Spread(deviation * deviation, len(logs) - 1)


def pair_change(base: list[list[int]], new: list[list[int]], confidence: float = 0.95,
                resamples: int = 2000, prior: Spread | None = None) -> Change:
    """The change of a key's median judged on pairs of runs (`base[i]` with `new[i]`): each
    pair's ratio of medians, candidate over baseline; their geometric mean as the change, with
    the `confidence` Student's t interval of the mean of their logarithms. Their variance is
    moderated towards `prior` (the pairs' spread common to the keys of the rule, stats.moderate):
    three pairs alone give a variance of two degrees of freedom, and t at 97.5 % of 4.3. From
    ROBUST_PAIRS pairs their median and its interval instead: the median's variance taken as
    π/2 times the mean's, as for a normal sample (pair_spread's deviation then a robust one).
    Change.base and .new are each side's pooled median, as in median_change. A key held by fewer
    than MIN_PAIRS pairs (both sides) is compared as unpaired runs are (median_change)."""
    logs = _pair_logs(base, new)
    own = _spread(logs)
    if own is None:
        return median_change(base, new, confidence, resamples)
    robust = len(logs) >= ROBUST_PAIRS
    center = float(np.median(logs) if robust else np.mean(logs))
    spread = moderate(own, prior)
    variance = (math.pi / 2 if robust else 1.0) * spread.variance / len(logs)
    half = t_quantile(0.5 + confidence / 2, spread.dof) * math.sqrt(variance)
    pooled = [float(np.median([s for run in side for s in run])) for side in (base, new)]
    return Change(pooled[0], pooled[1], math.expm1(center), math.expm1(center - half),
                  math.expm1(center + half))
