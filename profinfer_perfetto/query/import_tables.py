"""trace_processor's tables from the events the import read (query/import_read.py): tracks
as events first use them, slices nested on their tracks, counters, flows and the args used."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from profinfer_perfetto.query.import_read import Reader
from profinfer_perfetto.query.import_scan import index_in_group
from profinfer_perfetto.query.import_state import (
    BEGIN,
    COUNTER,
    END,
    INSTANT,
    ArgSets,
    Descriptor,
)


@dataclass
class _Track:
    id: int
    descriptor: Descriptor
    scope: str
    """"thread", "process" or "global": the nearest thread or process track above it."""
    utid: int | None


class _Tracks:
    """Tracks as trace_processor makes them: when first used, parents first."""

    def __init__(self, descriptors: dict[int, Descriptor]) -> None:
        self.descriptors = descriptors
        self.made: dict[int, _Track] = {}

    def use(self, uuid: int) -> None:
        """Make a described track, its parents first (a chain of parents that loops back is
        followed up to where it loops)."""
        chain: dict[int, None] = {}
        while uuid not in self.made and uuid in self.descriptors and uuid not in chain:
            chain[uuid] = None
            uuid = self.descriptors[uuid].parent
        for made in reversed(chain):
            self._make(self.descriptors[made])

    def _make(self, d: Descriptor) -> None:
        parent = self.made.get(d.parent)
        if d.kind in ("thread", "process"):
            scope, utid = d.kind, d.utid
        elif parent is not None:
            scope, utid = parent.scope, parent.utid
        else:
            scope, utid = "global", None
        self.made[d.uuid] = _Track(len(self.made), d, scope, utid)

    def rows(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """track, thread_track and counter_track rows."""
        tracks: list[tuple[Any, ...]] = []
        thread_tracks: list[tuple[Any, ...]] = []
        counter_tracks: list[tuple[Any, ...]] = []
        for t in self.made.values():
            d = t.descriptor
            if d.kind == "thread":
                tracks.append((t.id, None, "thread_execution"))
                thread_tracks.append((t.id, None, t.utid))
            elif d.kind == "process":
                tracks.append((t.id, None, "process_track_event"))
            elif d.kind == "counter":
                tracks.append((t.id, d.name, f"{t.scope}_counter_track_event"))
                counter_tracks.append((t.id, d.name, d.unit))
            else:
                tracks.append((t.id, d.name, f"{t.scope}_merged_track_event"))
                if t.scope == "thread":
                    thread_tracks.append((t.id, d.name, t.utid))
        return tracks, thread_tracks, counter_tracks


@dataclass
class _Nesting:
    """Slices from begin, end and instant events on tracks (in parse order)."""

    slice_of: np.ndarray
    """Per event: the slice it begins or ends (-1: an end with no open slice)."""
    depth: np.ndarray
    parent: np.ndarray
    """Per slice."""
    end_of: np.ndarray
    """Per slice: the event that ends it, -1 for none."""
    begins: np.ndarray
    """Per slice: its begin or instant event."""


def _nest(track: np.ndarray, kind: np.ndarray) -> _Nesting:
    """Depth and parent of each slice from the nesting on its track, as trace_processor's
    slice stacks give them, without a Python step per event.

    On a track (its events in parse order), an event's depth is the running count of begins
    minus ends; the slice an end closes, or the parent of a slice, is the latest begin one
    level up, found for all events of a level by one running maximum. (32-bit columns: half
    the memory to touch.)
    """
    n = len(track)
    by_track = np.argsort(track.astype(np.uint16) if track.max(initial=0) < 1 << 16 else track,
                          kind="stable").astype(np.int32)  # a radix sort for 16-bit keys
    group, k = track[by_track], kind[by_track]
    step = (k == BEGIN).astype(np.int8) - (k == END)
    start = _group_starts(group)
    depth = _grouped_cumsum(step, start)
    if depth.min(initial=0) < 0:
        step[_unmatched_ends(depth, step, start)] = 0
        depth = _grouped_cumsum(step, start)
    before = depth - step
    level = before - (step == -1)
    at = np.arange(n, dtype=np.int32)
    open_at = np.full(n, -1, np.int32)
    """Per event (by track): for an end, the begin it closes; for a slice, its parent's."""
    for lvl in range(int(level.max(initial=-1)) + 1):
        latest = np.maximum.accumulate(np.where((step == 1) & (level == lvl), at, -1))
        asks = np.flatnonzero(((step == -1) & (level == lvl)) | ((k != END) & (level == lvl + 1)))
        found = latest[asks]
        open_at[asks] = np.where(found >= start[asks], found, -1)
    opens = kind != END
    slice_of = np.cumsum(opens, dtype=np.int32) - 1
    slice_of[~opens] = -1
    sorted_slice = slice_of[by_track]
    closing = np.flatnonzero(step == -1)
    closed = sorted_slice[open_at[closing]]
    slice_of[by_track[closing]] = closed
    end_of = np.full(int(opens.sum()), -1, np.int32)
    end_of[closed] = by_track[closing]
    slices = np.flatnonzero(k != END)
    parent = np.where(before[slices] > 0, sorted_slice[open_at[slices]], -1)
    depth_of = np.empty(len(end_of), np.int32)
    depth_of[sorted_slice[slices]] = before[slices]
    parent_of = np.empty(len(end_of), np.int32)
    parent_of[sorted_slice[slices]] = parent
    return _Nesting(slice_of, depth_of, parent_of, end_of, np.flatnonzero(opens))


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Per entry (groups contiguous): where its group starts."""
    new = np.flatnonzero(np.diff(group, prepend=group[:1] - 1)).astype(np.int32)
    return np.repeat(new, np.diff(np.append(new, len(group))))


def _grouped_cumsum(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Running sums of `values` restarting at each group's start."""
    total = np.cumsum(values, dtype=np.int32)
    sums: np.ndarray = total - (total[start] - values[start])
    return sums


def _unmatched_ends(depth: np.ndarray, step: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Ends (by position) that find no open slice on their track: trace_processor drops them.

    With those dropped, the depth is the running sum less its running minimum where that is
    below 0 (within the group: each group's minima are offset below all earlier groups')."""
    offset = np.cumsum(start == np.arange(len(start))) * (2 * len(step) + 2)
    floored = depth - np.minimum(np.minimum.accumulate(depth - offset) + offset, 0)
    floored_before = np.concatenate([[0], floored[:-1]])
    floored_before[start == np.arange(len(start))] = 0
    return np.flatnonzero((step == -1) & (floored_before == 0))


@dataclass
class Tables:
    """The rows of each table."""

    tracks: list[tuple[Any, ...]]
    thread_tracks: list[tuple[Any, ...]]
    counter_tracks: list[tuple[Any, ...]]
    slices: dict[str, np.ndarray]
    counters: dict[str, np.ndarray]
    flows: tuple[np.ndarray, np.ndarray]
    args: list[tuple[Any, ...]]


class _Described:
    """The described tracks, by uuid: which an event's uuid names, and what kind it is."""

    def __init__(self, descriptors: dict[int, Descriptor]) -> None:
        self.uuids = np.array(sorted(descriptors), np.uint64)
        self.is_counter = np.array([descriptors[u].kind == "counter"
                                    for u in self.uuids.tolist()] + [False])
        self.none = len(self.uuids)

    def of(self, uuids: np.ndarray) -> np.ndarray:
        """Each uuid's index among the described ones; `none` for one never described."""
        if not self.none:
            return np.full(len(uuids), self.none, np.int32)
        at = np.minimum(np.searchsorted(self.uuids, uuids), self.none - 1).astype(np.int32)
        at[self.uuids[at] != uuids] = self.none
        return at


def _parse_order(ts: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kept events in trace_processor's parse order (by timestamp, ties in file order),
    and each event's place in it (-1: not kept). Our traces are in that order already."""
    order = np.arange(len(keep), dtype=np.int32)
    if not keep.all():
        order = order[keep]
    kept_ts = ts if len(order) == len(ts) else ts[order]
    if (kept_ts[1:] < kept_ts[:-1]).any():
        order = order[np.argsort(kept_ts, kind="stable")]
    rank = np.full(len(keep), -1, np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return order, rank


def _made_tracks(reader: Reader, described: _Described, own: np.ndarray, extra_rank: np.ndarray,
                 extra: np.ndarray) -> _Tracks:
    """The tracks in the order trace_processor makes them: as events use them, in parse order,
    an event's extra counter tracks before its own (`own`: each event's, in parse order)."""
    index = index_in_group(extra_rank)
    use = np.concatenate([extra_rank.astype(np.int64) * 16 + index,
                          np.arange(len(own), dtype=np.int64) * 16 + 15])
    never = np.iinfo(np.int64).max
    first_use = np.full(described.none + 1, never)
    np.minimum.at(first_use, np.concatenate([extra, own]), use)
    tracks = _Tracks(reader.descriptors)
    used = np.argsort(first_use)[: np.count_nonzero(first_use < never)]
    for d in used.tolist():
        tracks.use(int(described.uuids[d]))
    return tracks


def _slices(ev: dict[str, np.ndarray], order: np.ndarray, track: np.ndarray,
            args: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The slice rows (in parse order of their begin), and each event's slice (-1: none)."""
    events = order[ev["kind"][order] != COUNTER]
    nest = _nest(track[events], ev["kind"][events])
    begun = events[nest.begins]
    ended = np.where(nest.end_of >= 0, events[np.maximum(nest.end_of, 0)], -1)
    dur = np.where(ended >= 0, ev["ts"][ended] - ev["ts"][begun], -1)
    slices = {"ts": ev["ts"][begun], "dur": np.where(ev["kind"][begun] == INSTANT, 0, dur),
              "track": track[begun], "name": ev["name"][begun], "depth": nest.depth,
              "parent": nest.parent, "args": args[begun]}
    slice_of = np.full(len(track), -1, np.int32)
    slice_of[events] = nest.slice_of
    return slices, slice_of


def build(reader: Reader, pool: ThreadPoolExecutor) -> Tables:
    """trace_processor's tables from the events read (the slices computed on the pool, beside
    the counters)."""
    ev, flows, extras = reader.events.columns()
    described = _Described(reader.descriptors)
    of_code = described.of(np.array(list(reader.track_codes), np.uint64))
    own, extra = of_code[ev["track"]], of_code[extras["track"]]
    # An event on a track never described, or a counter value on a track that is no counter
    # (or the reverse), is dropped; so is one naming an extra counter track that is no counter.
    keep = (own < described.none) & ((ev["kind"] == COUNTER) == described.is_counter[own])
    keep[extras["event"][~described.is_counter[extra]]] = False
    order, rank = _parse_order(ev["ts"], keep)
    kept = keep[extras["event"]]
    if not kept.all():
        extras, extra = {k: v[kept] for k, v in extras.items()}, extra[kept]
    extras["value"] = _zeroed_after_first_zero(extras["event"], extras["value"])
    tracks = _made_tracks(reader, described, own[order], rank[extras["event"]], extra)
    made = [tracks.made.get(u) for u in described.uuids.tolist()] + [None]
    track_id = np.array([-1 if t is None else t.id for t in made], np.int32)
    thread_scoped = np.array([t is not None and t.scope == "thread" for t in made])
    utids = [reader.threads.utid[tid] for _, tid in reader.thread_keys]
    args = _passthrough(reader, ev["args"], ev["thread"], thread_scoped[own], utids)
    sliced = pool.submit(_slices, ev, order, track_id[own], args)
    counters = _counters(ev, extras, order, rank, track_id[own], track_id[extra], args)
    slices, slice_of = sliced.result()
    return Tables(*tracks.rows(), slices, counters, _flows(flows, rank, slice_of),
                   _arg_rows(reader.arg_sets, slices, counters))


def _zeroed_after_first_zero(event: np.ndarray, value: np.ndarray) -> np.ndarray:
    """An event's extra counter values from its first 0 on read as 0: trace_processor's sorter
    keeps an event's values up to the first 0."""
    zero = (value == 0).astype(np.int8)
    return np.where(_grouped_cumsum(zero, _group_starts(event)) > 0, 0.0, value)


def _passthrough(reader: Reader, args: np.ndarray, thread: np.ndarray, thread_scoped: np.ndarray,
                 utids: list[int]) -> np.ndarray:
    """Arg sets with `legacy_event.passthrough_utid` added where trace_processor adds it: an
    event on a sequence that described a thread, on a track that is not a thread's."""
    marked = np.flatnonzero((thread >= 0) & ~thread_scoped)
    if not len(marked):
        return args
    pairs, which = np.unique(np.stack([args[marked], thread[marked]], 1), axis=0,
                             return_inverse=True)
    new = [reader.arg_sets.with_passthrough(a, utids[t]) for a, t in pairs.tolist()]
    args = args.copy()
    args[marked] = np.array(new, np.int32)[which.reshape(-1)]
    return args


def _counters(ev: dict[str, np.ndarray], extras: dict[str, np.ndarray], order: np.ndarray,
              rank: np.ndarray, own_track: np.ndarray, extra_track: np.ndarray,
              args: np.ndarray) -> dict[str, np.ndarray]:
    """Counter rows in parse order: an event's extra counter values, then its own value."""
    own = order[ev["kind"][order] == COUNTER]
    key = np.concatenate([rank[extras["event"]] * 16 + index_in_group(extras["event"]),
                          rank[own] * 16 + 15])
    by_key = np.argsort(key, kind="stable")
    event = np.concatenate([extras["event"], own])[by_key]
    return {"ts": ev["ts"][event],
            "track": np.concatenate([extra_track, own_track[own]])[by_key],
            "value": np.concatenate([extras["value"], ev["value"][own]])[by_key],
            "args": np.concatenate([np.full(len(extras["event"]), -1), args[own]])[by_key]}


def _flows(flows: dict[str, np.ndarray], rank: np.ndarray,
           slice_of_event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flow arrows as trace_processor's flow tracker draws them: a flow id on a slice starts a
    flow there, or continues it from its last slice; a terminating one ends it there."""
    slice_of = slice_of_event[flows["event"]]
    on = np.flatnonzero((slice_of >= 0) & (rank[flows["event"]] >= 0))
    # parse order: by event, an event's flow ids before its terminating ones
    on = on[np.lexsort((flows["terminating"][on], rank[flows["event"][on]]))]
    by_id = on[np.argsort(flows["flow"][on], kind="stable")]
    same = flows["flow"][by_id][1:] == flows["flow"][by_id][:-1]
    continues = same & ~flows["terminating"][by_id][:-1]
    source, target = by_id[:-1][continues], by_id[1:][continues]
    made = np.argsort(_position(on, target), kind="stable")
    return slice_of[source][made], slice_of[target][made]


def _position(order: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Where each of `items` is in `order` (a permutation of a superset of them)."""
    where = np.empty(int(order.max(initial=-1)) + 1, np.int64)
    where[order] = np.arange(len(order))
    found: np.ndarray = where[items]
    return found


def _arg_rows(arg_sets: ArgSets, slices: dict[str, np.ndarray],
              counters: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """The args of the arg sets that slices and counters use."""
    used = np.union1d(slices["args"], counters["args"])
    return [(arg_set, key, key, i, s, r, kind, display)
            for arg_set in used[used > 0].tolist()
            for key, i, s, r, kind, display in arg_sets.contents[arg_set - 1]]
