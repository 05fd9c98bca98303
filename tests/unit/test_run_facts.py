"""The facts of the machine and of the tasks a run's scheduling records name are taken while
the capture runs, kept in the run (and in the records folder's run.json), and written from
there: a trace written after the tasks ended, or by `recover` on another machine, says what the
capture saw, not what /proc and uname say then."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np

from profinfer_perfetto.capture.events import SCHED, SchedKind
from profinfer_perfetto.capture.run import Drained, Task
from profinfer_perfetto.capture.spill import Spill, spill_path
from profinfer_perfetto.commands.recover import RecoverCommand
from tests import synthetic
from tests.trace_reader import packets

KERNEL = ("Linux", "0.0.1-captured", "#1 SMP", "pdp11")


def _ended_pid() -> int:
    """A process id whose process has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_recover_writes_the_tasks_and_kernel_the_capture_saw(tmp_path: Path) -> None:
    worker = _ended_pid()
    rec = synthetic.recording()
    run = replace(rec.run, sched_cpus=[0], kernel=KERNEL,
                  sched_tasks={worker: Task(worker, "captured-worker")},
                  sched_programs={worker: "/opt/captured-program"})
    sched = np.zeros(2, SCHED)
    sched["ts"], sched["kind"], sched["tid"], sched["comm"] = (
        [1_000, 2_000], SchedKind.SWITCH, [worker, 0], [b"captured-worker", b"swapper/0"])
    output = tmp_path / "run.pftrace"
    spill = Spill(spill_path(output), len(run.counters))
    assert spill(Drained(rec.events, rec.nodes, rec.routes, rec.batches, sched), run) is None
    assert spill.finish() is None
    spill.close()

    assert RecoverCommand(output).run() == 0

    written = list(packets(output.read_bytes()))
    (uname,) = [p.system_info.utsname for p in written if p.HasField("system_info")]
    assert (uname.sysname, uname.release, uname.version, uname.machine) == KERNEL
    trees = [p.process_tree for p in written if p.HasField("process_tree")]
    assert [(t.tid, t.tgid, t.name) for tree in trees for t in tree.threads] == [
        (worker, worker, "captured-worker")]
    assert [(p.pid, list(p.cmdline)) for tree in trees for p in tree.processes] == [
        (worker, ["/opt/captured-program"])]
