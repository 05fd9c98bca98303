"""Finding, for each query, the latest entry of its group at or before a point in time: the
descriptor of each node, the node of each op, the writer of each source."""

from __future__ import annotations

import numpy as np


def latest(group: np.ndarray, at: np.ndarray, q_group: np.ndarray, q_at: np.ndarray,
            before: bool = False) -> np.ndarray:
    """For each query (q_group, q_at), the index of the entry of the same group with the
    greatest `at` no later than q_at (`before`: earlier than it), the last one of equals; -1
    for none. One sorted key for all: `at` within its group's own range of the number line."""
    if len(group) == 0 or len(q_group) == 0:
        return np.full(len(q_group), -1, np.int64)
    _, dense = np.unique(np.concatenate([group, q_group]), return_inverse=True)
    dense = dense.reshape(-1).astype(np.int64)
    at, q_at = at.astype(np.int64), q_at.astype(np.int64)
    origin = int(min(at.min(), q_at.min()))
    span = int(max(at.max(), q_at.max())) - origin + 1
    if span * (int(dense.max()) + 1) >= 1 << 62:
        raise ValueError("recording too long to index")
    key = dense[:len(group)] * span + (at - origin)
    order = np.argsort(key, kind="stable")
    query = dense[len(group):] * span + (q_at - origin)
    pos = np.searchsorted(key[order], query, side="left" if before else "right") - 1
    found = order[np.maximum(pos, 0)]
    return np.where((pos >= 0) & (dense[found] == dense[len(group):]), found, -1)


def last_descriptor(descriptors: np.ndarray, ptrs: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each (tensor, time), the index of the last descriptor of that tensor sent at or
    before that time; -1 for none."""
    return latest(descriptors["ptr"], descriptors["ts"], ptrs, at)
