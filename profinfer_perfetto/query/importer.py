"""The built-in engine's import: a TrackEvent trace into SQLite tables shaped like
trace_processor's, with trace_processor's rules.

Only what trace_processor exposes for the TrackEvent data we write is built, with its table and
column names (a subset of its columns, see SCHEMA): `process`, `thread`, `track`,
`thread_track`, `counter_track`, `slice`, `counter`, `flow`, `args`. The rules are
trace_processor's (v58), checked against it by tests/unit/test_engines_agree.py:
- events are taken in timestamp order, ties in file order (its sorter);
- a track exists once an event uses it (an event's extra counter tracks before its own), its
  parent tracks first, and ids count in that order (so a counter track that never gets a value
  is not there); a descriptor's process and thread exist from the descriptor on, a process
  with its main thread, after the swapper rows (upid 0, utid 0); no cmdline;
- track types and names: `thread_execution` and `process_track_event` tracks have no name,
  counters are `<scope>_counter_track_event`, other tracks `<scope>_merged_track_event`;
- a slice's depth and parent come from the nesting on its track; an end with no open slice
  is dropped, a slice never ended has dur -1, an instant 0; flow ids chain slices;
- a debug annotation NAME is the arg `debug.NAME` with `.`, `[` and `]` made `_`; equal sets of
  args are one arg set; a real's display_value is SQLite's text for it;
- an event's extra counter values count up to its first 0, the values after it read as 0
  (the sorter keeps only that many), and an event with more than 8 of them is dropped;
- on a sequence that described a thread (single-sequence traces), an event on a track that is
  not that of a thread gets the arg `legacy_event.passthrough_utid`.

The trace is read in bulk (query/wirescan.py): each `compressed_packets` chunk is expanded,
framed and its packets' fields scanned with numpy on a thread pool, and the track events we
write (timestamp, sequence, flags and one TrackEvent of known fields) are decoded column by
column with the interning, defaults and incremental clock of their sequence; a run of debug
annotations is looked up by its hash, parsed once per distinct run. Any other packet
(descriptors, interned data, clock snapshots, or an event with fields the bulk path does not
know) goes through protobuf one at a time, in order, so every valid trace imports. The rows
go into an in-memory SQLite database with sqlite3's `executemany`, those of the tables with a
row per event turned into Python values a block at a time.

The import is four steps, a module each: query/import_scan.py frames and scans a buffer's
packets (and inflates compressed chunks), query/import_read.py reads them in order into the
state of query/import_state.py, query/import_tables.py makes trace_processor's tables of it,
and this module stores them.

A hostile file is one sentence, not a traceback nor all the memory: the chunks of a trace
expand from one budget (4 GiB, at most 64 times the file: a decompression bomb ends there),
nest at most MAX_NESTING deep, and protobuf's strings that are not UTF-8 read with U+FFFD.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import sched_import, wirescan
from profinfer_perfetto.query.import_read import Reader, not_a_trace
from profinfer_perfetto.query.import_scan import Budget
from profinfer_perfetto.query.import_tables import Tables, build

SCHEMA = {
    "process": ("upid INTEGER PRIMARY KEY", "pid INTEGER", "name TEXT", "cmdline TEXT"),
    "thread": ("utid INTEGER PRIMARY KEY", "tid INTEGER", "name TEXT", "upid INTEGER"),
    "track": ("id INTEGER PRIMARY KEY", "name TEXT", "type TEXT"),
    "thread_track": ("id INTEGER PRIMARY KEY", "name TEXT", "utid INTEGER"),
    "counter_track": ("id INTEGER PRIMARY KEY", "name TEXT", "unit TEXT"),
    "slice": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "track_id INTEGER",
              "category TEXT", "name TEXT", "depth INTEGER", "parent_id INTEGER",
              "arg_set_id INTEGER"),
    "counter": ("id INTEGER PRIMARY KEY", "ts INTEGER", "track_id INTEGER", "value REAL",
                "arg_set_id INTEGER"),
    "flow": ("id INTEGER PRIMARY KEY", "slice_out INTEGER", "slice_in INTEGER"),
    "sched": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "cpu INTEGER",
              "utid INTEGER", "end_state TEXT", "priority INTEGER"),
    "thread_state": ("id INTEGER PRIMARY KEY", "ts INTEGER", "dur INTEGER", "cpu INTEGER",
                     "utid INTEGER", "state TEXT", "waker_utid INTEGER"),
    "args": ("id INTEGER PRIMARY KEY", "arg_set_id INTEGER", "flat_key TEXT", "key TEXT",
             "int_value INTEGER", "string_value TEXT", "real_value REAL", "value_type TEXT",
             "display_value TEXT"),
}
"""Each table's columns: trace_processor's names (a subset of its columns), the rowid first."""


def _create(table: str) -> str:
    return f"CREATE TABLE {table} ({', '.join(SCHEMA[table])})"


_BLOCK = 1 << 16
"""Rows turned into Python values at once (bounds the memory they take)."""


def _big_tables(reader: Reader, t: Tables) -> dict[str, list[np.ndarray]]:
    """The columns (after `id`) of the tables with a row per event: masked values are NULL."""
    s, c = t.slices, t.counters
    names = np.array([*reader.strings.ids, None], object)  # a name of -1 is the last: NULL
    return {
        "slice": [s["ts"], s["dur"], s["track"], np.full(len(s["ts"]), None), names[s["name"]],
                  s["depth"], np.ma.masked_less(s["parent"], 0),
                  np.ma.masked_less(s["args"], 0)],
        "counter": [c["ts"], c["track"], c["value"], np.ma.masked_less(c["args"], 0)],
        "flow": list(t.flows),
    }


def _rows(columns: list[np.ndarray]) -> Iterator[tuple[Any, ...]]:
    """The rows (id first) of columns of numpy values, a block at a time."""
    count = len(columns[0])
    for a in range(0, count, _BLOCK):
        b = min(a + _BLOCK, count)
        yield from zip(range(a, b), *(c[a:b].tolist() for c in columns), strict=True)


def _store(reader: Reader, t: Tables) -> sqlite3.Connection:
    """A new in-memory database with the tables, their rows inserted with SQL."""
    db = sqlite3.connect(":memory:")
    db.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                     + ";".join(map(_create, SCHEMA)))
    sched, thread_state = sched_import.tables(reader.sched, reader.threads.scheduled)
    rows: dict[str, Iterable[Sequence[Any]]] = {
        "sched": ((i, *row) for i, row in enumerate(sched)),
        "thread_state": ((i, *row) for i, row in enumerate(thread_state)),
        "process": reader.threads.processes, "thread": reader.threads.threads,
        "track": t.tracks, "thread_track": t.thread_tracks,
        "counter_track": t.counter_tracks, "args": ((i, *row) for i, row in enumerate(t.args)),
        **{name: _rows(columns) for name, columns in _big_tables(reader, t).items()}}
    for name, table_rows in rows.items():
        marks = ", ".join("?" * len(SCHEMA[name]))
        db.executemany(f"INSERT INTO {name} VALUES ({marks})", table_rows)
    db.commit()
    return db


def load(path: Path, data: bytes) -> sqlite3.Connection:
    """Import a Perfetto TrackEvent trace (`data`, the bytes of `path`) into a new in-memory
    SQLite database."""
    with ThreadPoolExecutor(2) as pool:
        reader = Reader(path, pool, Budget(path, len(data)))
        try:
            reader.read(data)
        except DecodeError:
            raise not_a_trace(path) from None
        except wirescan.Malformed as exc:
            raise ProfinferError(f"{path} is not a well-formed trace: {exc}") from None
        if not reader.descriptors and not reader.events.count:
            raise ProfinferError(f"{path} holds no track events: is it a profinfer-perfetto "
                                 "trace?")
        return _store(reader, build(reader, pool))
