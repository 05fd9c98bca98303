"""Scheduling (record --sched) as Perfetto's own data: what trace_processor turns into its
`sched`, `thread_state`, `thread` and `process` tables and ui.perfetto.dev into CPU tracks.

- a `system_info` packet with the kernel's uname, by which trace_processor reads sched_switch's
  prev_state bits;
- a `process_tree` packet: each scheduled task's process and name, and the program of each
  process other than the target (the target's track descriptor names it);
- `ftrace_events` bundles, one CPU each, in Perfetto's compact sched format: per switch its
  time, the previous task's state, the next task's tid, priority and interned name (the previous
  task is the one the switch before it switched in); per wakeup its time, tid, target CPU,
  priority and name, in the bundle of the CPU the waker ran on.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from profinfer_perfetto.capture.events import SchedKind
from profinfer_perfetto.capture.run import Scheduling
from profinfer_perfetto.encode import profinfer_trace_pb2 as pb

BUNDLE_RECORDS = 8192
"""Records per ftrace bundle."""


def _deltas(ts: np.ndarray) -> list[int]:
    deltas: list[int] = np.diff(ts.astype(np.int64), prepend=0).tolist()
    return deltas


def _bundle(cpu: int, records: np.ndarray, sequence: int) -> pb.TracePacket:
    packet = pb.TracePacket(trusted_packet_sequence_id=sequence)
    bundle = packet.ftrace_events
    bundle.cpu = cpu
    compact = bundle.compact_sched
    names, index = np.unique(records["comm"], return_inverse=True)
    compact.intern_table.extend(n.decode(errors="replace") for n in names.tolist())
    switch = records["kind"] == SchedKind.SWITCH
    sw, sw_index = records[switch], index.reshape(-1)[switch]
    compact.switch_timestamp.extend(_deltas(sw["ts"]))
    compact.switch_prev_state.extend(sw["prev_state"].tolist())
    compact.switch_next_pid.extend(sw["tid"].tolist())
    compact.switch_next_prio.extend(sw["prio"].tolist())
    compact.switch_next_comm_index.extend(sw_index.tolist())
    waking = records["kind"] == SchedKind.WAKING
    wk, wk_index = records[waking], index.reshape(-1)[waking]
    compact.waking_timestamp.extend(_deltas(wk["ts"]))
    compact.waking_pid.extend(wk["tid"].tolist())
    compact.waking_target_cpu.extend(wk["target_cpu"].tolist())
    compact.waking_prio.extend(wk["prio"].tolist())
    compact.waking_comm_index.extend(wk_index.tolist())
    compact.waking_common_flags.extend([0] * len(wk))
    return packet


def _process_tree(sched: Scheduling, pid: int, ts: int, sequence: int) -> pb.TracePacket:
    """The target's process is left out: its track descriptor names it already."""
    packet = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=sequence)
    tree = packet.process_tree
    for tgid, program in sorted(sched.programs.items()):
        if tgid != pid:
            tree.processes.add(pid=tgid, cmdline=[program])
    for tid, task in sorted(sched.tasks.items()):
        if task.tgid:
            tree.threads.add(tid=tid, tgid=task.tgid, name=task.name)
    return packet


def sched_packets(sched: Scheduling, pid: int, ts: int, sequence: int,
                  first: bool = True) -> Iterator[pb.TracePacket]:
    """The packets of a recording's scheduling (or of a chunk's: `first` for the first);
    `ts`: the recording's first timestamp, where the process tree is said to hold;
    `sequence`: a packet sequence of their own."""
    if first:
        sysname, release, version, machine = sched.kernel
        yield pb.TracePacket(
            trusted_packet_sequence_id=sequence, first_packet_on_sequence=True,
            previous_packet_dropped=1,
            sequence_flags=pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
            system_info=pb.SystemInfo(utsname=pb.Utsname(sysname=sysname, release=release,
                                                         version=version, machine=machine)))
    records = sched.records
    if sched.tasks:
        yield _process_tree(sched, pid, min([ts, *records["ts"][:1].tolist()]), sequence)
    for cpu in np.unique(records["cpu"]).tolist():
        mine = records[records["cpu"] == cpu]
        for start in range(0, len(mine), BUNDLE_RECORDS):
            yield _bundle(cpu, mine[start:start + BUNDLE_RECORDS], sequence)
