"""record's trace written beside the run: `record --follow`'s follower.

record's default keeps the run's records in OUTPUT.records (capture/spill.py) and writes the
trace from them. A follower writes it while the run goes, so that when the run ends only the
drains it has not reached yet are left. It is a process of its own (`python -m
profinfer_perfetto.encode.follow FOLDER COUNTERS RECORDER`: a fresh interpreter, with none of the
recorder's threads, locks or BPF descriptors, and not a thread sharing the recorder's GIL with
its drains) at SCHED_IDLE: it runs only on CPU time no one else wants. Where a core is free it
keeps up (competing with the target for memory bandwidth and cache only); where none is, it
falls behind and catches up once the run ends, when the recorder gives it the normal priority
back.

It reads the drains as the recorder writes them whole (a row of the index each) and writes
the trace with TraceStream in the records folder (TRACE_FILE.part, then TRACE_FILE); the
recorder hands it the final run on its stdin, waits for it and gives the trace OUTPUT's name.
The trace is the same, byte for byte, as write_trace's of the same folder after the run where
that writes it in one sequence (not in units, encode/units.py, which answer every query the same
on other sequences): that writes every chunk with the final run, the follower with the run as
known (RUN_FILE) when it read the drain, which differs only in what the final chunk alone says
(FINAL_ONLY) unless a thread came later: the follower then starts over.

A follower that fails or is killed leaves the records whole: the recorder writes the trace
from them after the run, as without it. One whose recorder dies is killed with it
(PR_SET_PDEATHSIG); what it wrote stays in the records folder, which `recover` removes once it
has written the trace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from profinfer_perfetto.capture import process
from profinfer_perfetto.capture.run import Recording, Records, Run, drained_dtypes
from profinfer_perfetto.capture.spill import (
    Drains,
    index_rows,
    left_run,
    make_durable,
    read_drains,
    run_json,
)
from profinfer_perfetto.encode.stream import TraceStream
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.model.totals import RunTotals
from profinfer_perfetto.model.trace_model import TraceModel

MODULE = "profinfer_perfetto.encode.follow"
TRACE_FILE = "trace.pftrace"
"""The follower's trace, in the records folder, until the recorder gives it OUTPUT's name."""
POLL_S = 0.1
"""How often the follower looks for new drains (the recorder drains every 100 ms)."""
TAKE_EVENTS = 20_000
"""Events written since the last take that the follower takes at once (a busy target's at
every look: what is left when the run ends stays small)."""
TAKE_S = 1.0
"""The longest a slow target's drains wait to be taken: each take reads the folder's run and
files anew, 4-9 ms of CPU on this VM, which at every look of a slow target cost 5-9 % of a core
(2026-12-03, drains of 40 events)."""
FINAL_ONLY: dict[str, Any] = {
    "end_ns": 0, "status": "", "notes": [], "recorder_cpu_s": 0.0, "drain_gap_s": 0.0,
    "probe_costs": {},
    "counted": {}, "lost_events": 0, "lost_nodes": 0}
"""What of a run only its final chunk says (the `record` slice; a chunk's end is its own), and
the run as known before its end leaves unset."""
PR_SET_PDEATHSIG = 1


@dataclass
class Followed:
    """What a follower wrote (the records folder's TRACE_FILE)."""

    totals: RunTotals
    last: TraceModel
    """The run's last chunk's model."""
    packets: int
    drains: int
    left: int
    """The drains it had not read when the run ended."""
    started_over: int
    """Times a thread came after chunks were written (they were written anew)."""
    cpu_s: float
    """The follower's CPU time, all of it (the run's and the rest after it)."""
    peak_mb: float

    def how(self) -> str:
        """How the trace was written, for record's summary."""
        again = (f" (it started over {self.started_over} times: a thread came late)"
                 if self.started_over else "")
        return (f"by its follower at idle priority, which had {self.left} of {self.drains} "
                f"drains left when the run ended{again}; its CPU {self.cpu_s:.2f} s "
                f"({self.cpu_s * 1e6 / max(self.totals.events, 1):.2f} µs per event), peak memory "
                f"{self.peak_mb:.0f} MB")


def noted(recording: Recording, notes: list[str]) -> Recording:
    """The recording with `notes` added to its run's."""
    return replace(recording, run=replace(recording.run, notes=[*recording.run.notes, *notes]))


class Follower:
    """The recorder's side of its follower."""

    def __init__(self, proc: subprocess.Popen[bytes], folder: Path) -> None:
        self.proc, self.folder = proc, folder

    @staticmethod
    def start(folder: Path, counters: int) -> Follower | str:
        """A follower of the records `folder` (of a run reading `counters` perf counters) at
        SCHED_IDLE; why there is none where there cannot be one."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", MODULE, str(folder), str(counters), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return f"no follower process ({exc.strerror})"
        try:
            os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))
        except OSError as exc:
            Follower(proc, folder).stop()
            return f"no idle priority ({exc.strerror})"
        return Follower(proc, folder)

    def finish(self, run: Run, output: Path) -> Followed | None:
        """Hand the follower the final run, wait for its trace and give it `output`'s name;
        None (said why) if the follower failed: the records are all there."""
        _normal_priority(self.proc.pid)
        out, _ = self.proc.communicate(pickle.dumps(run))
        if self.proc.returncode != 0:
            print(f"profinfer-perfetto: the trace's follower failed (exit status "
                  f"{self.proc.returncode}): writing the trace from the run's records",
                  file=sys.stderr, flush=True)
            return None
        followed = pickle.loads(out)  # this process's own child's
        assert isinstance(followed, Followed)
        try:
            os.replace(self.folder / TRACE_FILE, output)
        except OSError as exc:
            raise ProfinferError(f"cannot write {output}: {exc.strerror}") from None
        make_durable([output])
        return followed

    def stop(self) -> None:
        """The capture failed: the follower goes (its records stay for `recover`)."""
        self.proc.kill()
        self.proc.wait()


def _normal_priority(pid: int) -> None:
    """Every thread of process `pid` back at the normal priority (the run is over: the rest of
    the trace is as urgent as the after-run write). One that cannot be is only slower."""
    with contextlib.suppress(OSError):
        for tid in process.threads(pid):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


class Following:
    """The follower's side: the trace of a records folder a recorder writes."""

    def __init__(self, folder: Path, dtypes: dict[str, np.dtype]) -> None:
        self.folder, self.dtypes = folder, dtypes
        self.started_over = 0
        self.taken = time.monotonic()
        """When the follower last took drains (monotonic s)."""
        self._begin()

    def _begin(self) -> None:
        self.stream = TraceStream(self.folder / TRACE_FILE)
        self.read = 0
        """Drains handed to the stream."""
        self.views: set[str] = set()
        """The runs (_view) the stream may have written chunks with."""
        self.events = False
        """A drain with events was handed to the stream (a chunk is cut only among them)."""

    def until_ended(self, ends: BinaryIO) -> Run | None:
        """Follow the folder until the recorder writes the final run to `ends` (None: it went
        away without one)."""
        while not select.select([ends], [], [], POLL_S)[0]:
            self.follow()
        data = ends.read()
        return pickle.loads(data) if data else None  # the recorder's, this process's parent

    def follow(self) -> None:
        """Take the drains written whole since the last take, once they hold TAKE_EVENTS events
        or TAKE_S has passed since."""
        new = index_rows(self.folder, len(self.dtypes))[self.read:]
        if len(new) == 0 or (new[:, 0].sum() < TAKE_EVENTS
                             and time.monotonic() - self.taken < TAKE_S):
            return
        self.taken = time.monotonic()
        drains = read_drains(self.folder, self.dtypes, self.read)
        if len(drains.rows) == 0:
            drains.close()
            return
        run = left_run(self.folder)
        view = _view(run)
        if self.views - {view}:
            drains.close()
            self._start_over()
            return
        self._take(drains, run, view)

    def _take(self, drains: Drains, run: Run, view: str) -> None:
        for drained in drains:
            if self.events:
                self.views.add(view)
            self.events = self.events or len(drained.events) > 0
            self.stream(drained, run)
            self.read += 1

    def _start_over(self) -> None:
        """Chunks went with a run unlike the rest of it (a thread came since): write anew."""
        self.stream.abandon()
        self.stream.file.part.unlink(missing_ok=True)
        self.started_over += 1
        self._begin()

    def finish(self, run: Run) -> Followed:
        """The rest of the run, which ended as `run` says: the trace whole."""
        drains = read_drains(self.folder, self.dtypes, self.read)
        left = len(drains.rows)
        ended = noted(Recording(**vars(Records.empty(len(run.counters))), run=run), drains.notes)
        view = _view(ended.run)
        if self.views - {view}:
            drains.close()
            self._start_over()
            drains = read_drains(self.folder, self.dtypes)
        self._take(drains, ended.run, view)
        self.stream.finish(ended)
        assert self.stream.last is not None, "finish() writes the run's last chunk"
        return Followed(self.stream.totals, self.stream.last, self.stream.packets, self.read,
                        left, self.started_over, time.process_time(),
                        process.status_number("self", "VmHWM") / 1024)


def _view(run: Run) -> str:
    """What of `run` a chunk before the last one is written with."""
    return run_json(replace(run, **FINAL_ONLY))


def _die_with(recorder: int) -> None:
    """End this process when the recorder ends (it was killed, say)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != recorder:  # it ended before prctl
        raise SystemExit(1)


def main(args: list[str]) -> int:
    """FOLDER COUNTERS RECORDER: follow the records FOLDER that the recorder (pid RECORDER)
    writes; write the trace's Followed to stdout once the recorder gives the final run."""
    folder, counters, recorder = Path(args[0]), int(args[1]), int(args[2])
    _die_with(recorder)
    try:
        following = Following(folder, drained_dtypes(counters))
        run = following.until_ended(sys.stdin.buffer)
        if run is None:
            return 1
        sys.stdout.buffer.write(pickle.dumps(following.finish(run)))
    except ProfinferError as exc:
        print(f"profinfer-perfetto (trace follower): {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    # Run from the module by its name: what it pickles then reads back in the recorder.
    from profinfer_perfetto.encode import follow

    sys.exit(follow.main(sys.argv[1:]))
