"""Finding, for each query, the latest entry of its group at or before a point in time: the
descriptor of each node, the node of each op, the writer of each source; and the entry of a
graph with a tensor address."""

from __future__ import annotations

import numpy as np

from profinfer_perfetto.model import native


class Latest:
    """Entries (group, at), sorted once for any number of lookups (a chunk's descriptors are
    looked up for its nodes, its fused pairs' sources and more): one sorted key for all, `at`
    within its group's own range of the number line."""

    def __init__(self, group: np.ndarray, at: np.ndarray) -> None:
        groups = np.sort(group)  # np.unique, cheaper
        new = np.ones(len(groups), bool)
        new[1:] = groups[1:] != groups[:-1]
        self.groups = groups[new]
        self.dense = np.searchsorted(self.groups, group)
        at = at.astype(np.int64)
        # A query's time is clipped to the entries' range, just before their first to just
        # after their last (it finds the same entries there), so the key needs only theirs.
        self.origin = int(at.min()) - 1 if len(at) else 0
        self.span = (int(at.max()) + 1 if len(at) else 0) - self.origin + 1
        if self.span * (len(self.groups) + 1) >= 1 << 62:
            raise ValueError("recording too long to index")
        self.key = self.dense * self.span + (at - self.origin)
        self.order = np.argsort(self.key, kind="stable")
        self.sorted_key = self.key[self.order]

    def find(self, q_group: np.ndarray, q_at: np.ndarray, before: bool = False) -> np.ndarray:
        """For each query (q_group, q_at), the index of the entry of the same group with the
        greatest `at` no later than q_at (`before`: earlier than it), the last one of equals;
        -1 for none."""
        if len(self.groups) == 0 or len(q_group) == 0:
            return np.full(len(q_group), -1, np.int64)
        dense = np.minimum(np.searchsorted(self.groups, q_group), len(self.groups) - 1)
        at = np.minimum(np.maximum(q_at.astype(np.int64), self.origin),
                        self.origin + self.span - 1)
        query = dense * self.span + (at - self.origin)
        pos = np.searchsorted(self.sorted_key, query, side="left" if before else "right") - 1
        found = self.order[np.maximum(pos, 0)]
        hit = (pos >= 0) & (self.dense[found] == dense) & (self.groups[dense] == q_group)
        return np.where(hit, found, -1)


def latest(group: np.ndarray, at: np.ndarray, q_group: np.ndarray, q_at: np.ndarray,
           before: bool = False) -> np.ndarray:
    """For each query (q_group, q_at), the index of the entry of the same group with the
    greatest `at` no later than q_at (`before`: earlier than it), the last one of equals; -1
    for none."""
    if len(q_group) == 0:
        return np.full(0, -1, np.int64)
    return Latest(group, at).find(q_group, q_at, before)


def by_tensor(descriptors: np.ndarray) -> Latest:
    """Node descriptors (NODE records), for last_descriptor."""
    return Latest(descriptors["ptr"], descriptors["ts"])


def last_descriptor(descriptors: np.ndarray | Latest, ptrs: np.ndarray,
                    at: np.ndarray) -> np.ndarray:
    """For each (tensor, time), the index of the last descriptor of that tensor sent at or
    before that time (`descriptors`: NODE records, or by_tensor of them); -1 for none."""
    index = descriptors if isinstance(descriptors, Latest) else by_tensor(descriptors)
    return index.find(ptrs, at)


def in_graph(graph: np.ndarray, ptr: np.ndarray, q_graph: np.ndarray, q_ptr: np.ndarray
             ) -> np.ndarray:
    """For each query (a graph, a tensor address), the index of the last entry (`graph`, `ptr`)
    equal to it, -1 for none. By passes.c where the install built it (model/native.py), else by
    numpy: the same."""
    if native.PASSES is not None:
        return native.PASSES.node_index(graph, ptr, q_graph, q_ptr)
    found = Latest(ptr, graph).find(q_ptr, q_graph)
    same = found >= 0
    same[same] = graph[found[same]] == q_graph[same]
    return np.where(same, found, -1)
