"""The built-in engine's tables against trace_processor's, on the traces we write (now and
before the compact encoding) and on a hand-made one for the rules they rarely meet.

Each table a user's SQL reads is compared row by row (ids included) between the two engines:
thread, process, track, thread_track, counter_track, slice (depth, parent), counter, flow, and
args by content: each slice's and counter's arg set, and which of them share one (arg_set_id
values themselves differ: trace_processor's also number the arg sets of its tracks, which the
built-in `args` leaves out). Only the columns both engines have are compared (the built-in
tables have a subset of trace_processor's). The built-in side always imports; trace_processor's
runs when PROFINFER_TP_BIN names its shell.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.capture.events import OP_STATS
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import BuiltinEngine, Engine, Result
from profinfer_perfetto.query.import_state import BEGIN, END, INSTANT
from profinfer_perfetto.query.import_tables import _nest
from tests import synthetic

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query" / "tiny-qwen3moe.pftrace"
TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None  # scripts/test.sh exports it empty

# Only the columns both engines have (the built-in tables have fewer; see importer.SCHEMA).
TABLES = {
    "thread": "select utid, tid, name, upid from thread order by utid",
    "process": "select upid, pid, name, cmdline from process order by upid",
    "track": "select id, name, type from track order by id",
    "thread_track": "select id, name, utid from thread_track order by id",
    "counter_track": "select id, name, unit from counter_track order by id",
    "slice": "select id, ts, dur, track_id, category, name, depth, parent_id from slice "
             "order by id",
    "counter": "select id, ts, track_id, value from counter order by id",
    "flow": "select id, slice_out, slice_in from flow order by id",
}
ARGS = """
select {table}.id, {table}.arg_set_id, a.key, a.flat_key, a.value_type, a.int_value,
       a.string_value, a.real_value, a.display_value
from {table} join args a using (arg_set_id) order by {table}.id, a.id
"""


def _write(rec: Recording, path: Path) -> Path:
    with path.open("wb") as out:
        write_perfetto(build_layout(build(rec)), out)
    return path


def _aggregate(rec: Recording) -> Recording:
    """`rec` as --aggregate would add to it: op statistics read three times, one op type's
    work staying 0; and a recording stopped before its end (a `trace cut short` instant)."""
    rec.run.status = "recorder stopped by SIGINT"

    def stats(scale: int) -> np.ndarray:
        s = np.zeros(3, OP_STATS)
        s["node"] = [synthetic.UP, synthetic.NORM, synthetic.OUT]
        s["count"] = 2 * scale
        s["work_ns"] = [1000 * scale, 300 * scale, 0]
        return s

    rec.op_stats = [(4_000, stats(1)), (9_000, stats(2)), (13_000, stats(3))]
    return rec


def _single_sequence(trace: Path, path: Path) -> Path:
    """`trace` as writers before the compact encoding wrote it: one packet sequence, nothing
    compressed, absolute timestamps, every event naming its track and counter tracks."""
    src = official.Trace.FromString(trace.read_bytes())
    packets = [p for top in src.packet for p in (
        official.Trace.FromString(zlib.decompress(top.compressed_packets)).packet
        if top.HasField("compressed_packets") else [top])]
    out = official.Trace()
    defaults: dict[int, Any] = {}
    clocks: dict[int, int] = {}
    interned = official.InternedData()
    for p in packets:
        seq = p.trusted_packet_sequence_id
        if p.HasField("interned_data") and not interned.event_names:
            interned.CopyFrom(p.interned_data)
        if p.HasField("trace_packet_defaults"):
            defaults[seq] = p.trace_packet_defaults.track_event_defaults
        if p.HasField("clock_snapshot"):
            clocks[seq] = p.timestamp
        if p.HasField("track_descriptor"):
            out.packet.add(trusted_packet_sequence_id=1, sequence_flags=2,
                           track_descriptor=p.track_descriptor)
        elif p.HasField("track_event"):
            clocks[seq] += p.timestamp
            e = out.packet.add(trusted_packet_sequence_id=1, sequence_flags=2,
                               timestamp=clocks[seq], track_event=p.track_event).track_event
            if not e.HasField("track_uuid"):
                e.track_uuid = defaults[seq].track_uuid
            if e.extra_counter_values and not e.extra_counter_track_uuids:
                e.extra_counter_track_uuids.extend(
                    defaults[seq].extra_counter_track_uuids[:len(e.extra_counter_values)])
    first = out.packet[0]
    first.sequence_flags = 3
    first.first_packet_on_sequence = True
    first.interned_data.CopyFrom(interned)
    path.write_bytes(out.SerializeToString())
    return path


class _HandMade:
    """A trace written packet by packet (sequence 1, its state kept, unless told)."""

    def __init__(self) -> None:
        self.trace = official.Trace()

    def packet(self, seq: int = 1, flags: int = 2, **fields: Any) -> Any:
        return self.trace.packet.add(trusted_packet_sequence_id=seq, sequence_flags=flags,
                                     **fields)

    def event(self, ts: int, seq: int = 1, flags: int = 2, **fields: Any) -> None:
        self.packet(seq, flags, timestamp=ts, track_event=official.TrackEvent(**fields))


def _rules(path: Path) -> Path:
    """A hand-made trace for the rules our traces rarely meet: every debug annotation type,
    names with `.`, `[` and `]`, events out of file order and tied, an end with no open slice,
    a slice never ended, instants inside slices, a flow id reused and a flow on an end,
    flow ids as varints (the deprecated fields) alone and beside fixed64 ones,
    process- and thread-scoped child tracks, counters of every scope (one with a unit enum),
    extra counter values with a 0 among them, an event with too many of them (dropped) and
    one on a sequence whose state was never cleared (skipped)."""
    hand = _HandMade()
    _rules_tracks(hand)
    _rules_events(hand, _every_annotation())
    path.write_bytes(hand.trace.SerializeToString())
    return path


def _rules_tracks(hand: _HandMade) -> None:
    """The interned names, a process with two threads, child tracks of each scope, counters."""
    first = hand.packet(flags=3, first_packet_on_sequence=True)
    for iid, name in enumerate(("interned", "b", "instant", "tied"), start=1):
        first.interned_data.event_names.add(iid=iid, name=name)
    first.interned_data.debug_annotation_names.add(iid=1, name="x.y[0]")
    first.interned_data.debug_annotation_string_values.add(iid=1, str=b"interned value")
    first.track_descriptor.uuid = 1
    first.track_descriptor.process.pid = 42
    first.track_descriptor.process.process_name = "proc"
    t = official.TrackDescriptor
    for d in (t(uuid=10, parent_uuid=1, thread=official.ThreadDescriptor(pid=42, tid=43,
                                                                         thread_name="a")),
              t(uuid=11, parent_uuid=1, thread=official.ThreadDescriptor(pid=42, tid=42,
                                                                         thread_name="main")),
              t(uuid=3, name="global"), t(uuid=5, parent_uuid=1, name="process child"),
              t(uuid=6, parent_uuid=10, name="thread child"),
              t(uuid=7, parent_uuid=3, name="global child")):
        hand.packet(track_descriptor=d)
    counters = [(20 + i, 1, f"c{i}") for i in range(9)] + [(30, 0, "global c"), (31, 10, "tc")]
    for uuid, parent, name in counters:
        hand.packet(track_descriptor=t(uuid=uuid, parent_uuid=parent, name=name, counter=(
            official.CounterDescriptor(unit=official.CounterDescriptor.UNIT_TIME_NS)
            if uuid == 31 else official.CounterDescriptor(unit_name="count"))))


def _every_annotation() -> list[official.DebugAnnotation]:
    """A debug annotation of each type, names with `.`, `[` and `]`, doubles hard to print."""
    a = official.DebugAnnotation
    annotations = [a(name_iid=1, int_value=-5), a(name="a.b", uint_value=2**64 - 1),
                   a(name="u", uint_value=7), a(name="[k]", int_value=2**63 - 1),
                   a(name="b0", bool_value=False), a(name="b1", bool_value=True),
                   a(name="s", string_value="text"), a(name="si", string_value_iid=1),
                   a(name="e", string_value="")]
    return annotations + [a(name=f"d{i}", double_value=v) for i, v in enumerate(
        [0.1, 1.0, 1e15, 1e16, 1e20, 1.5e-7, 1e-5, 123456789.125, -0.0, 0.0,
         float("inf"), float("-inf"), float("nan"), 5e-324, 12345678901234567.0])]


def _rules_events(hand: _HandMade, annotations: list[official.DebugAnnotation]) -> None:
    event = hand.event
    event(100, type=1, track_uuid=3, name_iid=1, debug_annotations=annotations)
    # events named by iid are read in bulk, those named by a string with protobuf: runs of
    # both, each with flows and extra counter values
    event(150, type=1, track_uuid=10, name_iid=2, extra_counter_track_uuids=[20, 21, 22],
          extra_counter_values=[3, 0, 4])
    event(140, type=1, track_uuid=11, name="earlier in time, later in the file")
    event(150, type=3, track_uuid=10, name_iid=3, flow_ids=[7],
          extra_counter_track_uuids=[20], extra_counter_values=[1])
    event(160, type=1, track_uuid=10, name="child", flow_ids=[7],
          extra_counter_track_uuids=[20, 21], extra_counter_values=[5, 6])
    event(160, type=1, track_uuid=10, name_iid=4, debug_annotations=annotations[:3],
          extra_counter_track_uuids=[21], extra_counter_values=[8])
    # flow ids in the deprecated varint fields, alone and beside fixed64 ones (which win)
    event(161, type=3, track_uuid=11, name_iid=3, flow_ids_old=[9], flow_ids=[10])
    event(162, type=3, track_uuid=11, name="varint flows", flow_ids_old=[9, 11])
    event(163, type=3, track_uuid=11, name_iid=3, terminating_flow_ids_old=[9],
          terminating_flow_ids=[11])
    event(164, type=3, track_uuid=11, name="varint ends", terminating_flow_ids_old=[9, 10])
    event(165, type=2, track_uuid=10)
    event(170, type=2, track_uuid=10, terminating_flow_ids=[7, 99])
    event(175, type=2, track_uuid=11)
    event(176, type=2, track_uuid=11)
    event(180, type=4, track_uuid=30, counter_value=12)
    event(181, type=4, track_uuid=31, double_counter_value=2.5)
    event(182, type=1, track_uuid=5, name="on a process child", flow_ids=[8])
    event(183, type=1, track_uuid=6, name="on a thread child", terminating_flow_ids=[8])
    event(184, type=3, track_uuid=7, name="on a global child")
    event(185, type=1, track_uuid=10, name="too many counters",
          extra_counter_track_uuids=[20 + i for i in range(9)],
          extra_counter_values=list(range(1, 10)))
    event(186, seq=2, name="state never cleared", type=3, track_uuid=10)
    event(187, seq=3, flags=0, name="needs no state", type=3, track_uuid=10)
    event(190, type=2, track_uuid=3)
    event(195, type=1, track_uuid=3, name="never ended")


TRACES: dict[str, Callable[[Path], Path]] = {
    "golden tiny-qwen3moe": lambda tmp: GOLDEN,
    "synthetic, per-thread counters": lambda tmp: _write(synthetic.recording(),
                                                         tmp / "synthetic.pftrace"),
    "aggregate counters, cut short": lambda tmp: _write(_aggregate(synthetic.recording()),
                                                        tmp / "aggregate.pftrace"),
    "two compressed chunks": lambda tmp: _write(synthetic.decode_run(1, steps=180),
                                                tmp / "decode.pftrace"),
    "single sequence, uncompressed": lambda tmp: _single_sequence(
        _write(synthetic.recording(), tmp / "synthetic.pftrace"), tmp / "single.pftrace"),
    "hand-made, rules": lambda tmp: _rules(tmp / "rules.pftrace"),
}


def _arg_sets(engine: Engine | _TraceProcessor, table: str
              ) -> tuple[dict[Any, tuple[Any, ...]], list[Any]]:
    """Per row of `table`: its args' contents; and which rows share an arg set (a partition
    of the rows, each part in id order)."""
    contents: dict[Any, list[tuple[Any, ...]]] = {}
    shared: dict[Any, set[Any]] = {}
    for row_id, arg_set, *arg in engine.query(ARGS.format(table=table)).rows:
        contents.setdefault(row_id, []).append(tuple(arg))
        shared.setdefault(arg_set, set()).add(row_id)
    return ({k: tuple(v) for k, v in contents.items()},
            sorted(sorted(part) for part in shared.values()))


class _TraceProcessor:
    """trace_processor through its Python API, without the engine's refusal of traces it
    reads in part (the hand-made trace has events it drops on purpose)."""

    def __init__(self, trace: Path, bin_path: str) -> None:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

        self.tp = TraceProcessor(trace=str(trace), config=TraceProcessorConfig(bin_path=bin_path))

    def query(self, sql: str) -> Result:
        it = self.tp.query(sql)
        columns = list(it.column_names)
        return Result(columns, [tuple(getattr(r, c) for c in columns) for r in it])

    def close(self) -> None:
        self.tp.close()


def _tables(engine: Engine | _TraceProcessor) -> dict[str, Any]:
    out: dict[str, Any] = {name: engine.query(sql).rows for name, sql in TABLES.items()}
    for table in ("slice", "counter"):
        out[f"{table} args"], out[f"{table} arg sets shared"] = _arg_sets(engine, table)
    return out


@pytest.fixture(params=sorted(TRACES))
def trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return TRACES[request.param](tmp_path)


def _builtin_tables(trace: Path) -> dict[str, Any]:
    engine = BuiltinEngine(trace, trace.read_bytes())
    try:
        assert engine.query("pragma integrity_check").rows == [("ok",)]
        return _tables(engine)
    finally:
        engine.close()


def test_builtin_imports(trace: Path) -> None:
    tables = _builtin_tables(trace)
    assert tables["slice"] and tables["track"] and tables["thread"][0] == (0, 0, "swapper", 0)


def test_nesting_is_a_slice_stack() -> None:
    """Slices' depth, parent and end from the vectorized nesting are those of a stack per
    track (trace_processor's), an end with an empty stack dropped."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        track = rng.integers(0, 3, n)
        kind = rng.choice([BEGIN, END, INSTANT], n, p=[0.45, 0.45, 0.1]).astype(np.int8)
        stacks: dict[int, list[int]] = {}
        slices: list[tuple[int, int]] = []
        slice_of, end_of = [], {}
        for i, (t, k) in enumerate(zip(track.tolist(), kind.tolist(), strict=True)):
            stack = stacks.setdefault(t, [])
            if k == END:
                slice_of.append(stack[-1] if stack else -1)
                if stack:
                    end_of[stack.pop()] = i
                continue
            slice_of.append(len(slices))
            slices.append((len(stack), stack[-1] if stack else -1))
            if k == BEGIN:
                stack.append(len(slices) - 1)
        nest = _nest(track, kind)
        assert nest.slice_of.tolist() == slice_of
        assert nest.depth.tolist() == [depth for depth, _ in slices]
        assert nest.parent.tolist() == [parent for _, parent in slices]
        assert nest.end_of.tolist() == [end_of.get(s, -1) for s in range(len(slices))]


@pytest.mark.skipif(TP_BIN is None, reason="PROFINFER_TP_BIN names no trace_processor_shell")
def test_engines_agree(trace: Path) -> None:
    assert TP_BIN is not None
    builtin, tp = BuiltinEngine(trace, trace.read_bytes()), _TraceProcessor(trace, TP_BIN)
    try:
        ours, theirs = _tables(builtin), _tables(tp)
    finally:
        builtin.close()
        tp.close()
    for table in theirs:
        assert ours[table] == theirs[table], table
