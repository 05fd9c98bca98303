"""How sure a change of the median is (a bootstrap confidence interval), and how far runs of
the same thing stray from each other (a prediction band from the baseline's runs); the change of
a mean, for keys of rare large values; numpy only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Change:
    base: float
    new: float
    """The statistic (median or mean) of each side's pooled samples."""
    change: float
    """new / base - 1 for a median; for a mean, (new - base) over the scale it is judged by."""
    low: float
    high: float
    """The confidence interval of `change` (for a mean, `change` both: no interval)."""


def _pooled(runs: list[list[int]]) -> np.ndarray:
    """The runs' samples as one."""
    return np.concatenate([np.asarray(r, np.float64) for r in runs])


def median_change(base: list[list[int]], new: list[list[int]], confidence: float = 0.95,
                  resamples: int = 2000, seed: int = 0) -> Change:
    """Relative change of the pooled median, with a percentile bootstrap interval.

    Each side is a list of runs, each run a list of samples. A resample draws runs with
    replacement, then samples with replacement from what they pooled, so that with several
    runs the interval also holds the run-to-run variation (with one, only the within-run
    one). The interval is the central `confidence` part of the resampled changes.
    """
    rng = np.random.default_rng(seed)

    def medians(runs: list[list[int]]) -> np.ndarray:
        arrays = [np.asarray(r, dtype=np.float64) for r in runs if r]
        if len(arrays) == 1:
            # One run: resample in chunks so that memory stays small for long runs.
            x = arrays[0]
            out = np.empty(resamples)
            chunk = max(1, 2_000_000 // len(x))
            for start in range(0, resamples, chunk):
                n = min(chunk, resamples - start)
                out[start:start + n] = np.median(x[rng.integers(0, len(x), (n, len(x)))],
                                                 axis=1)
            return out
        picks = rng.integers(0, len(arrays), (resamples, len(arrays)))
        out = np.empty(resamples)
        for i, pick in enumerate(picks):
            pooled = np.concatenate([arrays[j] for j in pick])
            out[i] = np.median(pooled[rng.integers(0, len(pooled), len(pooled))])
        return out

    base_median, new_median = float(np.median(_pooled(base))), float(np.median(_pooled(new)))
    ratios = _relative(medians(new), medians(base))
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    change = float(_relative(np.array([new_median]), np.array([base_median]))[0])
    return Change(base_median, new_median, change, float(low), float(high))


def mean_change(base: list[list[int]], new: list[list[int]], scale: float) -> Change:
    """The change of the pooled mean over `scale` (a key of time stalled per step: over the
    phase's mean step time, so +0.10 is a tenth of a step more). No interval: stalls come a few
    scheduler slices a run, too few steps for a bootstrap over steps to bound their mean (with
    three stalled steps of 47, one resample in twenty holds none); the band of the baseline's
    runs (mean_noise) is what guards it."""
    base_mean, new_mean = float(np.mean(_pooled(base))), float(np.mean(_pooled(new)))
    change = (new_mean - base_mean) / max(scale, 1e-9)
    return Change(base_mean, new_mean, change, change, change)


def mean_noise(sides: list[list[list[int]]], scale: float, confidence: float) -> float | None:
    """How far the mean of one more run may lie from its side's runs' mean, over `scale`: the
    `confidence` prediction band from the runs' means (Student's t, widened by
    sqrt(1 + 1/runs)), on a linear scale (a mean of stalls is often 0, whose logarithm
    run_noise would need); None with fewer than two runs on every side. Where runs stall alike
    (2 threads on 2 CPUs beside the recorder: up to 19 % of a step) it is wide; where they never
    do (1 thread pinned), it is about 0 and the rule's limit decides. `sides`: the baseline's
    runs alone, or (a paired check) both sides', each run's mean taken about its own side's
    mean and pooled: where nothing changed the candidate's runs stray as the baseline's do, and
    three baseline runs that happened to stall alike gave a band of 2-3 % of a step that one
    uneven candidate side crossed (docs/ab.md, "A fresh set")."""
    means = [[float(np.mean(r)) for r in side if r] for side in sides]
    means = [m for m in means if len(m) >= 2]
    if not means:
        return None
    both = pooled([Spread(float(np.var(m, ddof=1)), len(m) - 1) for m in means])
    spread = math.sqrt(both.variance * (1 + 1 / len(means[0])))
    return t_quantile(0.5 + confidence / 2, both.dof) * spread / max(scale, 1e-9)


def _relative(new: np.ndarray, base: np.ndarray) -> np.ndarray:
    """new / base - 1; 0 where they are equal (also both 0, as a key of waits often is)."""
    change: np.ndarray = (new - base) / np.maximum(base, 1e-9)
    return change


@dataclass(frozen=True)
class Spread:
    """How far runs of the same thing stray from each other: the variance of their medians'
    logarithms (mean_noise: of their means), with its degrees of freedom (runs - 1)."""

    variance: float
    dof: float


def run_spread(runs: list[list[int]]) -> Spread | None:
    """None with fewer than two runs, which show no spread."""
    medians = np.log([max(float(np.median(r)), 1e-9) for r in runs if r])
    if len(medians) < 2:
        return None
    return Spread(float(np.var(medians, ddof=1)), len(medians) - 1)


def common_spread(spreads: list[Spread], dof: float) -> Spread | None:
    """What the spreads of several keys say of a key's spread before its own runs are seen:
    their median variance, worth `dof` degrees of freedom. None from fewer than three keys."""
    if len(spreads) < 3 or dof <= 0:
        return None
    return Spread(float(np.median([s.variance for s in spreads])), dof)


def run_noise(own: Spread, confidence: float, prior: Spread | None = None) -> float:
    """How far the median of one more run may lie from the pooled median of the runs `own` was
    measured on, as a relative change: the `confidence` prediction band of a new run's
    log-median (Student's t, widened by sqrt(1 + 1/runs) for the new run).

    With a `prior` (common_spread of the keys a check judges), the key's own variance is moderated
    towards it, as limma moderates the variances of few replicates (Smyth 2004): a weighted mean
    of the two by their degrees of freedom, with their sum as its own. Three runs alone give a
    variance from two degrees of freedom: one odd run makes the band huge, and three runs that
    happen to agree make it too narrow; the keys beside it know better what runs do.
    """
    runs = own.dof + 1
    moderated = moderate(own, prior)
    spread = math.sqrt(moderated.variance * (1 + 1 / runs))
    return math.expm1(t_quantile(0.5 + confidence / 2, moderated.dof) * spread)


def moderate(own: Spread, prior: Spread | None) -> Spread:
    """A key's own spread moderated towards `prior` (common_spread of the keys beside it): the
    mean of the two variances weighted by their degrees of freedom, with their sum as its own."""
    return own if prior is None else pooled([prior, own])


def pooled(spreads: list[Spread]) -> Spread:
    """Spreads of samples about their own means taken as one: their variances' mean weighted
    by their degrees of freedom, with their sum as its own."""
    dof = sum(s.dof for s in spreads)
    return Spread(sum(s.dof * s.variance for s in spreads) / dof, dof)


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile (p > 0.5), by bisection on its CDF integrated numerically."""

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 4001)
        log_norm = (math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)
                    - 0.5 * math.log(dof * math.pi))
        pdf = np.exp(log_norm - (dof + 1) / 2 * np.log1p(grid * grid / dof))
        return 0.5 + float(np.sum((pdf[1:] + pdf[:-1]) / 2 * np.diff(grid)))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2
