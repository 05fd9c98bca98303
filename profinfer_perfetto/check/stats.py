"""How sure a change of the median is: a bootstrap confidence interval, numpy only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Change:
    base_median: float
    new_median: float
    change: float
    """new_median / base_median - 1."""
    low: float
    high: float
    """The confidence interval of `change`."""


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

    base_median = float(np.median(np.concatenate([np.asarray(r, float) for r in base])))
    new_median = float(np.median(np.concatenate([np.asarray(r, float) for r in new])))
    ratios = _relative(medians(new), medians(base))
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    change = float(_relative(np.array([new_median]), np.array([base_median]))[0])
    return Change(base_median, new_median, change, float(low), float(high))


def _relative(new: np.ndarray, base: np.ndarray) -> np.ndarray:
    """new / base - 1; 0 where they are equal (also both 0, as a key of waits often is)."""
    change: np.ndarray = (new - base) / np.maximum(base, 1e-9)
    return change
