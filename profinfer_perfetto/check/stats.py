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


def median_change(base: list[int], new: list[int], confidence: float = 0.95,
                  resamples: int = 2000, seed: int = 0) -> Change:
    """Relative change of the median, with a percentile bootstrap interval.

    Both samples are resampled with replacement `resamples` times; the interval is the
    central `confidence` part of the resampled changes.
    """
    rng = np.random.default_rng(seed)
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(new, dtype=np.float64)
    base_median, new_median = float(np.median(a)), float(np.median(b))

    def medians(x: np.ndarray) -> np.ndarray:
        # Resample in chunks so that memory stays small for long distributions.
        out = np.empty(resamples)
        chunk = max(1, 2_000_000 // len(x))
        for start in range(0, resamples, chunk):
            n = min(chunk, resamples - start)
            out[start:start + n] = np.median(x[rng.integers(0, len(x), (n, len(x)))], axis=1)
        return out

    ratios = medians(b) / np.maximum(medians(a), 1e-9) - 1
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return Change(base_median, new_median, new_median / max(base_median, 1e-9) - 1,
                  float(low), float(high))
