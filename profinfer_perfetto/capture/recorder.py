"""Run a capture: start or find the target, attach the probes, drain the rings until it ends.

The result is a `Recording`: the events and node descriptors as numpy arrays, and what is
known about the process, its threads and how the capture ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import numpy as np

from profinfer_perfetto.capture import target
from profinfer_perfetto.capture.events import EVENT, NODE
from profinfer_perfetto.capture.ggml import GgmlInfo
from profinfer_perfetto.capture.program import RingSizes, program_text
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.session import ProbeCost, ProbeSession
from profinfer_perfetto.capture.target import ProbePlan
from profinfer_perfetto.errors import ProfinferError

DRAIN_INTERVAL_S = 0.1
STEER_WAIT_S = 0.2
"""--detach: the longest the steering thread sleeps before it looks whether to stop."""
OP_PROBES = frozenset({"op_begin", "fused_op_begin", "barrier_enter"})


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
    aggregate: bool = False
    """Ops were summed in BPF (--aggregate): see Recording.op_stats, there are no op events."""
    probe_costs: dict[str, ProbeCost] = field(default_factory=dict)
    """BPF program -> its runs and time in the kernel, when the kernel keeps BPF stats."""

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass
class Recording:
    events: np.ndarray
    nodes: np.ndarray
    run: Run
    op_stats: list[tuple[int, np.ndarray]] = field(default_factory=list)
    """With --aggregate: (time, OP_STATS rows so far) read at every drain."""


@dataclass(frozen=True)
class RecordRequest:
    command: list[str] | None = None
    pid: int | None = None
    duration_s: float | None = None
    counters: tuple[str, ...] = ("context-switches",)
    libs: tuple[Path, ...] = ()
    rings: RingSizes = field(default_factory=RingSizes)
    selection: Selection = field(default_factory=Selection)


def plan(request: RecordRequest) -> ProbePlan:
    extra = list(request.libs)
    if request.command:
        return target.plan_probes(target.objects_of_command(request.command, extra))
    if request.pid is None:
        raise ProfinferError("give a command to run or --pid of a running process")
    return target.plan_probes(target.objects_of_process(request.pid, extra))


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProfinferError("recording attaches eBPF probes and needs root: run it with sudo")


def _op_id(ggml: GgmlInfo, name: str) -> int:
    if name not in ggml.ops:
        raise ProfinferError(f"--ops: {name} is no op of ggml {ggml.version} "
                             "(op names are like MUL_MAT, FLASH_ATTN_EXT)")
    return ggml.ops.index(name)


def boot_ns() -> int:
    """Now on the clock the probes use (bpf_ktime_get_boot_ns)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


class _Stop:
    """Set by SIGINT or SIGTERM to the recorder; the capture then finalises."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# Run in the child: wait for a byte on the pipe, then become the command (same PID).
_HOLD_THEN_EXEC = (
    "import os, sys; os.read(int(sys.argv[1]), 1); os.execvp(sys.argv[2], sys.argv[2:])"
)


def _launch_paused(command: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start the command held before its exec until the probes are attached."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_THEN_EXEC, str(read_fd), *command], pass_fds=(read_fd,)
        )
    except OSError as exc:
        raise ProfinferError(f"cannot run {command[0]}: {exc.strerror}") from exc
    finally:
        os.close(read_fd)
    return proc, write_fd


def record(
    request: RecordRequest,
    probe_plan: ProbePlan,
    on_attached: Callable[[int], None] | None = None,
) -> Recording:
    """Capture until the target ends, the duration passes or the recorder gets SIGINT/SIGTERM.

    `on_attached(pid)` runs once the probes are in place, before a launched target starts.
    """
    require_root()
    selection = request.selection
    traced_ops = [_op_id(probe_plan.ggml, name) for name in selection.ops]
    text = program_text(probe_plan.ggml, list(request.counters), request.rings, selection,
                        probe_plan.sees_graph_builds)
    event_chunks: list[np.ndarray] = []
    node_chunks: list[np.ndarray] = []
    op_stats: list[tuple[int, np.ndarray]] = []
    threads: dict[int, str] = {}
    with ProbeSession(text, list(request.counters), request.rings, traced_ops,
                      steered=selection.detach) as session, \
            _Stop() as stop:
        proc: subprocess.Popen[bytes] | None = None
        if request.command:
            proc, go = _launch_paused(request.command)
            pid = proc.pid
        else:
            assert request.pid is not None
            pid = request.pid
            if not target.is_alive(pid):
                raise ProfinferError(f"no process with PID {pid}")
        dynamic = selection.detach
        probes = tuple(p for p in probe_plan.probes
                       if selection.barriers or p.fn != "barrier_enter")
        op_probes = tuple(p for p in probes if p.fn in OP_PROBES)
        try:
            session.attach(tuple(p for p in probes if not (dynamic and p.fn in OP_PROBES)), pid)
            if selection.gated and not dynamic:
                session.arm(True)
        except ProfinferError:
            if proc is not None:
                proc.kill()
                proc.wait()
            raise
        begin = boot_ns()
        cpu_at_begin = time.process_time()
        if on_attached is not None:
            on_attached(pid)
        if proc is not None:
            os.write(go, b"g")
            os.close(go)
        if request.command:
            process_name, cmdline = Path(request.command[0]).name, list(request.command)
        else:
            process_name, cmdline = target.process_name(pid), target.process_cmdline(pid)
        deadline = None if request.duration_s is None else time.monotonic() + request.duration_s
        status = "complete"

        def drain() -> None:
            events, nodes = session.read()
            if events.size:
                event_chunks.append(events)
                for tid in np.unique(events["tid"]).tolist():
                    if tid not in threads:
                        threads[tid] = target.thread_name(pid, tid) or process_name
            if nodes.size:
                node_chunks.append(nodes)
            if selection.aggregate:
                op_stats.append((boot_ns(), session.op_stats()))

        steering = threading.Event()

        def steer() -> None:
            """With --detach: op probes attached only while a chosen step runs or is next.

            Runs in its own thread, asleep until the probes ask for a change (or the capture
            ends): detaching uprobes waits for the kernel (0.7-0.9 s on Linux 6.18),
            so chosen steps closer than that can be missed.
            """
            while not steering.is_set():
                session.wait_for_steer(STEER_WAIT_S)
                step, armed = session.gate()
                want = selection.selected(step) or (step > 0 and selection.selected(step - 1))
                if want and not armed:
                    session.attach(op_probes, pid)
                    session.arm(True)
                elif armed and not want:
                    session.arm(False)
                    session.detach(op_probes)

        steerer = threading.Thread(target=steer, daemon=True)
        if dynamic:
            steerer.start()
        while True:
            time.sleep(DRAIN_INTERVAL_S)
            drain()
            if proc is not None and proc.poll() is not None:
                if proc.returncode < 0:
                    status = f"target killed by {signal.Signals(-proc.returncode).name}"
                elif proc.returncode > 0:
                    status = f"target exited with code {proc.returncode}"
                break
            if proc is None and not target.is_alive(pid):
                break
            if stop.signal is not None:
                status = f"recorder stopped by {signal.Signals(stop.signal).name}"
                if proc is not None:
                    proc.send_signal(stop.signal)
                    proc.wait()
                break
            if deadline is not None and time.monotonic() >= deadline:
                status = "complete" if proc is None else "duration reached"
                if proc is not None:
                    proc.terminate()
                    proc.wait()
                break
        steering.set()
        if dynamic:
            steerer.join()
        drain()
        end = boot_ns()
        recorder_cpu = time.process_time() - cpu_at_begin
        lost_events, lost_nodes = session.lost()
        probe_costs = session.costs()
    run = Run(
        ggml=probe_plan.ggml,
        pid=pid,
        process_name=process_name,
        cmdline=cmdline,
        threads=threads,
        counters=list(request.counters),
        lost_events=lost_events,
        lost_nodes=lost_nodes,
        begin_ns=begin,
        end_ns=end,
        status=status,
        notes=list(probe_plan.notes) + ([] if selection.barriers else [
            "--no-barriers: an op lasts until its thread's next op, barrier wait included"]),
        recorder_cpu_s=round(recorder_cpu, 3),
        aggregate=selection.aggregate,
        probe_costs=probe_costs,
    )
    return Recording(
        events=np.concatenate(event_chunks) if event_chunks else np.empty(0, EVENT),
        nodes=np.concatenate(node_chunks) if node_chunks else np.empty(0, NODE),
        run=run,
        op_stats=op_stats,
    )
