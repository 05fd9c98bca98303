"""Scheduling (record --sched): every context switch and wakeup on the target's CPUs.

The sched program (probes/sched.bpf.c) watches the CPUs the target may run on (its threads'
affinity when the capture starts) for as long as the capture lasts. What it hands over is
completed here with what only /proc knows, while the tasks are still there: each task's process
and each process's program, so the trace can say who ran instead of the target.
"""

from __future__ import annotations

import os
from collections.abc import Container
from types import TracebackType

import numpy as np

from profinfer_perfetto.capture import abi, process
from profinfer_perfetto.capture.events import SCHED
from profinfer_perfetto.capture.program import probe_source
from profinfer_perfetto.capture.ringbuf import RingReader
from profinfer_perfetto.capture.run import ProbeCost, Task
from profinfer_perfetto.capture.session import import_bcc, program_costs
from profinfer_perfetto.errors import ProfinferError

SCHED_PAGES = 1024
"""The sched ring: 4 MiB, 65536 records, the switches of a busy CPU over several drains."""
TRACEPOINTS = ("sched_switch", "sched_waking")


def kernel() -> tuple[str, str, str, str]:
    """uname: sysname, release, version, machine."""
    uname = os.uname()
    return uname.sysname, uname.release, uname.version, uname.machine


def sched_text(max_cpus: int) -> str:
    """The exact sched program BCC compiles."""
    return (abi.c_defines({"MAX_CPUS": max_cpus, "SCHED_PAGES": SCHED_PAGES}) + abi.header()
            + probe_source("sched.bpf.c") + abi.layout_checks(abi.SCHED_STRUCTS))


def tasks_of(records: np.ndarray, known: Container[int] = ()) -> dict[int, Task]:
    """The tasks `records` name that are not `known`: each one's process (from the switches away
    from it, else /proc) and its latest name. Call while they may still be there."""
    tasks: dict[int, Task] = {}
    for tid, comm in zip(records["tid"].tolist(), records["comm"].tolist(), strict=True):
        if tid not in known:
            tasks[tid] = Task(0, comm.decode(errors="replace"))
    for tid, tgid in zip(records["prev_tid"].tolist(), records["prev_tgid"].tolist(),
                         strict=True):
        if tid not in known:
            tasks.setdefault(tid, Task(0, "")).tgid = tgid
    tasks.pop(0, None)
    for tid, task in tasks.items():
        if not task.tgid:
            task.tgid = process.status_number(tid, "Tgid")
        if not task.name:
            task.name = process.thread_name(task.tgid or tid, tid) or ""
    return tasks


def programs_of(tasks: dict[int, Task]) -> dict[int, str]:
    """The program of each process the tasks belong to."""
    programs: dict[int, str] = {}
    for task in tasks.values():
        if task.tgid and task.tgid not in programs:
            leader = tasks.get(task.tgid, task)
            programs[task.tgid] = next(iter(process.process_cmdline(task.tgid)), leader.name)
    return programs


class SchedProbes:
    """The sched program, loaded and attached to the sched tracepoints for `cpus`."""

    def __init__(self, cpus: list[int]) -> None:
        bcc = import_bcc()
        missing = [tp for tp in TRACEPOINTS if not bcc.BPF.tracepoint_exists("sched", tp)]
        if missing:
            raise ProfinferError(f"this kernel has no {' or '.join(missing)} tracepoint")
        try:
            self._bpf = bcc.BPF(text=sched_text(os.cpu_count() or 1).encode())
        except Exception as exc:
            raise ProfinferError(f"the BPF sched program did not load: {exc}") from exc
        watched = self._bpf[b"cpus"]
        for cpu in cpus:
            watched[watched.Key(cpu)] = watched.Leaf(1)
        self.cpus = cpus
        self._ring = RingReader(self._bpf[b"sched"].map_fd,
                                SCHED_PAGES * os.sysconf("SC_PAGE_SIZE"), SCHED)

    def fill(self) -> float:
        """How full the ring is (0 to 1)."""
        return self._ring.fill()

    def read(self) -> np.ndarray:
        """The records since the last read, in arrival order."""
        return self._ring.read()

    def costs(self) -> dict[str, ProbeCost]:
        return program_costs(self._bpf)

    def lost(self) -> int:
        """Records dropped because the ring was full."""
        lost = self._bpf[b"lost"]
        return int(lost[lost.Key(0)].value)

    def close(self) -> None:
        self._ring.close()
        self._bpf.cleanup()

    def __enter__(self) -> SchedProbes:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

