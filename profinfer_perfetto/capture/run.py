"""The plain data of a run: what was recorded, as arrays of probe records, and what is known of
the process and of how the capture went.

No BCC, no /proc, no files here: the BCC driver (capture/recorder.py) fills these types in, the
model, the encoder and `recover` read them.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

import numpy as np

from profinfer_perfetto.analysis.ggml import GgmlInfo
from profinfer_perfetto.capture.events import BATCH, NODE, ROUTE, SCHED, event_dtype
from profinfer_perfetto.machine.peaks import Peak


@dataclass(frozen=True)
class ProbeCost:
    """What one BPF program of ours cost: its runs and their summed time (kernel-measured,
    without the uprobe trap around each run)."""

    runs: int
    ns: int


@dataclass
class Task:
    """A task that was scheduled on a watched CPU."""

    tgid: int
    """Its process; 0 when it ended before it could be looked up."""
    name: str


@dataclass
class Run:
    """What was recorded and how the capture went."""

    ggml: GgmlInfo
    pid: int
    process_name: str
    cmdline: list[str]
    threads: dict[int, str]
    counters: list[str]
    lost_events: int
    lost_nodes: int
    begin_ns: int
    end_ns: int
    status: str
    """complete, or what cut the capture short (target crash, signal to the recorder)."""
    notes: list[str] = field(default_factory=list)
    recorder_cpu_s: float = 0.0
    """CPU time the recorder itself spent while capturing (draining the rings)."""
    drain_gap_s: float = 0.0
    """The longest time between two drains of the rings (the recorder drains every 100 ms; a
    ring holds about a second of a busy server's records): what says whether records lost to a
    full ring were the recorder's lateness."""
    aggregate: bool = False
    """Ops were summed in BPF (--aggregate): see Recording.op_stats, there are no op events."""
    probe_costs: dict[str, ProbeCost] = field(default_factory=dict)
    """BPF program -> its runs and time in the kernel, when the kernel keeps BPF stats."""
    from_start: bool = True
    """The capture saw the process from its start (a launched command), not from --pid."""
    sched_cpus: list[int] | None = None
    """With --sched: the CPUs watched."""
    sched_lost: int = 0
    """With --sched: scheduling records lost to a full ring."""
    peaks: tuple[Peak, ...] = ()
    """The machine's roofs, as calibrate measured them."""
    counted: dict[str, float] = field(default_factory=dict)
    """Per perf counter, the share of the capture the kernel counted it (under 1 where it was
    multiplexed with others; its counts are then scaled to the whole time)."""
    kernel: tuple[str, str, str, str] = ("", "", "", "")
    """uname of the machine that recorded: sysname, release, version, machine."""
    sched_tasks: dict[int, Task] = field(default_factory=dict)
    """With --sched: tid -> the process and name of each task the scheduling records named,
    looked up when the drain that brought them came (while the tasks were still there)."""
    sched_programs: dict[int, str] = field(default_factory=dict)
    """With --sched: process id -> the program of each process those tasks belong to."""

    @property
    def complete(self) -> bool:
        return self.status == "complete"


def drained_dtypes(counters: int) -> dict[str, np.dtype]:
    """The record layout of each of Records' fields, for a recording reading `counters` perf
    counters."""
    return {"events": event_dtype(counters), "nodes": NODE, "routes": ROUTE, "batches": BATCH,
            "sched": SCHED}


@dataclass
class Records:
    """The records of a run or of a stretch of it, one array per kind (drained_dtypes)."""

    events: np.ndarray
    nodes: np.ndarray
    routes: np.ndarray = field(default_factory=lambda: np.empty(0, ROUTE))
    """Mixture-of-Experts routing records (ROUTE), where the build has such ops."""
    batches: np.ndarray = field(default_factory=lambda: np.empty(0, BATCH))
    """The sequences of each token step's batch (BATCH)."""
    sched: np.ndarray = field(default_factory=lambda: np.empty(0, SCHED))
    """SCHED records (empty without --sched)."""

    @classmethod
    def empty(cls, counters: int) -> Records:
        """No records, for a run that reads `counters` perf counters."""
        return cls(**{name: np.empty(0, dtype)
                      for name, dtype in drained_dtypes(counters).items()})


Drained = Records
"""What one drain of the rings brought, in arrival order."""


@dataclass
class Scheduling:
    """What the sched program saw, with the tasks and processes it names."""

    records: np.ndarray
    """SCHED records in time order."""
    cpus: list[int]
    tasks: dict[int, Task] = field(default_factory=dict)
    """tid -> its process and name (the idle task, tid 0, is not here)."""
    programs: dict[int, str] = field(default_factory=dict)
    """Process id -> its program (argv[0]; the arguments are its own business), or its name for
    kernel threads and processes that ended before they could be looked up."""
    kernel: tuple[str, str, str, str] = ("", "", "", "")
    """uname: sysname, release, version, machine (how the kernel writes prev_state)."""
    lost: int = 0
    """Records dropped because the ring was full."""


def scheduling(records: np.ndarray, run: Run, known: Container[int] = ()) -> Scheduling:
    """`records` (SCHED) in time order, with the tasks they name but the `known` ones, and their
    processes' programs, as the capture looked them up (a task it did not: no process, no
    name)."""
    records = records[np.argsort(records["ts"], kind="stable")]
    named = set(records["tid"].tolist()) | set(records["prev_tid"].tolist())
    tasks = {tid: run.sched_tasks.get(tid, Task(0, "")) for tid in sorted(named - {0})
             if tid not in known}
    programs = {task.tgid: run.sched_programs[task.tgid] for task in tasks.values()
                if task.tgid in run.sched_programs}
    return Scheduling(records, run.sched_cpus or [], tasks, programs, run.kernel,
                      run.sched_lost)


@dataclass
class Recording(Records):
    """A run's records (or a chunk's, with the run as known at its end) and the run."""

    run: Run = field(kw_only=True)
    op_stats: list[tuple[int, np.ndarray]] = field(default_factory=list, kw_only=True)
    """With --aggregate: (time, OP_STATS rows so far) read at every drain."""
    scheduling: Scheduling | None = field(default=None, kw_only=True)
    """With --sched: the context switches and wakeups on the target's CPUs, with the tasks
    they name."""
