"""The built-in engine's `sched` and `thread_state` (query/sched_import.py) against
trace_processor's rules: hand-made compact sched streams with known answers, and the same streams
through the real trace_processor where PROFINFER_TP_BIN names one."""

from __future__ import annotations

import csv
import io
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from profinfer_perfetto.capture.recorder import RecordRequest, _sched_probes
from profinfer_perfetto.encode import profinfer_trace_pb2 as pb
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import importer
from profinfer_perfetto.query.sched_import import SchedEvents, tables, task_state

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
RELEASE = "6.18.0"

Switch = tuple[int, int, int, str]
"""ts, prev_state, next tid, next comm."""
Waking = tuple[int, int, str]
"""ts, tid, comm."""


def _bundle(cpu: int, switches: list[Switch], wakings: Sequence[Waking] = ()) -> pb.TracePacket:
    packet = pb.TracePacket(trusted_packet_sequence_id=7)
    packet.ftrace_events.cpu = cpu
    c = packet.ftrace_events.compact_sched
    names = sorted({n for *_, n in switches} | {n for *_, n in wakings})
    c.intern_table.extend(names)
    last = 0
    for ts, state, tid, comm in switches:
        c.switch_timestamp.append(ts - last)
        last = ts
        c.switch_prev_state.append(state)
        c.switch_next_pid.append(tid)
        c.switch_next_prio.append(120)
        c.switch_next_comm_index.append(names.index(comm))
    last = 0
    for ts, tid, comm in wakings:
        c.waking_timestamp.append(ts - last)
        last = ts
        c.waking_pid.append(tid)
        c.waking_target_cpu.append(cpu)
        c.waking_prio.append(120)
        c.waking_comm_index.append(names.index(comm))
        c.waking_common_flags.append(0)
    return packet


# CPU 0: a (10) runs; b (20) preempts it; b sleeps and a runs again; a blocks; idle; c (30),
# woken while a (the waker) runs, runs last. A wakeup of a while it is running is ignored.
CPU0 = [(1000, 0, 10, "a"), (2000, 0, 20, "b"), (3000, 1, 10, "a"), (5000, 2, 0, "swapper/0"),
        (6000, 0x80, 30, "c")]
WAKINGS0 = [(2500, 10, "a"), (4000, 30, "c")]
# CPU 1: b's second life there, then a task whose state is no known one.
CPU1 = [(1500, 0, 0, "swapper/1"), (3500, 0, 20, "b"), (4500, 0x400, 0, "swapper/1")]
STATE = "select t.tid, s.ts, s.dur, s.state, s.cpu from thread_state s join thread t using (utid)"
SCHED = "select t.tid, s.ts, s.dur, s.cpu, s.end_state from sched s join thread t using (utid)"


def _headed() -> pb.Trace:
    """A trace with the kernel's uname and one process track (the built-in engine reads traces
    of profinfer-perfetto's, which always have tracks)."""
    trace = pb.Trace()
    info = trace.packet.add(trusted_packet_sequence_id=7)
    info.system_info.utsname.sysname, info.system_info.utsname.release = "Linux", RELEASE
    track = trace.packet.add(trusted_packet_sequence_id=1).track_descriptor
    track.uuid, track.process.pid = 1, 10
    return trace


def _trace(tmp_path: Path) -> Path:
    trace = _headed()
    trace.packet.append(_bundle(0, CPU0, WAKINGS0))
    trace.packet.append(_bundle(1, CPU1))
    path = tmp_path / "sched.pftrace"
    path.write_bytes(trace.SerializeToString())
    return path


def _builtin(path: Path, sql: str) -> list[tuple[str, ...]]:
    db = importer.load(path, path.read_bytes())
    return sorted(tuple("" if v is None else str(v) for v in row) for row in db.execute(sql))


def _trace_processor(path: Path, sql: str) -> list[tuple[str, ...]]:
    assert TP_BIN is not None
    out = subprocess.run([TP_BIN, "-q", "/dev/stdin", str(path)], input=sql.encode(),
                         capture_output=True, check=True).stdout.decode()
    rows = list(csv.reader(io.StringIO(out)))[1:]
    return sorted(tuple("" if v == "[NULL]" else v for v in row) for row in rows)


def test_prev_state_reads_as_on_linux_4_14_and_later() -> None:
    assert [task_state(v) for v in (0, 0x100, 1, 2, 0x80, 0x81, 0xFF, 0x101, 0x200)] == [
        "R", "R+", "S", "D", "I", "SI", "SDT", "S", None]


def test_thread_states_by_trace_processors_rules(tmp_path: Path) -> None:
    states = _builtin(_trace(tmp_path), STATE)
    assert states == sorted([
        # a: runnable once b preempts it (its wakeup at 2500 changes nothing), runs again,
        # blocks; b: sleeps, then runs on CPU 1 until a switch of a state no kernel writes;
        # c: woken, then running when the trace ends
        ("10", "2000", "1000", "R", ""), ("10", "3000", "2000", "Running", "0"),
        ("10", "5000", "-1", "D", ""),
        ("20", "2000", "1000", "Running", "0"), ("20", "3000", "500", "S", ""),
        ("20", "3500", "1000", "Running", "1"), ("20", "4500", "-1", "", ""),
        ("30", "4000", "2000", "R", ""), ("30", "6000", "-1", "Running", "0"),
    ])
    sched = _builtin(tmp_path / "sched.pftrace", SCHED)
    assert ("0", "5000", "1000", "0", "I") in sched and ("30", "6000", "-1", "0", "") in sched
    assert not any(row[1] == "1000" for row in sched)  # a CPU's first switch starts nothing


@pytest.mark.skipif(TP_BIN is None, reason="needs PROFINFER_TP_BIN")
def test_trace_processor_agrees(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    for sql in (STATE, SCHED):
        assert _builtin(path, sql) == _trace_processor(path, sql)


@pytest.mark.skipif(TP_BIN is None, reason="needs PROFINFER_TP_BIN")
def test_every_prev_state_reads_as_trace_processor_reads_it(tmp_path: Path) -> None:
    values = [*range(0x400), 0x800, 0x8000]
    # switch k starts task 1000 + k and ends the slice of task 999 + k with its state, but a
    # CPU's first switch starts no slice: task 1001 + i ends with values[i]
    states = [0, 0, *values, 0]
    switches = [(1000 + 10 * i, state, 1000 + i, "t") for i, state in enumerate(states)]
    trace = _headed()
    trace.packet.append(_bundle(0, switches))
    path = tmp_path / "states.pftrace"
    path.write_bytes(trace.SerializeToString())
    theirs = {tid: state for tid, state in _trace_processor(
        path, "select t.tid, s.end_state from sched s join thread t using (utid)")}
    for i, value in enumerate(values):
        assert (task_state(value) or "") == theirs[str(1001 + i)], hex(value)


def test_a_kernel_without_sched_tracepoints_is_a_warning(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    def no_tracepoints(cpus: list[int]) -> None:
        raise ProfinferError("this kernel has no sched_switch tracepoint")

    monkeypatch.setattr("profinfer_perfetto.capture.recorder.SchedProbes", no_tracepoints)
    with _sched_probes(RecordRequest(command=["true"], sched=True), os.getpid()) as (probes, note):
        assert probes is None
        assert note is not None and note.startswith("warning: --sched: this kernel has no")
    with _sched_probes(RecordRequest(command=["true"]), os.getpid()) as (probes, note):
        assert probes is None and note is None


def test_events_are_read_in_time_order() -> None:
    events = SchedEvents()
    events.add(_bundle(0, CPU0, WAKINGS0).ftrace_events)
    seen: list[int] = []

    def thread(tid: int, comm: str) -> int:
        seen.append(tid)
        return tid

    tables(events, thread)
    assert seen[:3] == [10, 20, 10]
