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
from profinfer_perfetto.capture.events import EVENT, NODE, ROUTE, Ring, StopReason
from profinfer_perfetto.capture.ggml import GgmlInfo
from profinfer_perfetto.capture.program import RingSizes, program_text
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.session import ProbeCost, ProbeSession
from profinfer_perfetto.capture.target import Probe, ProbePlan
from profinfer_perfetto.capture.watch import Watcher, loader_probe, resume
from profinfer_perfetto.errors import ProfinferError

DRAIN_INTERVAL_S = 0.1
RUNTIME_WAIT_S = 30.0
"""Without --duration: how long a followed command has to load the ggml runtime."""
WATCH_POLL_S = 0.05
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
    from_start: bool = True
    """The capture saw the process from its start (a launched command), not from --pid."""

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
    routes: np.ndarray = field(default_factory=lambda: np.empty(0, ROUTE))
    """Mixture-of-Experts routing records (ROUTE), where the build has such ops."""


@dataclass(frozen=True)
class RecordRequest:
    command: list[str] | None = None
    pid: int | None = None
    duration_s: float | None = None
    counters: tuple[str, ...] = ("context-switches",)
    libs: tuple[Path, ...] = ()
    rings: RingSizes = field(default_factory=RingSizes)
    selection: Selection = field(default_factory=Selection)


def plan(request: RecordRequest) -> ProbePlan | None:
    """Where the probes go, from the target's files; None for a command whose own files do not
    hold the ggml runtime (it is found when the command runs: `record` follows it)."""
    extra = list(request.libs)
    if request.command:
        objects = target.objects_of_command(request.command, extra)
        return target.plan_probes(objects) if target.runtime_in(objects) else None
    if request.pid is None:
        raise ProfinferError("give a command to run or --pid of a running process")
    return target.plan_probes(target.objects_of_process(request.pid, extra))


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProfinferError("recording attaches eBPF probes and needs root: run it with sudo")


def _op_id(ggml: GgmlInfo, name: str) -> int:
    op = ggml.op_id(name)
    if op < 0:
        raise ProfinferError(f"--ops: {name} is no op of ggml {ggml.version} "
                             "(op names are like MUL_MAT, FLASH_ATTN_EXT)")
    return op


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


class _Launched:
    """A launched command, held before its exec until `release`."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc, self._go = _launch_paused(command)

    def release(self) -> None:
        os.write(self._go, b"g")
        os.close(self._go)

    def ended(self) -> str | None:
        """How the command ended, or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        if code < 0:
            return f"target killed by {signal.Signals(-code).name}"
        return "complete" if code == 0 else f"target exited with code {code}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _runtime_of(watcher: Watcher, tgid: int, reason: int,
                extra: list[Path]) -> ProbePlan | None:
    """The probe plan for a stopped process of the tree, if it has mapped the runtime."""
    try:
        objects = target.objects_of_process(tgid, [])
    except ProfinferError:  # it is gone already
        return None
    if reason == StopReason.EXEC:
        loader = target.loader_in(objects)
        if loader is not None:
            watcher.watch_loader(loader_probe(loader))
    if not target.runtime_in(objects):
        return None
    try:
        return target.plan_probes(objects + extra)
    except ProfinferError:
        os.kill(tgid, signal.SIGKILL)
        raise


def _await_runtime(launched: _Launched, request: RecordRequest) -> tuple[int, ProbePlan]:
    """Release the command and follow its processes until one maps the ggml runtime; that
    process is returned stopped, before any of the runtime's code ran."""
    wait_s = request.duration_s or RUNTIME_WAIT_S
    deadline = time.monotonic() + wait_s
    name = Path(launched.command[0]).name
    with Watcher(launched.proc.pid) as watcher:
        launched.release()
        while True:
            for tgid, reason in watcher.stops(WATCH_POLL_S).tolist():
                found = _runtime_of(watcher, tgid, reason, list(request.libs))
                if found is not None:
                    return tgid, found
                resume(tgid)
            ended = launched.ended()
            if ended is not None:
                raise ProfinferError(f"{name} ended ({ended}) without loading the ggml runtime: "
                                     "is it a llama.cpp (ggml) program?")
            if time.monotonic() > deadline:
                raise ProfinferError(f"{name} did not load the ggml runtime in its first "
                                     f"{wait_s:g} s (use --duration to wait longer)")


def record(
    request: RecordRequest,
    probe_plan: ProbePlan | None,
    on_attached: Callable[[int], None] | None = None,
) -> Recording:
    """Capture until the target ends, the duration passes or the recorder gets SIGINT/SIGTERM.

    With no `probe_plan` (the runtime is not among the command's own files: a wrapper, an
    interpreter, a dlopened backend) the command is followed until one of its processes maps
    the runtime, and that process is recorded. `on_attached(pid)` runs once the probes are in
    place, before the target runs on.
    """
    require_root()
    launched = _Launched(request.command) if request.command else None
    watched = launched is not None and probe_plan is None
    try:
        if probe_plan is None:
            assert launched is not None, "plan() plans a running process from its memory map"
            pid, probe_plan = _await_runtime(launched, request)
        elif launched is None:
            assert request.pid is not None
            pid = request.pid
            if not target.is_alive(pid):
                raise ProfinferError(f"no process with PID {pid}")
        else:
            pid = launched.proc.pid
        session = _session(request, probe_plan)
    except BaseException:
        if launched is not None:
            launched.kill()
        raise
    with session, _Stop() as stop:
        try:
            _attach(session, request.selection, probe_plan, pid)
        except ProfinferError:
            if launched is not None:
                if watched:
                    os.kill(pid, signal.SIGKILL)
                launched.kill()
            raise
        begin, cpu_at_begin = boot_ns(), time.process_time()
        if on_attached is not None:
            on_attached(pid)
        if watched:
            resume(pid)
        elif launched is not None:
            launched.release()
        return _capture(session, request, probe_plan, pid, launched, stop, begin, cpu_at_begin,
                        named=launched is not None and not watched)


def _session(request: RecordRequest, probe_plan: ProbePlan) -> ProbeSession:
    selection = request.selection
    traced_ops = [_op_id(probe_plan.ggml, name) for name in selection.ops]
    text = program_text(probe_plan.ggml, list(request.counters), request.rings, selection,
                        probe_plan.sees_graph_builds)
    return ProbeSession(text, list(request.counters), request.rings, traced_ops,
                        steered=selection.detach)


def _attach(session: ProbeSession, selection: Selection, probe_plan: ProbePlan,
            pid: int) -> None:
    """The probes the selection wants from the start (with --detach, the op probes come
    later)."""
    probes = _probes(selection, probe_plan)
    session.attach(tuple(p for p in probes
                         if not (selection.detach and p.fn in OP_PROBES)), pid)
    if selection.gated and not selection.detach:
        session.arm(True)


def _probes(selection: Selection, probe_plan: ProbePlan) -> tuple[Probe, ...]:
    return tuple(p for p in probe_plan.probes if selection.barriers or p.fn != "barrier_enter")


def _capture(session: ProbeSession, request: RecordRequest, probe_plan: ProbePlan, pid: int,
             launched: _Launched | None, stop: _Stop, begin: int, cpu_at_begin: float,
             named: bool) -> Recording:
    """Drain the rings until the target ends; the capture began at `begin` (boot ns, with the
    recorder's CPU time at `cpu_at_begin`), once the probes were in place and before the target
    ran on. `named`: the target is the command itself (its name is the command's), not a
    process found by following it."""
    selection = request.selection
    event_chunks: list[np.ndarray] = []
    node_chunks: list[np.ndarray] = []
    route_chunks: list[np.ndarray] = []
    op_stats: list[tuple[int, np.ndarray]] = []
    threads: dict[int, str] = {}
    if named and launched is not None:
        process_name, cmdline = Path(launched.command[0]).name, list(launched.command)
    else:
        cmdline = target.process_cmdline(pid)
        process_name = Path(cmdline[0]).name if cmdline else target.process_name(pid)
    deadline = None if request.duration_s is None else time.monotonic() + request.duration_s
    status = "complete"

    def drain() -> None:
        events, nodes, routes = session.read()
        if routes.size:
            route_chunks.append(routes)
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
    op_probes = tuple(p for p in _probes(selection, probe_plan) if p.fn in OP_PROBES)

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
    if selection.detach:
        steerer.start()
    proc = None if launched is None else launched.proc
    while True:
        time.sleep(DRAIN_INTERVAL_S)
        drain()
        if launched is not None and (ended := launched.ended()) is not None:
            status = ended
            break
        if launched is None and not target.is_alive(pid):
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
    if selection.detach:
        steerer.join()
    drain()
    end = boot_ns()
    recorder_cpu = time.process_time() - cpu_at_begin
    lost = session.lost()
    notes = list(probe_plan.notes) + ([] if selection.barriers else [
        "--no-barriers: an op lasts until its thread's next op, barrier wait included"])
    if lost[Ring.ROUTES]:
        notes.append(f"{lost[Ring.ROUTES]} routing records lost to a full ring: some "
                     "Mixture-of-Experts ops have no expert ids")
    run = Run(
        ggml=probe_plan.ggml,
        pid=pid,
        process_name=process_name,
        cmdline=cmdline,
        threads=threads,
        counters=list(request.counters),
        lost_events=lost[Ring.EVENTS],
        lost_nodes=lost[Ring.NODES],
        begin_ns=begin,
        end_ns=end,
        status=status,
        notes=notes,
        recorder_cpu_s=round(recorder_cpu, 3),
        aggregate=selection.aggregate,
        probe_costs=session.costs(),
        from_start=launched is not None,
    )
    return Recording(
        events=np.concatenate(event_chunks) if event_chunks else np.empty(0, EVENT),
        nodes=np.concatenate(node_chunks) if node_chunks else np.empty(0, NODE),
        run=run,
        op_stats=op_stats,
        routes=np.concatenate(route_chunks) if route_chunks else np.empty(0, ROUTE),
    )
