"""Structured records (capture/events.py's dtypes) copied whole, and the distinct values of
keys.

numpy indexes, concatenates and copies a structured array item by item, field by field (ten
to thirty times slower than copying its bytes); the records have no holes, so the model copies
their bytes instead, through a view of each record as one opaque value of its size.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def whole(records: np.ndarray) -> np.ndarray:
    """The records, each as one opaque value of its bytes (a view)."""
    return records.view(np.dtype((np.void, records.dtype.itemsize)))


def take(records: np.ndarray, index: Any) -> np.ndarray:
    """records[index] (an index array or a mask, a tuple of them for more dimensions)."""
    taken: np.ndarray = whole(records)[index].view(records.dtype)
    return taken


def concat(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of records of one dtype."""
    joined: np.ndarray = np.concatenate([whole(p) for p in parts]).view(parts[0].dtype)
    return joined


def copied(records: np.ndarray) -> np.ndarray:
    """A copy of the records."""
    return whole(records).copy().view(records.dtype)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique(values) of a 1-D array, by sorting it: numpy's own (since 2.3) hashes, which
    took eight times as long on the model's int64 keys (2026-12-02, numpy 2.4: 15 k keys with a
    third repeated, 2.0 ms against 0.23)."""
    ordered = np.sort(values)
    new = np.ones(len(ordered), bool)
    new[1:] = ordered[1:] != ordered[:-1]
    kept: np.ndarray = ordered[new]
    return kept


def threads_of(tids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(tids, return_inverse=True) of thread ids (a few distinct values among many):
    the threads, and each item's thread among them; numpy's sort of its argsort took seven times
    as long on 25 k ops of 2 threads (2026-12-02: 1.9 ms against 0.28)."""
    threads = sorted_unique(tids)
    return threads, np.searchsorted(threads, tids)


def dense_unique(values: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) of values in [0, bound) (row numbers, positions),
    by a table of the bound's size, not a sort."""
    present = np.zeros(bound, bool)
    present[values] = True
    number = np.cumsum(present) - 1
    return np.flatnonzero(present), number[values]


def first_rows(which: np.ndarray, count: int) -> np.ndarray:
    """Of rows each of one of `count` groups (`which`: each row's, every group used), each
    group's first row (np.minimum.at: numpy promises no order for a repeated index's writes)."""
    first = np.full(count, len(which), np.int64)
    np.minimum.at(first, which, np.arange(len(which)))
    return first
