"""Fuzzing of every parser of outside input here: traces (mutations of the golden one, read by
the built-in engine's import and the baseline taken from it), baseline JSON, peaks JSON and
rules TOML. Each ends in a result or one sentence (ProfinferError), never another exception,
and memory stays within bounds (a trace's packets are read up to 64 times its size).

The suite runs each with a few dozen fixed inputs (hypothesis profile "ci"); `nox -s fuzz`
runs them with random ones for as long as it is told (profile "fuzz")."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
import zlib
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.check import report
from profinfer_perfetto.check.baseline import FORMAT, Baseline, from_traces
from profinfer_perfetto.check.rules import DEFAULT_RULES, Settings, load_rules
from profinfer_perfetto.check.verdict import compare
from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.machine import peaks
from profinfer_perfetto.query.engines import EngineChoice

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "query" / "tiny-qwen3moe.pftrace"
GROWTH = 512 << 20
"""What reading one fuzzed trace may allocate at its peak (bytes, as tracemalloc counts Python's
and numpy's allocations): the golden trace's packets are 136 KiB, so a bomb made of it is cut
at under 9 MiB. (Not the process's ru_maxrss: it holds the peak of every test before.)"""


def _flat() -> bytes:
    """The golden trace with its compressed chunks' packets in their place, uncompressed: a
    mutation then hits packets, not deflate's bytes."""
    trace, flat = official.Trace(), official.Trace()
    trace.ParseFromString(GOLDEN.read_bytes())
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            flat.MergeFromString(zlib.decompress(packet.compressed_packets))
        else:
            flat.packet.append(packet)
    data: bytes = flat.SerializeToString()
    return data


BASES = {"file": GOLDEN.read_bytes(), "packets": _flat()}
Mutation = tuple[str, int, bytes]
MUTATIONS = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "repeat",
                                                "cut"]),
                               st.integers(0, 1 << 30), st.binary(min_size=1, max_size=12)),
                     min_size=1, max_size=6)
"""Byte flips, bytes set, inserted or deleted, a span repeated, the end cut: at a position
(modulo the length) with some bytes (their length for the spans)."""


def _mutated(data: bytes, mutations: list[Mutation]) -> bytes:
    out = bytearray(data)
    for kind, at, blob in mutations:
        at %= len(out) + 1
        span = slice(at, at + len(blob))
        if kind == "flip" and at < len(out):
            out[at] ^= blob[0] or 1
        elif kind == "set":
            out[span] = blob
        elif kind == "insert":
            out[at:at] = blob
        elif kind == "delete":
            del out[span]
        elif kind == "repeat":
            out[at:at] = out[span] * (blob[0] % 8 + 1)
        elif kind == "cut":
            del out[at:]
    return bytes(out)


def _read_trace(tmp_path: Path, data: bytes) -> None:
    """What reads a trace: the whole-file check, the built-in engine's import, and the SQL a
    baseline is taken with."""
    path = tmp_path / "fuzzed.pftrace"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with contextlib.suppress(ProfinferError):
            from_traces([path], EngineChoice("builtin"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < GROWTH, f"reading it took {peak >> 20} MiB at its peak"


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numbers cast wrong
@given(base=st.sampled_from(sorted(BASES)), mutations=MUTATIONS)
def test_fuzz_trace(tmp_path_factory: pytest.TempPathFactory, base: str,
                    mutations: list[Mutation]) -> None:
    _read_trace(tmp_path_factory.mktemp("trace"), _mutated(BASES[base], mutations))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numbers cast wrong
@given(mutations=MUTATIONS, level=st.integers(0, 9))
def test_fuzz_trace_compressed_packets(tmp_path_factory: pytest.TempPathFactory,
                                       mutations: list[Mutation], level: int) -> None:
    """Mutated packets in a compressed chunk: read through the inflation and its budget."""
    trace = official.Trace()
    trace.packet.add().compressed_packets = zlib.compress(_mutated(BASES["packets"], mutations),
                                                          level)
    _read_trace(tmp_path_factory.mktemp("chunk"), trace.SerializeToString())


U64 = st.sampled_from([0, 1, 2, 7, 8, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]) | st.integers(
    0, (1 << 64) - 1)
"""uuids, iids, times: the few a trace reuses, the extremes, any."""
I32 = st.sampled_from([0, 1, 100, -1]) | st.integers(-(1 << 31), (1 << 31) - 1)
NAMES = st.sampled_from(["", "x", "a.b[0]", "mul_mat"]) | st.text(max_size=6)


@st.composite
def _packet(draw: st.DrawFn) -> pb.TracePacket:
    """A packet of any kind the import reads, its fields drawn near and far from ours."""
    p = pb.TracePacket(trusted_packet_sequence_id=draw(st.sampled_from([0, 1, 2])),
                       sequence_flags=draw(st.sampled_from([0, 1, 2, 3])))
    if draw(st.booleans()):
        p.timestamp = draw(U64)
    kind = draw(st.sampled_from(["track", "thread", "counter", "names", "clock", "event",
                                 "defaults", "sched", "tree"]))
    if kind in ("track", "thread", "counter"):
        d = p.track_descriptor
        d.uuid, d.parent_uuid, d.name = draw(U64), draw(U64), draw(NAMES)
        if kind == "thread":
            d.thread.pid, d.thread.tid, d.thread.thread_name = draw(I32), draw(I32), draw(NAMES)
        elif kind == "counter":
            d.counter.unit = draw(st.sampled_from([pb.CounterDescriptor.UNIT_UNSPECIFIED,
                                                   pb.CounterDescriptor.UNIT_TIME_NS,
                                                   pb.CounterDescriptor.UNIT_COUNT,
                                                   pb.CounterDescriptor.UNIT_SIZE_BYTES]))
            d.counter.unit_name = draw(NAMES)
    elif kind == "names":
        p.interned_data.event_names.add(iid=draw(U64), name=draw(NAMES))
        p.interned_data.debug_annotation_names.add(iid=draw(U64), name=draw(NAMES))
        p.interned_data.debug_annotation_string_values.add(iid=draw(U64), str=draw(st.binary()))
    elif kind == "clock":
        for clock_id in draw(st.lists(st.sampled_from([6, 64, 65]), max_size=3)):
            p.clock_snapshot.clocks.add(clock_id=clock_id, timestamp=draw(U64),
                                        is_incremental=draw(st.booleans()))
    elif kind == "event":
        _event(draw, p)
        p.timestamp_clock_id = draw(st.sampled_from([0, 6, 64]))
    elif kind == "defaults":
        p.trace_packet_defaults.timestamp_clock_id = draw(st.sampled_from([0, 6, 64]))
        defaults = p.trace_packet_defaults.track_event_defaults
        defaults.track_uuid = draw(U64)
        defaults.extra_counter_track_uuids.extend(draw(st.lists(U64, max_size=3)))
    elif kind == "sched":
        _sched(draw, p)
    else:
        p.process_tree.processes.add(pid=draw(I32), cmdline=draw(st.lists(NAMES, max_size=2)))
        p.process_tree.threads.add(tid=draw(I32), tgid=draw(I32), name=draw(NAMES))
    return p


def _event(draw: st.DrawFn, p: pb.TracePacket) -> None:
    e = p.track_event
    e.type = draw(st.sampled_from([pb.TrackEvent.TYPE_UNSPECIFIED, pb.TrackEvent.TYPE_SLICE_BEGIN,
                                   pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT,
                                   pb.TrackEvent.TYPE_COUNTER]))
    e.track_uuid = draw(U64)
    if draw(st.booleans()):
        e.name_iid = draw(U64)
    else:
        e.name = draw(NAMES)
    if draw(st.booleans()):
        e.counter_value = draw(st.integers(-(1 << 63), (1 << 63) - 1))
    e.flow_ids.extend(draw(st.lists(U64, max_size=2)))
    e.terminating_flow_ids.extend(draw(st.lists(U64, max_size=1)))
    e.flow_ids_old.extend(draw(st.lists(U64, max_size=2)))
    e.terminating_flow_ids_old.extend(draw(st.lists(U64, max_size=1)))
    e.extra_counter_values.extend(draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1),
                                                max_size=10)))
    e.extra_counter_track_uuids.extend(draw(st.lists(U64, max_size=10)))
    for _ in range(draw(st.integers(0, 2))):
        a = e.debug_annotations.add(name_iid=draw(U64))
        a.string_value_iid = draw(U64)


def _sched(draw: st.DrawFn, p: pb.TracePacket) -> None:
    bundle = p.ftrace_events
    bundle.cpu = draw(st.integers(0, 3))
    c = bundle.compact_sched
    c.intern_table.extend(draw(st.lists(NAMES, max_size=2)))
    count = st.integers(0, 3)
    c.switch_timestamp.extend(draw(st.lists(U64, min_size=1, max_size=3)))
    c.switch_prev_state.extend(draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1),
                                             max_size=3)))
    for column in (c.switch_next_pid, c.switch_next_prio, c.waking_pid, c.waking_target_cpu,
                   c.waking_prio):
        column.extend(draw(st.lists(I32, max_size=3)))
    for column in (c.switch_next_comm_index, c.waking_comm_index):
        column.extend(draw(st.lists(count, max_size=3)))
    c.waking_timestamp.extend(draw(st.lists(U64, max_size=3)))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numbers cast wrong
@given(packets=st.lists(_packet(), min_size=1, max_size=12), compressed=st.booleans())
def test_fuzz_trace_packets(tmp_path_factory: pytest.TempPathFactory,
                            packets: list[pb.TracePacket], compressed: bool) -> None:
    """Traces made of packets drawn field by field: what byte mutations seldom reach (a huge
    iid or uuid, a clock that wraps, a sched bundle of ragged columns)."""
    data = pb.Trace(packet=packets).SerializeToString()
    if compressed:
        data = pb.Trace(packet=[pb.TracePacket(compressed_packets=zlib.compress(data))]
                        ).SerializeToString()
    _read_trace(tmp_path_factory.mktemp("packets"), data)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
"""Any JSON value."""
KEYS = st.sampled_from(["step/decode", "window/decode", "rel/decode/MUL_MAT/a",
                        "op/decode/MUL_MAT/a", "interference/decode", "share/decode/ADD/b"])
SAMPLES = st.lists(st.integers(-(1 << 63), 1 << 63), max_size=30)
BASELINES = st.fixed_dictionaries(
    {"format": st.just(FORMAT) | JSON,
     "made_from": st.dictionaries(st.sampled_from(["model", "ggml", "threads", "tool"]),
                                  st.text(max_size=8) | JSON) | JSON,
     "samples": st.dictionaries(KEYS, st.lists(SAMPLES | JSON, max_size=4) | JSON) | JSON},
    optional={"shares": st.dictionaries(KEYS, st.floats() | JSON) | JSON})
"""Baselines near the real shape, each part of them maybe any JSON instead."""


def _candidate() -> Baseline:
    runs = [[100 + (i * 37 + r * 11) % 23 for i in range(40)] for r in range(3)]
    return Baseline({"model": "m"}, {k: runs for k in ("step/decode", "window/decode",
                                                        "rel/decode/MUL_MAT/a",
                                                        "interference/decode")})


def _judged(base: Baseline, new: Baseline, rules: Any = DEFAULT_RULES,
            settings: Settings | None = None) -> None:
    """A check of the two, reported every way; a sentence where it cannot judge."""
    try:
        result = compare(base, new, rules, settings or Settings(resamples=50))
    except ProfinferError:
        return
    for write in (report.table, report.as_json, report.github):
        write(result, StringIO())


@given(doc=BASELINES | JSON, raw=st.none() | st.binary(max_size=64))
def test_fuzz_baseline_json(tmp_path_factory: pytest.TempPathFactory, doc: Any,
                            raw: bytes | None) -> None:
    path = tmp_path_factory.mktemp("baseline") / "baseline.json"
    path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    try:
        base = Baseline.saved([path])
    except ProfinferError:
        return
    assert base is not None
    _judged(base, _candidate())
    _judged(_candidate(), base)


PEAK = st.fixed_dictionaries({}, optional={
    "kind": st.sampled_from(["memory", "compute"]) | JSON, "threads": st.integers() | JSON,
    "value": st.floats() | JSON, "dtype": st.text(max_size=4) | JSON,
    "how": st.text(max_size=4) | JSON})


@given(doc=st.fixed_dictionaries({"format": st.just(1) | JSON,
                                  "peaks": st.lists(PEAK, max_size=4) | JSON}) | JSON,
       raw=st.none() | st.binary(max_size=64))
def test_fuzz_peaks_json(tmp_path_factory: pytest.TempPathFactory, doc: Any,
                         raw: bytes | None) -> None:
    path = tmp_path_factory.mktemp("peaks") / "peaks.json"
    path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    try:
        found = peaks.load(path)
    except ProfinferError:
        return
    assert all(p.threads > 0 and p.value >= 0 for p in found.peaks)


TOML_VALUES = st.sampled_from(['0', '1', '-1', '5', '50', '0.5', '0.9', '0.999', '1.0', '1e300',
                               'nan', 'inf', '-inf', 'true', '"x"', '"*"', '"decode*"',
                               '"increase"', '"decrease"', '"mean"', '"median"', '[1, 2]',
                               '{ a = 1 }', '1979-05-27'])
SETTING_NAMES = st.sampled_from(["confidence", "min_samples", "resamples", "prior_dof",
                                 "per_check", "treshold"])
RULE_NAMES = st.sampled_from(["name", "keys", "max_change", "min_abs_ns", "top", "direction",
                              "statistic"])


def _table(header: str, pairs: list[tuple[str, str]]) -> str:
    return header + "\n" + "".join(f"{name} = {value}\n" for name, value in pairs)


@given(settings=st.lists(st.tuples(SETTING_NAMES, TOML_VALUES), max_size=4,
                         unique_by=lambda t: t[0]),
       rules=st.lists(st.lists(st.tuples(RULE_NAMES, TOML_VALUES), max_size=7,
                               unique_by=lambda t: t[0]), max_size=3),
       raw=st.none() | st.text(max_size=40))
def test_fuzz_rules_toml(tmp_path_factory: pytest.TempPathFactory,
                         settings: list[tuple[str, str]], rules: list[list[tuple[str, str]]],
                         raw: str | None) -> None:
    tables = [_table("[settings]", settings)] + [_table("[[rule]]", rule) for rule in rules]
    text = raw if raw is not None else "".join(tables)
    path = tmp_path_factory.mktemp("rules") / "rules.toml"
    path.write_text(text)
    try:
        found, chosen = load_rules(path)
    except ProfinferError:
        return
    base = _candidate()
    _judged(base, base, found, replace(chosen, resamples=min(chosen.resamples, 50)))
