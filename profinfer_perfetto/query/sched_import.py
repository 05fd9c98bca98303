"""The built-in engine's scheduling tables, `sched` and `thread_state`, from the compact sched
bundles a --sched trace holds, with trace_processor's rules (v58):

- events are taken in timestamp order (ties in file order);
- a CPU's first switch only says who runs there (it starts no slice); each later one ends the
  running slice with the previous task's state and starts the next task's; the last slice of
  a CPU is open (dur -1, no end state); the idle task is utid 0 and has no thread states;
- a switch closes the previous task's state (unless it was not Running: data was lost, the
  state stays open) and opens its new one; it closes the next task's state and opens Running;
- a wakeup on a CPU that has had no switch yet is dropped; one of a task that never had a state
  opens `R`; one of a task that is Running or `R` is ignored; else it closes the state and opens
  `R`, with the task running on the waker's CPU as the waker;
- prev_state reads as on Linux 4.14+: 0 `R`, 0x100 alone `R+` (preempted), else up to three
  letters of the bits `SDTtXZPI` in that order, >= 0x200 none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profinfer_perfetto.query.wirescan import Malformed, text

_LETTERS = "SDTtXZPI"
_PREEMPTED = 0x100
_INVALID = 0x200
RUNNING, RUNNABLE = "Running", "R"

SchedRow = list[Any]
"""ts, dur, cpu, utid, end_state, priority."""
StateRow = list[Any]
"""ts, dur, cpu, utid, state, waker_utid."""


def task_state(prev_state: int) -> str | None:
    """sched_switch's prev_state as trace_processor writes it."""
    if prev_state < 0 or prev_state >= _INVALID:
        return None
    if not prev_state & 0xFF:
        return "R+" if prev_state else "R"
    return "".join(c for i, c in enumerate(_LETTERS) if prev_state >> i & 1)[:3]


@dataclass
class SchedEvents:
    """Compact sched events as read, in file order: (ts, file order, cpu, is switch, state or
    target cpu, tid, prio, comm)."""

    rows: list[tuple[int, int, int, bool, int, int, int, str]] = field(default_factory=list)

    def add(self, bundle: Any) -> None:
        """An ftrace_events bundle's compact sched events (Malformed where its columns differ
        in length or name a comm past its intern table)."""
        c, cpu = bundle.compact_sched, bundle.cpu
        names = [text(n) for n in c.intern_table]
        for is_switch, columns in (
                (True, (c.switch_timestamp, c.switch_prev_state, c.switch_next_pid,
                        c.switch_next_prio, c.switch_next_comm_index)),
                (False, (c.waking_timestamp, c.waking_target_cpu, c.waking_pid, c.waking_prio,
                         c.waking_comm_index))):
            if len(set(map(len, columns))) > 1:
                raise Malformed("a compact sched bundle's columns differ in length")
            if any(i >= len(names) for i in columns[-1]):
                raise Malformed("a compact sched event names a comm its bundle does not hold")
            for ts, value, tid, prio, comm in zip(_times(columns[0]), *columns[1:], strict=True):
                self.rows.append((ts, len(self.rows), cpu, is_switch, value, tid, prio,
                                  names[comm]))


def _times(deltas: Any) -> list[int]:
    """Absolute times from a bundle's delta-encoded ones (uint64, which wrap as int64)."""
    times: list[int] = np.cumsum(np.asarray(deltas, np.uint64).view(np.int64)).tolist()
    return times


class _States:
    """thread_state rows, with each thread's open one."""

    def __init__(self) -> None:
        self.rows: list[StateRow] = []
        self.last: dict[int, int] = {}

    def running(self, utid: int) -> bool:
        """Its last state is Running (or it has none)."""
        last = self.last.get(utid)
        return last is None or self.rows[last][4] == RUNNING

    def blocked(self, utid: int) -> bool:
        """It has a state, and that is neither Running nor R."""
        last = self.last.get(utid)
        return last is not None and self.rows[last][4] not in (RUNNING, RUNNABLE)

    def close(self, utid: int, ts: int) -> None:
        last = self.last.get(utid)
        if last is not None:
            self.rows[last][1] = ts - self.rows[last][0]

    def open(self, utid: int, ts: int, state: str | None, cpu: int | None = None,
             waker: int | None = None) -> None:
        if utid == 0:
            return
        self.last[utid] = len(self.rows)
        self.rows.append([ts, -1, cpu, utid, state, waker])


def tables(events: SchedEvents, thread: Callable[[int, str], int]
           ) -> tuple[list[SchedRow], list[StateRow]]:
    """The sched and thread_state rows; `thread(tid, comm)` is the utid of a task seen by the
    scheduler (named by it, where nothing better named it)."""
    slices: list[SchedRow] = []
    states = _States()
    running: dict[int, tuple[int, int]] = {}
    """cpu -> the utid running there and its open slice (-1 before the first slice)."""
    for ts, _, cpu, is_switch, value, tid, prio, comm in sorted(events.rows):
        if not is_switch:
            if cpu not in running:
                continue
            wakee = thread(tid, comm) if tid else 0
            if wakee in states.last and not states.blocked(wakee):
                continue
            states.close(wakee, ts)
            states.open(wakee, ts, RUNNABLE, waker=running[cpu][0])
            continue
        utid = thread(tid, comm) if tid else 0
        if cpu not in running:
            running[cpu] = (utid, -1)
            continue
        prev, open_slice = running[cpu]
        state = task_state(value)
        if open_slice >= 0:
            slices[open_slice][1] = ts - slices[open_slice][0]
            slices[open_slice][4] = state
        if states.running(prev):
            states.close(prev, ts)
        states.open(prev, ts, state)
        states.close(utid, ts)
        states.open(utid, ts, RUNNING, cpu)
        running[cpu] = (utid, len(slices))
        slices.append([ts, -1, cpu, utid, None, prio])
    return slices, states.rows
